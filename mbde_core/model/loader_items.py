"""The items of a mechanism YAML that :mod:`mbde_core.model.loader` reads one by one: names
and references (by index or name), coordinate values, driving constraints, loads and the
time functions f(t) they use (a number, an expression of ``t``, or a table interpolated
linearly).
"""
from __future__ import annotations

import bisect
import re
from typing import Any

from mbde_core.config.yamlnode import Node
from mbde_core.errors import ConfigError
from mbde_core.expr import ExpressionError, compile_expression
from mbde_core.model import schema
from mbde_core.model.loads import FRICTION_VELOCITY_SCALE
from mbde_core.model.spec import DriverSpec, LoadSpec, TimeFunction

LOAD_KINDS = tuple(schema.LOAD_TYPES)
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def item_name(node: Node, default: str, seen: dict[str, str], what: str) -> str:
    if not node.has("name"):
        name = default
    else:
        name = node.get("name").string()
        if not NAME_RE.match(name):
            raise node.get("name").error("names must start with a letter or '_' and use letters, digits, '_' or '-'")
    if name in seen:
        where = node.get("name") if node.has("name") else node
        raise where.error(f"duplicate name {name!r} (already used by a {seen[name]})")
    seen[name] = what
    return name


def fixed_length(node: Node, length: float, variables) -> None:
    """A body with >= 3 points: its length is the distance of its first two points; only
    ``auto`` or that value is accepted (libmbse ignored any other, silently)."""
    if not node.has("length") or node.get("length").value == "auto":
        return
    given = node.get("length").number(dict(variables, auto=length))
    if abs(given - length) > 1e-9 * max(length, 1e-12):
        n = len(node.get("points").value)
        raise node.get("length").error(
            f"a body with {n} points is rigid through them: its length is the distance from its first to its second "
            f"point ({length:g} m), fixed by the points; leave `length` out or write `auto` (got {given:g}; the "
            f"distances between its points are length12, length13, ..., numbered from 1 within the body)")


def item_ref(node: Node, names: dict[str, int], count: int, what: str, variables) -> int:
    """A reference to a point/body/coordinate: index, name, or integer expression."""
    v = node.value
    if isinstance(v, str) and v in names:
        return names[v]
    if isinstance(v, bool) or v is None:
        raise node.error(f"expected a {what} index or name, got {v!r}")
    if isinstance(v, str) and not any(ch.isdigit() for ch in v) and NAME_RE.match(v):
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


def coord_values(node: Node, coord_index, coord_names, variables) -> dict[int, float]:
    if node.value is None:
        return {}
    out = {}
    for key, child in node.items():
        if key not in coord_index:
            raise child.error(f"unknown coordinate (coordinates are: {', '.join(coord_names)})")
        out[coord_index[key]] = child.number(variables)
    return out


def read_drivers(root: Node, coord_index, coord_names, body_index, bodies, names_seen, variables) -> tuple:
    """The ``driving_constraints`` section (see the module docstring)."""
    if not root.has("driving_constraints") or root.get("driving_constraints").value is None:
        return ()
    out, used = [], set()
    keys = {kind: (ref, fn) for kind, (ref, fn, _) in schema.DRIVER_TYPES.items()}
    for di, node in enumerate(root.get("driving_constraints").sequence()):
        node.mapping(required=schema.DRIVER.required(), optional=schema.DRIVER.names())
        kind = node.get("type").string(tuple(keys))
        ref_key, fn_key = keys[kind]
        for key in ("coordinate", "body", "position", "length"):
            if node.has(key) and key not in keys[kind]:
                raise node.get(key).error(f"not used by a {kind!r} driving constraint (it needs {ref_key!r} and {fn_key!r})")
        for key in keys[kind]:
            if not node.has(key):
                raise ConfigError(root.file, node.child_path(key), "missing required key")
        name = item_name(node, f"driver{di}", names_seen, "driving constraint")
        fns = {k: time_function(node.get(k), variables) for k in (fn_key, "velocity", "acceleration") if node.has(k)}
        if kind == "coordinate":
            c = item_ref(node.get("coordinate"), coord_index, len(coord_names), "coordinate", variables)
            target, spec = ("coordinate", c), dict(coordinate=c)
        else:
            b = item_ref(node.get("body"), body_index, len(bodies), "body", variables)
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


def read_load(node: Node, li, point_index, body_index, coord_index, points, bodies, variables) -> LoadSpec:
    node.mapping(required=schema.LOAD.required(), optional=schema.LOAD.names())
    kind = node.get("type").string(LOAD_KINDS)
    name = node.get("name").string() if node.has("name") else f"load{li}_{kind}"
    allowed, optional, _ = schema.LOAD_TYPES[kind]
    for key in ("point", "body", "body2", "coordinate", "value", "c", "velocity_scale"):
        if node.has(key) and key not in allowed and key not in optional:
            raise ConfigError(node.file, node.child_path(key), f"not used by a {kind!r} load")
        if key in allowed and not node.has(key):
            raise ConfigError(node.file, node.child_path(key), f"missing required key for a {kind!r} load")
    kw: dict[str, Any] = {}
    if node.has("point"):
        kw["point"] = item_ref(node.get("point"), point_index, len(points), "point", variables)
        if points[kw["point"]].fixed:
            raise node.get("point").error("loads on a fixed point have no effect; use a moving point")
    if node.has("body"):
        kw["body"] = item_ref(node.get("body"), body_index, len(bodies), "body", variables)
    if node.has("body2"):
        b2 = node.get("body2")
        kw["body2"] = -1 if b2.value == "ground" else item_ref(b2, body_index, len(bodies), "body", variables)
    if node.has("coordinate"):
        kw["coordinate"] = item_ref(node.get("coordinate"), coord_index, len(coord_index), "coordinate", variables)
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
