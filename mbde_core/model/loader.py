"""Read a mechanism YAML file (libmbse format + mbde extensions) into a MechanismSpec.

libmbse format, read unchanged:

- ``parameters``: name -> number or expression (may use earlier parameters).
- ``points``: list of ``{x, y, fixed}``; after point i the variables ``x<i>``, ``y<i>``
  exist for later expressions.
- ``planar_bodies``: list of ``{points, length, mass, I0, cog}``. ``points`` has >= 2
  point indices (a rigid polygon). For 2-point bodies ``length`` is a number, ``auto``
  (the points' distance) or an expression; for >= 3 points it is ignored and the
  variables ``lengthIJ`` (1-based point pairs) are defined. ``mass`` may use ``length``;
  ``I0`` (about the first point) may use ``mass`` and ``length``; ``cog`` (in the body
  frame: origin at the first point, x axis towards the second) may also use ``I0``.
  ``index`` is the 1-based number of the body being read.
- ``relative_coordinates``: list of ``{type: RelativeAngleAbsoluteDOF, points: [a, b]}``:
  the absolute angle of segment a->b appended to q.

mbde extensions (all optional): ``name``/``description``; ``name`` on points, bodies and
relative coordinates (references may then use names); ``gravity: [gx, gy]`` (default
[0, -9.81]); ``sliders``; ``loads``; ``independent_coordinates``; ``initial_position`` and
``initial_velocity`` (coordinate -> value); ``sensors`` (see :mod:`mbde_core.sensors`);
``driving_constraints`` (prescribed motions, :mod:`mbde_core.model.drivers`): a list of
``{name, type: coordinate, coordinate: C.x, position: <f(t)>}`` or ``{name, type:
distance, body: rope, length: <f(t)>}``, optional ``velocity``/``acceleration`` (f', f'').
"""
from __future__ import annotations

import bisect
import math
import os
import re
from typing import Any

import numpy as np

from mbde_core.config.yamlnode import Node, parse_yaml, read_yaml
from mbde_core.errors import ConfigError
from mbde_core.expr import ExpressionError, compile_expression
from mbde_core.model.loads import FRICTION_VELOCITY_SCALE
from mbde_core.model.spec import (
    BodySpec,
    DriverSpec,
    LoadSpec,
    MechanismSpec,
    PointSpec,
    RelativeCoordinateSpec,
    SliderSpec,
    TimeFunction,
)

TOP_KEYS = (
    "name",
    "description",
    "parameters",
    "gravity",
    "points",
    "planar_bodies",
    "relative_coordinates",
    "sliders",
    "loads",
    "driving_constraints",
    "independent_coordinates",
    "initial_position",
    "initial_velocity",
    "sensors",
)
REL_TYPES = ("RelativeAngleAbsoluteDOF",)
LOAD_KINDS = ("force", "torque", "generalized_force", "motor", "joint_damping", "point_damping", "joint_friction",
              "point_friction")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def load_mechanism_spec(path: str | os.PathLike) -> MechanismSpec:
    """Load and validate a mechanism YAML file; raises ConfigError (file, key path, problem)."""
    return spec_from_node(read_yaml(path))


def mechanism_spec_from_text(text: str, label: str = "<string>") -> MechanismSpec:
    return spec_from_node(parse_yaml(text, label))


def spec_from_node(root: Node) -> MechanismSpec:
    root.mapping(required=("points", "planar_bodies"), optional=TOP_KEYS)
    file = root.file
    variables: dict[str, float] = {}

    # -- parameters ---------------------------------------------------------------------
    params: dict[str, float] = {}
    if root.has("parameters") and root.get("parameters").value is not None:
        for key, node in root.get("parameters").items():
            if not _NAME_RE.match(key) or "-" in key:
                raise node.error("parameter names must be identifiers")
            params[key] = node.number(variables)
            variables[key] = params[key]

    # -- points -------------------------------------------------------------------------
    points: list[PointSpec] = []
    names_seen: dict[str, str] = {}
    for i, node in enumerate(root.req("points").sequence(min_len=1)):
        node.mapping(required=("x", "y"), optional=("fixed", "name"))
        x = node.get("x").number(variables)
        y = node.get("y").number(variables)
        fixed = node.get("fixed").boolean() if node.has("fixed") else False
        name = _name(node, f"P{i}", names_seen, "point")
        points.append(PointSpec(name, x, y, fixed))
        variables[f"x{i}"] = x
        variables[f"y{i}"] = y
    if all(p.fixed for p in points):
        raise root.get("points").error("every point is fixed: nothing can move")
    point_index = {p.name: i for i, p in enumerate(points)}

    # -- bodies -------------------------------------------------------------------------
    bodies: list[BodySpec] = []
    for bi, node in enumerate(root.req("planar_bodies").sequence(min_len=1)):
        node.mapping(required=("points", "mass", "I0", "cog"), optional=("length", "name"))
        name = _name(node, f"body{bi}", names_seen, "body")
        pts_nodes = node.get("points").sequence(min_len=2)
        idx = tuple(_ref(n, point_index, len(points), "point", variables) for n in pts_nodes)
        if len(set(idx)) != len(idx):
            raise node.get("points").error("a body cannot use the same point twice")
        if all(points[k].fixed for k in idx):
            raise node.get("points").error("every point of this body is fixed: it cannot move")
        bv = dict(variables)
        bv["index"] = float(bi + 1)
        xy = np.array([[points[k].x, points[k].y] for k in idx])
        if len(idx) == 2:
            bv["auto"] = float(np.hypot(*(xy[1] - xy[0])))
            if not node.has("length"):
                raise ConfigError(file, node.child_path("length"), "missing required key (a number, 'auto' or an expression)")
            length = node.get("length").number(bv)
            bv.pop("auto")
        else:
            for a in range(len(idx)):
                for b in range(a + 1, len(idx)):
                    d = float(np.hypot(*(xy[b] - xy[a])))
                    bv[f"length{a + 1}{b + 1}"] = bv[f"length{b + 1}{a + 1}"] = d
            length = float(np.hypot(*(xy[1] - xy[0])))
        if not length > 0:
            where = node.get("length") if len(idx) == 2 else node.get("points")
            raise where.error(f"body length must be > 0, got {length:g}")
        bv["length"] = length
        mass = node.get("mass").number(bv, nonnegative=True)
        bv["mass"] = mass
        I0 = node.get("I0").number(bv, nonnegative=True)
        bv["I0"] = I0
        cog = tuple(node.get("cog").vector(2, bv))
        if I0 < mass * (cog[0] ** 2 + cog[1] ** 2) * (1 - 1e-9) - 1e-15:
            raise node.get("I0").error(
                f"I0 = {I0:g} is smaller than mass*|cog|^2 = {mass * (cog[0] ** 2 + cog[1] ** 2):g} "
                "(I0 is about the first point; the inertia about the centre of mass would be negative)"
            )
        bodies.append(BodySpec(name, idx, float(length), mass, I0, cog))

    # -- relative coordinates ------------------------------------------------------------
    rels: list[RelativeCoordinateSpec] = []
    if root.has("relative_coordinates") and root.get("relative_coordinates").value is not None:
        for ri, node in enumerate(root.get("relative_coordinates").sequence()):
            node.mapping(required=("type", "points"), optional=("name",))
            kind = node.get("type").string(REL_TYPES)
            pts = node.get("points").sequence(min_len=2, max_len=2)
            a, b = (_ref(n, point_index, len(points), "point", variables) for n in pts)
            if a == b:
                raise node.get("points").error("the two points must differ")
            if points[a].fixed and points[b].fixed:
                raise node.get("points").error("both points are fixed: the angle cannot change")
            name = _name(node, f"theta{ri}", names_seen, "relative coordinate")
            rels.append(RelativeCoordinateSpec(name, kind, (a, b)))

    # -- sliders ---------------------------------------------------------------------------
    sliders: list[SliderSpec] = []
    if root.has("sliders") and root.get("sliders").value is not None:
        for si, node in enumerate(root.get("sliders").sequence()):
            node.mapping(required=("point",), optional=("name", "origin", "direction", "angle", "mass"))
            k = _ref(node.get("point"), point_index, len(points), "point", variables)
            if points[k].fixed:
                raise node.get("point").error("a slider point must be a moving point")
            origin = tuple(node.get("origin").vector(2, variables)) if node.has("origin") else (points[k].x, points[k].y)
            if node.has("direction") and node.has("angle"):
                raise node.error("give either 'direction' or 'angle', not both")
            if node.has("angle"):
                ang = node.get("angle").number(variables)
                direction = (math.cos(ang), math.sin(ang))
            elif node.has("direction"):
                direction = tuple(node.get("direction").vector(2, variables))
            else:
                raise ConfigError(file, node.child_path("direction"), "missing required key (or give 'angle')")
            norm = math.hypot(*direction)
            if not norm > 0:
                raise node.get("direction").error("direction must be a non-zero vector")
            direction = (direction[0] / norm, direction[1] / norm)
            mass = node.get("mass").number(variables, nonnegative=True) if node.has("mass") else 0.0
            name = _name(node, f"slider{si}", names_seen, "slider")
            sliders.append(SliderSpec(name, k, origin, direction, mass))

    # -- coordinates (names) ------------------------------------------------------------------
    coord_names = []
    for p in points:
        if not p.fixed:
            coord_names += [f"{p.name}.x", f"{p.name}.y"]
    coord_names += [r.name for r in rels]
    coord_index = {c: i for i, c in enumerate(coord_names)}
    body_index = {b.name: i for i, b in enumerate(bodies)}

    gravity = (0.0, -9.81)
    if root.has("gravity"):
        gravity = tuple(root.get("gravity").vector(2, variables))

    # -- loads -------------------------------------------------------------------------------
    loads: list[LoadSpec] = []
    if root.has("loads") and root.get("loads").value is not None:
        for li, node in enumerate(root.get("loads").sequence()):
            loads.append(_load(node, li, point_index, body_index, coord_index, points, bodies, variables))

    drivers = _drivers(root, coord_index, coord_names, body_index, bodies, names_seen, variables)

    # -- independent coordinates, initial state ------------------------------------------------
    independent = None
    if root.has("independent_coordinates") and root.get("independent_coordinates").value is not None:
        nodes = root.get("independent_coordinates").sequence(min_len=1)
        independent = tuple(_ref(n, coord_index, len(coord_names), "coordinate", variables) for n in nodes)
        if len(set(independent)) != len(independent):
            raise root.get("independent_coordinates").error("a coordinate is listed twice")
    initial_position = _coord_values(root.get("initial_position"), coord_index, coord_names, variables)
    initial_velocity = _coord_values(root.get("initial_velocity"), coord_index, coord_names, variables)

    name = root.get("name").string() if root.has("name") else os.path.splitext(os.path.basename(file))[0]
    return MechanismSpec(
        file=file,
        name=name,
        parameters=params,
        gravity=gravity,
        points=tuple(points),
        bodies=tuple(bodies),
        relative_coordinates=tuple(rels),
        sliders=tuple(sliders),
        loads=tuple(loads),
        drivers=drivers,
        independent=independent,
        initial_velocity=initial_velocity,
        initial_position=initial_position,
        sensors=root.get("sensors").value,
        raw=root.value,
    )


# ------------------------------------------------------------------------------------------
def _name(node: Node, default: str, seen: dict[str, str], what: str) -> str:
    if not node.has("name"):
        name = default
    else:
        name = node.get("name").string()
        if not _NAME_RE.match(name):
            raise node.get("name").error("names must start with a letter or '_' and use letters, digits, '_' or '-'")
    if name in seen:
        where = node.get("name") if node.has("name") else node
        raise where.error(f"duplicate name {name!r} (already used by a {seen[name]})")
    seen[name] = what
    return name


def _ref(node: Node, names: dict[str, int], count: int, what: str, variables) -> int:
    """A reference to a point/body/coordinate: index, name, or integer expression."""
    v = node.value
    if isinstance(v, str) and v in names:
        return names[v]
    if isinstance(v, bool) or v is None:
        raise node.error(f"expected a {what} index or name, got {v!r}")
    if isinstance(v, str) and not any(ch.isdigit() for ch in v) and _NAME_RE.match(v):
        raise node.error(f"unknown {what} {v!r}")
    try:
        idx = node.number(variables)
    except ConfigError:
        raise node.error(f"expected a {what} index or name, got {v!r}") from None
    if idx != int(round(idx)):
        raise node.error(f"{what} index must be an integer, got {idx:g}")
    idx = int(round(idx))
    if not 0 <= idx < count:
        raise node.error(f"{what} index {idx} out of range (there are {count} {what}s, 0..{count - 1})")
    return idx


def _coord_values(node: Node, coord_index, coord_names, variables) -> dict[int, float]:
    if node.value is None:
        return {}
    out = {}
    for key, child in node.items():
        if key not in coord_index:
            raise child.error(f"unknown coordinate (coordinates are: {', '.join(coord_names)})")
        out[coord_index[key]] = child.number(variables)
    return out


def _drivers(root: Node, coord_index, coord_names, body_index, bodies, names_seen, variables) -> tuple:
    """The ``driving_constraints`` section (see the module docstring)."""
    if not root.has("driving_constraints") or root.get("driving_constraints").value is None:
        return ()
    out, used = [], set()
    keys = {"coordinate": ("coordinate", "position"), "distance": ("body", "length")}
    for di, node in enumerate(root.get("driving_constraints").sequence()):
        node.mapping(required=("type",), optional=("name", "coordinate", "body", "position", "length", "velocity", "acceleration"))
        kind = node.get("type").string(tuple(keys))
        ref_key, fn_key = keys[kind]
        for key in ("coordinate", "body", "position", "length"):
            if node.has(key) and key not in keys[kind]:
                raise node.get(key).error(f"not used by a {kind!r} driving constraint (it needs {ref_key!r} and {fn_key!r})")
        for key in keys[kind]:
            if not node.has(key):
                raise ConfigError(root.file, node.child_path(key), "missing required key")
        name = _name(node, f"driver{di}", names_seen, "driving constraint")
        fns = {k: time_function(node.get(k), variables) for k in (fn_key, "velocity", "acceleration") if node.has(k)}
        if kind == "coordinate":
            c = _ref(node.get("coordinate"), coord_index, len(coord_names), "coordinate", variables)
            target, spec = ("coordinate", c), dict(coordinate=c)
        else:
            b = _ref(node.get("body"), body_index, len(bodies), "body", variables)
            body = bodies[b]
            if len(body.points) != 2:
                raise node.get("body").error("a driven length needs a body with two points")
            L = body.length
            point_mass_j = abs(body.cog[0] - L) <= 1e-9 * L and abs(body.cog[1]) <= 1e-9 * L and abs(body.I0 - body.mass * L * L) <= 1e-9 * max(body.I0, 1e-300)
            point_mass_i = abs(body.cog[0]) <= 1e-9 * L and abs(body.cog[1]) <= 1e-9 * L and body.I0 <= 1e-12 * max(body.mass * L * L, 1e-300)
            if body.mass > 0 and not (point_mass_j or point_mass_i):
                raise node.get("body").error(
                    f"body {body.name!r} has a driven length: it must be massless or carry its mass at one of its points "
                    "(cog [length, 0] with I0 mass*length^2, or cog [0, 0] with I0 0), so that its mass matrix does not change")
            target, spec = ("body", b), dict(body=b)
        if target in used:
            raise node.error(f"a second driving constraint on the same {target[0]}")
        used.add(target)
        out.append(DriverSpec(kind, name, fns[fn_key], fns.get("velocity"), fns.get("acceleration"), **spec))
    return tuple(out)


def time_function(node: Node, variables: dict[str, float]) -> TimeFunction:
    """A number, an expression in ``t`` (and parameters), or ``{table: [[t, v], ...]}``.

    Tables interpolate linearly and hold their end values outside the table.
    """
    v = node.value
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        c = node.number()
        return TimeFunction(c, lambda t, c=c: c)
    if isinstance(v, str):
        try:
            fn = compile_expression(v)
            env = dict(variables)
            env["t"] = 0.0
            fn(env)
        except ExpressionError as exc:
            raise node.error(str(exc)) from None

        def call(t, fn=fn, env=env):
            env["t"] = t
            return fn(env)

        return TimeFunction(v, call)
    if isinstance(v, dict):
        node.mapping(required=("table",))
        rows = node.get("table").sequence(min_len=1)
        ts, vs = [], []
        for r in rows:
            t_i, v_i = r.vector(2, variables)
            if ts and t_i <= ts[-1]:
                raise r.error("table times must increase strictly")
            ts.append(t_i)
            vs.append(v_i)

        def interp(t, ts=ts, vs=vs):
            if t <= ts[0]:
                return vs[0]
            if t >= ts[-1]:
                return vs[-1]
            k = bisect.bisect_right(ts, t)
            a = (t - ts[k - 1]) / (ts[k] - ts[k - 1])
            return vs[k - 1] + a * (vs[k] - vs[k - 1])

        return TimeFunction(tuple(zip(ts, vs)), interp)
    raise node.error("expected a number, an expression in t, or {table: [[t, value], ...]}")


def _load(node: Node, li, point_index, body_index, coord_index, points, bodies, variables) -> LoadSpec:
    node.mapping(required=("type",), optional=("name", "point", "body", "body2", "coordinate", "value", "c", "velocity_scale"))
    kind = node.get("type").string(LOAD_KINDS)
    name = node.get("name").string() if node.has("name") else f"load{li}_{kind}"
    allowed = {
        "force": ("point", "value"),
        "torque": ("body", "value"),
        "motor": ("value",),
        "generalized_force": ("coordinate", "value"),
        "joint_damping": ("body", "c"),
        "point_damping": ("point", "c"),
        "joint_friction": ("body", "c"),
        "point_friction": ("point", "c"),
    }[kind]
    optional = {"motor": ("body", "coordinate"), "joint_damping": ("body2",), "joint_friction": ("body2", "velocity_scale"),
                "point_friction": ("velocity_scale",)}.get(kind, ())
    for key in ("point", "body", "body2", "coordinate", "value", "c", "velocity_scale"):
        if node.has(key) and key not in allowed and key not in optional:
            raise ConfigError(node.file, node.child_path(key), f"not used by a {kind!r} load")
        if key in allowed and not node.has(key):
            raise ConfigError(node.file, node.child_path(key), f"missing required key for a {kind!r} load")
    kw: dict[str, Any] = {}
    if node.has("point"):
        kw["point"] = _ref(node.get("point"), point_index, len(points), "point", variables)
        if points[kw["point"]].fixed:
            raise node.get("point").error("loads on a fixed point have no effect; use a moving point")
    if node.has("body"):
        kw["body"] = _ref(node.get("body"), body_index, len(bodies), "body", variables)
    if node.has("body2"):
        b2 = node.get("body2")
        kw["body2"] = -1 if b2.value == "ground" else _ref(b2, body_index, len(bodies), "body", variables)
    if node.has("coordinate"):
        kw["coordinate"] = _ref(node.get("coordinate"), coord_index, len(coord_index), "coordinate", variables)
    if kind == "motor":
        if node.has("body") == node.has("coordinate"):
            raise node.error("a 'motor' load needs exactly one of 'body' or 'coordinate'")
        kind = "torque" if node.has("body") else "generalized_force"
    if node.has("value"):
        if kind == "force":
            comps = node.get("value").sequence(min_len=2, max_len=2)
            kw["value"] = tuple(time_function(c, variables) for c in comps)
        else:
            kw["value"] = (time_function(node.get("value"), variables),)
    if node.has("c"):
        kw["c"] = node.get("c").number(variables, nonnegative=True)
    if kind in ("joint_friction", "point_friction"):  # regularised Coulomb friction (mbde_core.model.loads)
        kw["scale"] = node.get("velocity_scale").number(variables, positive=True) if node.has("velocity_scale") \
            else FRICTION_VELOCITY_SCALE
    return LoadSpec(kind=kind, name=name, **kw)
