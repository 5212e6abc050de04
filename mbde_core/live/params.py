"""The parameter schema of every mbde node: ONE table for declarations and validation.

The nodes declare each parameter with a ``ParameterDescriptor`` built from this table
(description, read-only, range, choices in ``additional_constraints``), then coerce and
check the values with :func:`validate_values`; the tests (and users, through
:func:`validate_param_file`) check the ROS parameter files of ``config/params/`` against
the same table. Errors are one line naming the parameter (and the file and key path).

Conventions: every parameter is read-only (set at start: ``--ros-args -p``, a parameter
file, or a launch file); an integer where a double is expected is accepted (``-p rate:=200``
works, unlike plain rclpy); ``''`` / ``0`` / ``-1`` mean "automatic" where stated.
Relative file paths are looked up in the current directory, then in the package's
``config/`` folder (``estimators/default.yaml``), see :mod:`mbde_core.config.paths`.

A ROS parameter file holds ``<node name or /**>: {ros__parameters: {...}}`` sections;
``config/params/<executable>.yaml`` belongs to that executable.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from mbde_core.config.yamlnode import read_yaml
from mbde_core.errors import ConfigError, MbdeError
from mbde_core.estimators.registry import names
from mbde_core.estimators.stage.core import STAGE_DEFAULTS

TYPES = ("string", "bool", "integer", "double", "string_array")


class ParameterError(MbdeError):
    """A node parameter is invalid (one line, naming the parameter)."""


@dataclass(frozen=True)
class Param:
    """One node parameter: name, type (one of TYPES), default, description, optional
    inclusive range [min, max] (numbers) or choices (strings), unit (for humans)."""

    name: str
    type: str
    default: Any
    description: str
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None
    unit: str = ""

    def constraint_text(self) -> str:
        """Human-readable constraints (the descriptor's ``additional_constraints``)."""
        parts = [self.type]
        if self.choices:
            parts.append("one of: " + ", ".join(self.choices))
        if self.min is not None or self.max is not None:
            lo = "-inf" if self.min is None else f"{self.min:g}"
            hi = "inf" if self.max is None else f"{self.max:g}"
            parts.append(f"in [{lo}, {hi}]")
        if self.unit:
            parts.append(f"unit: {self.unit}")
        return "; ".join(parts)

    def coerce(self, value: Any) -> Any:
        """The value converted to this parameter's type; ValueError (one sentence) if not valid."""
        t = self.type
        if t == "string":
            if not isinstance(value, str):
                raise ValueError(f"expected a string, got {_show(value)}")
            if self.choices and value not in self.choices:
                raise ValueError(f"must be one of {', '.join(self.choices)}; got {value!r}")
            return value
        if t == "bool":
            if not isinstance(value, bool):
                raise ValueError(f"expected true or false, got {_show(value)}")
            return value
        if t == "string_array":
            if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
                return list(value)
            if not isinstance(value, (str, bytes)) and hasattr(value, "__len__") and len(value) == 0:
                return []  # an empty list (rclpy types [] as a byte array)
            raise ValueError(f"expected a list of strings, got {_show(value)}")
        # numbers
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"expected a number, got {_show(value)}")
        if t == "integer":
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError(f"expected an integer, got {value!r}")
                value = int(value)
        else:
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"must be finite, got {value!r}")
        if self.min is not None and value < self.min:
            raise ValueError(f"must be >= {self.min:g}, got {value!r}")
        if self.max is not None and value > self.max:
            raise ValueError(f"must be <= {self.max:g}, got {value!r}")
        return value


def _show(value) -> str:
    return f"{value!r} ({type(value).__name__})"


# ---------------------------------------------------------------------------- the table
def _model_params(what: str) -> list[Param]:
    return [
        Param("scenario_file", "string", "",
              f"scenario YAML (config/scenarios/) giving {what}; '' = use mechanism_file, "
              "or wait for the description topic /mbde/description"),
        Param("mechanism_file", "string", "",
              "mechanism YAML (config/mechanisms/), used when scenario_file is ''; its `sensors:` "
              "section, or sensors_file, lists the sensors"),
        Param("sensors_file", "string", "", "sensor YAML with a top-level `sensors:` list (with mechanism_file)"),
        Param("settings", "string_array", [],
              "scenario overrides 'key.path=value' as in `mbde simulate --set` (with scenario_file)"),
    ]


def _estimator_names() -> tuple[str, ...]:
    return names()


def _driver_params(kind: str, msg: str) -> list[Param]:
    return _model_params("the truth model and its sensors") + [
        Param("sensors", "string_array", [],
              f"names of the sensors to drive; [] = every {kind} sensor of the model ({msg})"),
        Param("rate", "double", 0.0, "sampling rate of every driven sensor; 0 = each sensor's configured rate "
              "(the ground truth must come at least that fast)", min=0.0, max=10000.0, unit="Hz"),
        Param("frame_id", "string", "", "header.frame_id of the readings; '' = each sensor's configured frame_id"),
        Param("seed", "integer", -1, "noise seed; -1 = the scenario's seed (then the readings equal those "
              "`mbde simulate` writes into a bag)", min=-1, max=2**31 - 1),
        Param("noise", "bool", True, "add the configured noise (false: exact readings of the ground truth)"),
    ]


def _build_schema() -> dict[str, tuple[Param, ...]]:
    return {
        "mechanism_model": tuple(_model_params("the mechanism and sensors to describe") + [
            Param("frame_id", "string", "", "frame of the geometry markers; '' = the scenario's frame_id (world)"),
        ]),
        "simulator": tuple([
            Param("scenario_file", "string", "", "scenario YAML to simulate (config/scenarios/); required"),
            Param("settings", "string_array", [], "scenario overrides 'key.path=value' as in `mbde simulate --set`"),
            Param("rate", "double", 0.0, "ground-truth publishing rate; 0 = the sensors' common grid "
                  "(every reading instant), must be a whole number of internal steps", min=0.0, max=10000.0,
                  unit="Hz"),
            Param("real_time_factor", "double", 1.0, "simulated seconds per wall-clock second", min=0.01, max=100.0),
            Param("duration", "double", 0.0, "simulated time; 0 = the scenario's duration", min=0.0, unit="s"),
            Param("loop", "bool", False, "restart the scenario when it ends (with publish_clock the clock "
                  "jumps back: estimators reset)"),
            Param("publish_clock", "bool", False, "publish /clock (simulated time; other nodes then need "
                  "use_sim_time:=true); false: stamps are the wall clock when the motion starts + simulated time"),
            Param("publish_description", "bool", False, "also publish /mbde/description (normally the "
                  "mechanism_model node does)"),
            Param("marker_rate", "double", 10.0, "ground-truth marker rate; 0 = off", min=0.0, max=100.0, unit="Hz"),
            Param("wait_for_subscribers", "integer", 0, "start only when /mbde/ground_truth (drivers) and "
                  "every sensor topic of the scenario (estimators) have this many subscribers; 0 = start at once",
                  min=0, max=100),
            Param("start_timeout", "double", 30.0, "start anyway after waiting this long for subscribers",
                  min=0.0, unit="s"),
            Param("start_time", "double", -1.0, "with publish_clock: simulated time of the first sample [s since "
                  "1970]; -1 = the scenario's start_time, else now rounded down to the second", min=-1.0, unit="s"),
            Param("tf_rate", "double", 50.0, "rate of /tf (world -> each body frame of the ground truth, "
                  "REP 105); 0 = off", min=0.0, max=1000.0, unit="Hz"),
            Param("tf_prefix", "string", "", "prefix of the ground truth's frames in /tf and /tf_static "
                  "(sensor mounts hang below them)"),
        ]),
        "imu_driver": tuple(_driver_params("sensor_msgs/Imu", "gyroscopes, accelerometers, IMUs")),
        "encoder_driver": tuple(_driver_params("sensor_msgs/JointState", "encoders, slider position sensors")),
        "estimator": tuple([
            Param("estimator", "string", "ukf", "the observer to run", choices=_estimator_names()),
            Param("config_file", "string", "", "estimator options YAML (config/estimators/default.yaml "
                  "format); '' = the shipped estimators/<estimator>.yaml, else estimators/default.yaml"),
            *_model_params("the estimator's model (with its model errors) and its sensors"),
            Param("frame_id", "string", "", "frame of the outputs; '' = the scenario's frame_id (world)"),
            Param("seed", "integer", 0, "run seed of the stochastic estimators (PF): the generator is seeded from (seed, estimator name), as by `mbde replay --seed`", min=0, max=2**31 - 1),
            Param("publish_rate", "double", 50.0, "rate of ~/state and ~/joint_states in data time; 0 = every "
                  "filter step", min=0.0, max=10000.0, unit="Hz"),
            Param("marker_rate", "double", 10.0, "rate of ~/markers; 0 = off", min=0.0, max=100.0, unit="Hz"),
            Param("particles_rate", "double", 10.0, "rate of ~/particles (PF only); 0 = off", min=0.0,
                  max=1000.0, unit="Hz"),
            Param("particles_top_k", "integer", 30, "PF hypotheses drawn in the markers (highest weights)",
                  min=0, max=1000),
            Param("reorder_window", "double", STAGE_DEFAULTS["reorder_window"], "readings are held this long to re-sort small arrival-"
                  "order inversions between topics (adds this latency)", min=0.0, max=5.0, unit="s"),
            Param("max_prediction", "double", 0.5, "keep predicting with the clock at most this long after "
                  "the newest reading (then the estimate is reported stale)", min=0.0, max=60.0, unit="s"),
            Param("backward_jump", "double", STAGE_DEFAULTS["backward_jump"], "a reading older than the filter "
                  "time by more than this restarts the estimator at the new time (clock step, bag loop; counted "
                  "with its size); a reading stamped this much ahead of the others waits for a second one to "
                  "confirm the new time (else it is counted as from the future and skipped)", min=0.0, unit="s"),
            Param("max_gap", "double", STAGE_DEFAULTS["max_gap"], "a gap between readings longer than this resets instead of "
                  "predicting through it", min=0.0, unit="s"),
            Param("diagnostics_period", "double", 1.0, "period of /diagnostics and of the 'waiting for' messages",
                  min=0.1, max=60.0, unit="s"),
            Param("publish_tf", "bool", True, "publish the estimate's frames on /tf (with ~/state) and its "
                  "sensor mounts on /tf_static"),
            Param("tf_prefix", "string", "~", "prefix of the estimate's frames; '~' = the node name + '/' "
                  "(ukf/crank), '' = none (the robot's own frames, when no simulator publishes the truth)"),
        ]),
    }


_SCHEMA: dict[str, tuple[Param, ...]] | None = None
STANDARD = {"use_sim_time": Param("use_sim_time", "bool", False, "use /clock as the node clock (rclpy)")}


def schema() -> dict[str, tuple[Param, ...]]:
    """executable -> its parameters (use_sim_time is declared by rclpy itself)."""
    global _SCHEMA
    if _SCHEMA is None:
        _SCHEMA = _build_schema()
    return _SCHEMA


def node_params(executable: str) -> dict[str, Param]:
    table = schema()
    if executable not in table:
        raise KeyError(f"unknown executable {executable!r} (nodes: {', '.join(table)})")
    return {p.name: p for p in table[executable]}


def validate_values(executable: str, values: dict, label: str | None = None) -> dict:
    """Coerced values of a node's parameters (missing ones: defaults).

    values: name -> value as read from ROS (unknown names are an error, except
    use_sim_time). Raises ParameterError ``<label>: parameter 'name': what is wrong``.
    """
    params = node_params(executable)
    label = label or executable
    out = {name: p.default for name, p in params.items()}
    for name, value in values.items():
        if name in STANDARD:
            continue
        p = params.get(name)
        if p is None:
            raise ParameterError(f"{label}: unknown parameter {name!r}{_did_you_mean(name, params)} "
                                 f"(parameters: {', '.join(params)})")
        try:
            out[name] = p.coerce(value)
        except ValueError as exc:
            raise ParameterError(f"{label}: parameter {name!r}: {exc}") from None
    return out


def _did_you_mean(name: str, params) -> str:
    import difflib

    close = difflib.get_close_matches(name, list(params), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict):
            out.update(_flatten(v, key))
        else:
            out[key] = v
    return out


def validate_param_file(path: str | os.PathLike, executable: str | None = None) -> dict[str, dict]:
    """Validate a ROS 2 parameter file against an executable's schema.

    executable: default = the file name without extension. Returns {node key: coerced
    parameters given in the file}. Raises ConfigError (file, key path, problem).
    """
    path = os.fspath(path)
    executable = executable or os.path.splitext(os.path.basename(path))[0]
    root = read_yaml(path)
    try:
        params = node_params(executable)
    except KeyError as exc:
        raise ConfigError(path, "", str(exc.args[0]) + " (parameter files are named after their executable)") from None
    if not isinstance(root.value, dict) or not root.value:
        raise root.error("expected a mapping of node names to {ros__parameters: {...}}")
    out = {}
    for node_key, section in root.items():
        section.mapping(required=("ros__parameters",))
        body = section.get("ros__parameters")
        if not isinstance(body.value, dict):
            raise body.error("expected a mapping of parameter names to values")
        values = {}
        for name, value in _flatten(body.value).items():
            where = f"{body.path}.{name}"
            p = STANDARD.get(name) or params.get(name)
            if p is None:
                raise ConfigError(path, where, f"unknown parameter of {executable} (parameters: {', '.join(params)})")
            try:
                values[name] = p.coerce(value)
            except ValueError as exc:
                raise ConfigError(path, where, str(exc)) from None
        out[node_key] = values
    return out
