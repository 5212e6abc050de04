"""The options pipeline: load -> validate -> resolve, once per estimator per run.

1. **load** (:func:`load`): an estimator config file, a mapping ``<estimator name>:
   {options}`` (config/estimators/*.yaml); every section is validated, used now or not.
2. **validate** (:func:`validate`): the user's options merged over the estimator's defaults
   (its ``Options`` dataclass) on the YAML nodes -- unknown keys, wrong types, values out
   of range or not finite are one-line :class:`~mbde_core.errors.ConfigError` naming the
   file and the key path -- giving a :class:`Spec` (still with ``auto`` values). A particle
   filter's Gaussian follower (``refine``) is validated here too, as a nested Spec.
3. **resolve** (:func:`resolve`): for the run's mechanism and sensors (and a scenario's
   motor, ``context``), the names are checked (sensors in ``sensor_sigma``, coordinates in
   ``inputs`` and ``rule.force_limits``, the particle filters' branches, ranges and memory
   budget: the estimator class's ``check_run``), every ``auto`` becomes the default-tuning
   rule's number (:mod:`~mbde_core.estimators.options.rule`) and the result is frozen into
   the estimator's typed ``Options`` (:mod:`~mbde_core.estimators.options.frozen`), which
   its constructor takes. Errors name the file and key path, before the run.

``mbde replay`` loads and validates in the command, resolves per bag before starting the
runs, and each run builds its estimator from the frozen options; the live node, ``mbde
tune``, ``mbde render`` and the smoother do the same. :func:`configure` is the three steps
for options given in code (benchmarks, tests), :func:`make_estimator` builds from any of
them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.errors import ConfigError
from mbde_core.estimators.options import rule as noise_rule
from mbde_core.estimators.options.frozen import FrozenMap, Options, freeze, thaw
from mbde_core.estimators.options.schema import check_common, merge_options
from mbde_core.estimators.registry import estimator_class, estimator_rng, names  # noqa: F401 (estimator_rng re-exported)

# Sections of the same file validated by the offline tools that own them (not observers):
# ``smoother`` by mbde_core.trajectory.config, ``identification`` by mbde_core.identification.config.
OFFLINE_SECTIONS = ("smoother", "identification")


@dataclass(frozen=True)
class Spec:
    """Validated options of one estimator, before resolution: its name, the merged values
    (frozen; ``auto`` not resolved yet; a nested Spec for a follower) and where they came
    from (file and key path, named by the errors of :func:`resolve`)."""

    name: str
    values: FrozenMap = field(default_factory=FrozenMap)
    file: str = "<defaults>"
    path: str = ""

    def __getitem__(self, key):
        return self.values[key]

    def get(self, key, default=None):
        return self.values.get(key, default)

    def as_dict(self) -> dict:
        """The validated values as plain Python (without nested Specs: a follower's are
        derived from the ``options`` they came from), e.g. to edit and validate again."""
        return _without_specs(thaw(self.values))

    def replace(self, **values) -> "Spec":
        """A Spec with some values set (plain values, already checked by the caller: e.g.
        the smoother's step and plant noise for its initial-guess filter)."""
        return Spec(self.name, freeze({**self.values, **values}), self.file, self.path)


def defaults(name: str) -> dict:
    """The default options of estimator ``name`` as plain values (``auto`` unresolved)."""
    return estimator_class(name).Options.defaults()


def validate(name: str, options=None, file: str = "<options>", path: str | None = None) -> Spec:
    """Merge ``options`` (a mapping, or a YAML Node) over the defaults of estimator ``name``
    and check them (module doc, step 2)."""
    cls = estimator_class(name)
    where = path or name
    node = options if isinstance(options, Node) else Node(options or {}, file, where)
    cfg = merge_options(node, cls.Options.defaults())
    check_common(cfg, file, where)
    if (cfg.get("plant_noise") or {}).get("adaptive") and not hasattr(cls, "learned"):
        raise ConfigError(file, f"{where}.plant_noise.adaptive", f"the {name} estimator has no adaptive plant noise "
                          "(ukf and errorekf have)")
    cls.validate_config(cfg, file, where)
    follower = cls.follower_options(cfg)
    if follower is not None:  # a nested estimator (the particle filters' refine): its own Spec
        fname, fopts, key = follower
        cfg[key[0]][key[1]] = validate(fname, fopts, file, f"{where}.{key[0]}.options")
    return Spec(name, freeze(cfg), file, where)


def load(path, wanted) -> dict[str, Spec]:
    """The Spec of each estimator in ``wanted`` from a config file (None: defaults); every
    section of the file is validated, used now or not."""
    out = {n: validate(n, None, "<defaults>") for n in wanted}
    if path is None:
        return out
    root = read_yaml(path)
    root.mapping()
    known = names()
    for key, child in root.items():
        if key in OFFLINE_SECTIONS:
            continue
        if key not in known:
            raise child.error(f"unknown estimator (choose from {', '.join(known + OFFLINE_SECTIONS)})")
        try:
            spec = validate(key, child.value, root.file, key)
        except ModuleNotFoundError:  # an estimator whose optional dependency is missing
            if key in wanted:
                raise
            continue
        if key in wanted:
            out[key] = spec
    return out


def resolve(spec: Spec, mech, sensors, context=None) -> Options:
    """The frozen options of ``spec`` for the run's model and sensors (module doc, step 3);
    context: a scenario's rule inputs (:func:`~mbde_core.estimators.options.rule.scenario_context`)."""
    cls = estimator_class(spec.name)
    values = thaw(spec.values)
    check_names(cls, values, mech, sensors, spec.file, spec.path)
    cls.check_run(values, mech, sensors, spec.file, spec.path)
    values = noise_rule.resolve_config(cls, values, mech, sensors, context, where=(spec.file, spec.path))
    values = _resolve_nested(values, mech, sensors, context)
    return cls.Options.from_dict(values)


def configure(name: str, options=None, mech=None, sensors=None, context=None, file: str = "<options>") -> Options:
    """validate + resolve of options given in code: a mapping of the user's options, or a
    Spec (only resolved)."""
    spec = options if isinstance(options, Spec) else validate(name, options, file)
    return resolve(spec, mech, sensors, context)


def as_spec(name: str, options) -> Spec:
    """``options`` as a Spec: a Spec as it is, a mapping of the user's options (given in
    code) or None (the defaults) validated."""
    return options if isinstance(options, Spec) else validate(name, options)


def make_estimator(name: str, mech, sensors, options=None, rng=None, context=None):
    """Estimator ``name`` for a model and its sensors. options: its frozen Options (from
    :func:`resolve`), a Spec (resolved here), or a mapping of the user's options (validated
    and resolved here, :func:`configure`)."""
    cls = estimator_class(name)
    if not isinstance(options, Options):
        options = resolve(as_spec(name, options), mech, sensors, context)
    return cls(mech, sensors, options, rng)


def check_names(cls, values: dict, mech, sensors, file: str, path: str) -> None:
    """Every name in the options is one of the run's: the sensors in ``sensor_sigma``, the
    coordinates of the ``inputs`` (observers with input states) and of ``rule.force_limits``
    (the rule checks those)."""
    known = [s.name for s in sensors]
    for key in values.get("sensor_sigma") or {}:
        if key not in known:
            raise ConfigError(file, f"{path}.sensor_sigma.{key}",
                              f"not a sensor of this run (choose from {', '.join(known) or 'none'})")
    items = values.get("inputs")
    if cls.traits.input_states and isinstance(items, list):
        coords = list(mech.coordinate_names)
        for k, item in enumerate(items):
            if item.get("coordinate") not in coords:
                raise ConfigError(file, f"{path}.inputs[{k}].coordinate",
                                  f"{item.get('coordinate')!r} is not a coordinate of {mech.name} "
                                  f"(choose from {', '.join(coords)})")


def _without_specs(values):
    if isinstance(values, dict):
        return {k: _without_specs(v) for k, v in values.items() if not isinstance(v, Spec)}
    return values


def _resolve_nested(values, mech, sensors, context):
    """values with every nested Spec (a follower's) resolved into its Options."""
    if isinstance(values, Spec):
        return resolve(values, mech, sensors, context)
    if isinstance(values, dict):
        return {k: _resolve_nested(v, mech, sensors, context) for k, v in values.items()}
    return values
