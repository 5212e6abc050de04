"""Identifiable parameters of a mechanism YAML, addressed by key path, with box bounds.

A parameter is one numeric field of the mechanism file that the dynamic model depends
on. Key paths follow the YAML document (``planar_bodies[1].mass``); list items may be
named instead of indexed, ``*`` expands over every item that has the field, and a few
aliases read naturally::

    bodies.crank.mass        planar_bodies[<crank>].mass                        [kg]
    bodies.coupler.inertia   planar_bodies[<coupler>].I0 (about the first point) [kg m^2]
    bodies.rod.cog.x         planar_bodies[<rod>].cog[0] (also cog[0], cog.0)    [m]
    bodies.crank.length      planar_bodies[<crank>].length                      [m]
    gravity                  the magnitude |g| [m/s^2], direction kept (paper 003's error)
    gravity.x, gravity[1]    one component [m/s^2]
    gravity.tilt             the direction: a rotation [rad] of the file's gravity vector,
                             magnitude kept (paper 001 sec. 4.6: the stand's tilt)
    joints.A.damping         viscous torque of the revolute joint at point A   [N m s/rad]
    joints.*.damping         ... of every revolute joint (a point shared by two bodies,
                             or by one body and the ground)
    joints.A.friction        dry (regularised Coulomb) torque of the joint at A [N m]
                             (paper 001's r mu; a ``joint_friction`` load)
    sensors.motor_u.gain     the gain of a known-input sensor (a motor's torque per unit of
                             its recorded control signal, paper 001's K) [N m per unit]
    loads.hinge.c            the ``c`` of load ``hinge`` (joint or point damping)
    loads.push.value[1]      a constant force/torque value                      [N, N m]
    sliders.guide.mass       a slider's point mass                              [kg]
    points.P2.x              a point coordinate                                 [m]
    parameters.L1            a named parameter (expressions using it follow)

A joint without a damping (friction) load gets one (``joint_<point>_damping``, c = 0;
``joint_<point>_friction``) when its damping (friction) is identified, so
``joints.*.damping`` works on any mechanism. Setting a
parameter writes a plain number into a copy of the YAML document and re-reads it, so
expressions that use the field follow it (``I0: (1/3)*mass*length^2`` scales with an
identified ``mass`` unless ``I0`` is identified too).

Bounds: ``lower:upper`` per parameter (either side may be empty = unbounded); physical
quantities (masses, inertias, damping, |g|) default to ``[0, inf)``.
"""
from __future__ import annotations

import copy
import fnmatch
import math
import re

from mbde_core.errors import ConfigError, keypath
from mbde_core.identification.inputs import sensor_gain_parameters, sensor_gain_value
from mbde_core.identification.parameter import Parameter

_TOKEN = re.compile(r"\[(\d+)\]|([^.\[\]]+)")
SECTION_ALIASES = {"bodies": "planar_bodies"}
BODY_FIELDS = {"mass": ("mass", "kg"), "I0": ("I0", "kg m^2"), "inertia": ("I0", "kg m^2"), "length": ("length", "m")}
NONNEGATIVE_UNITS = ("kg", "kg m^2", "N m s/rad", "N s/m", "N m", "N")
SECTIONS = ("parameters", "gravity", "bodies", "planar_bodies", "points", "loads", "sliders", "joints", "sensors")


def _tokens(path: str) -> list:
    """'bodies.crank.cog[0]' -> ['bodies', 'crank', 'cog', 0] (ValueError if malformed)."""
    if not re.fullmatch(r"[^.\[\]\s]+(\[\d+\]|\.[^.\[\]\s]+)*", path):
        raise ValueError("malformed key path")
    return [int(a) if a else (int(b) if b.isdigit() else b) for a, b in _TOKEN.findall(path)]


def _items(doc, section: str, default_prefix: str) -> list[tuple[int, str, dict]]:
    """(index, name, item) of a list section; names default like the loader's."""
    seq = doc.get(section) or []
    return [(i, str(it.get("name", f"{default_prefix}{i}")) if isinstance(it, dict) else f"{default_prefix}{i}", it)
            for i, it in enumerate(seq)]


def _select(items, ref, what, file, key) -> list:
    if ref == "*" or (isinstance(ref, str) and any(c in ref for c in "*?[")):
        hits = [it for it in items if fnmatch.fnmatchcase(it[1], str(ref))]
        return hits
    if isinstance(ref, int):
        if not 0 <= ref < len(items):
            raise ConfigError(file, key, f"{what} index {ref} out of range (0..{len(items) - 1})")
        return [items[ref]]
    hits = [it for it in items if it[1] == ref]
    if not hits:
        names = ", ".join(it[1] for it in items) or "none"
        raise ConfigError(file, key, f"unknown {what} {ref!r} ({what}s: {names})")
    return hits


def revolute_joints(doc) -> dict[str, tuple[int, int]]:
    """{point name: (body, body2)} of the unambiguous revolute joints (body2 -1 = ground).

    A joint is a point of two bodies, or a fixed point of one body; points with more
    bodies are ambiguous (use ``loads.NAME.c`` for those) and are left out.
    """
    points = _items(doc, "points", "P")
    bodies = _items(doc, "planar_bodies", "body")
    pindex = {name: i for i, name, _ in points}
    at: dict[int, list[int]] = {}
    for bi, _, b in bodies:
        for ref in b.get("points", []):
            k = pindex.get(ref, ref) if isinstance(ref, str) else ref
            if isinstance(k, (int, float)) and float(k).is_integer():
                at.setdefault(int(k), []).append(bi)
    out = {}
    for k, name, p in points:
        bs = at.get(k, [])
        fixed = bool(p.get("fixed", False))
        if fixed and len(bs) == 1:
            out[name] = (bs[0], -1)
        elif not fixed and len(bs) == 2:
            out[name] = (bs[1], bs[0])
    return out


def resolve(doc, file: str, path: str, spec) -> list[Parameter]:
    """Expand one key path (possibly with ``*``) into parameters; ConfigError if invalid.

    doc: the mechanism YAML document (mapping) as read; spec: its MechanismSpec (gives
    default names and the evaluated values).
    """
    try:
        tok = _tokens(path.strip())
    except ValueError:
        raise ConfigError(file, path, "malformed parameter key path") from None
    head = SECTION_ALIASES.get(tok[0], tok[0])
    if tok[0] not in SECTIONS:
        raise ConfigError(file, path, f"not an identifiable section (use one of: {', '.join(SECTIONS)})")
    rest = tok[1:]
    if head == "gravity":
        if not rest:
            return [Parameter("gravity", "gravity", ("gravity", None), "m/s^2", 0.0)]
        if rest == ["tilt"]:
            return [Parameter("gravity.tilt", "gravity.tilt", ("gravity_tilt", None), "rad", -math.pi, math.pi)]
        comp = {"x": 0, "y": 1, 0: 0, 1: 1}.get(rest[0])
        if comp is None or len(rest) != 1:
            raise ConfigError(file, path, "gravity components are gravity.x / gravity.y (or gravity[0] / gravity[1])")
        return [Parameter(f"gravity[{comp}]", f"gravity.{'xy'[comp]}", ("doc", ("gravity", comp)), "m/s^2")]
    if head == "parameters":
        names = list((doc.get("parameters") or {}).keys())
        if len(rest) != 1:
            raise ConfigError(file, path, "expected parameters.NAME")
        hits = [n for n in names if fnmatch.fnmatchcase(n, str(rest[0]))]
        if not hits:
            raise ConfigError(file, path, f"unknown parameter (parameters: {', '.join(names) or 'none'})")
        return [Parameter(f"parameters.{n}", f"parameters.{n}", ("doc", ("parameters", n)), "") for n in hits]
    if len(rest) < 2:
        raise ConfigError(file, path, f"expected {tok[0]}.ITEM.FIELD")
    ref, field, sub = rest[0], rest[1], rest[2:]
    if head == "joints":
        joints = revolute_joints(doc)
        if field not in ("damping", "friction") or sub:
            raise ConfigError(file, path, "joints have two identifiable fields: damping (viscous), friction (dry)")
        items = [(i, name, None) for i, name in enumerate(joints)]
        if not items:
            raise ConfigError(file, path, "the mechanism has no revolute joint between two bodies or a body and the ground")
        hits = _select(items, ref, "joint", file, path)
        kind, unit = ("joint", "N m s/rad") if field == "damping" else ("joint_friction", "N m")
        return [Parameter(f"joints.{name}.{field}", f"joints.{name}.{field}", (kind, (name,) + joints[name]), unit, 0.0)
                for _, name, _ in hits]
    if head == "sensors":
        return sensor_gain_parameters(doc, file, path, ref, field, sub, _items, _select)
    prefix = {"planar_bodies": "body", "points": "P", "loads": "load", "sliders": "slider"}[head]
    items = _items(doc, head, prefix)
    if head == "loads":  # the loader's default load names
        items = [(i, str(it.get("name", f"load{i}_{it.get('type')}")), it) for i, _, it in items]
    hits = _select(items, ref, {"planar_bodies": "body"}.get(head, head[:-1]), file, path)
    out = []
    for i, name, item in hits:
        spec_path, unit = _field(head, item, field, sub, i, file, path, ref == "*")
        if spec_path is None:
            continue
        key = keypath(*spec_path)
        label_head = "bodies" if head == "planar_bodies" else head
        tail = spec_path[2] if field != "inertia" else "inertia"
        if len(spec_path) > 3:
            tail += f".{'xy'[spec_path[3]]}" if field == "cog" else f"[{spec_path[3]}]"
        out.append(Parameter(key, f"{label_head}.{name}.{tail}", ("doc", spec_path), unit,
                             0.0 if unit in NONNEGATIVE_UNITS else -math.inf))
    if not out:
        raise ConfigError(file, path, f"no {head} item has an identifiable field {field!r}")
    return out


def _field(head, item, field, sub, i, file, path, wildcard):
    """(document path, unit) of ITEM.FIELD[.SUB]; (None, None) to skip under a wildcard."""
    def bad(msg):
        if wildcard:
            return None, None
        raise ConfigError(file, path, msg)

    if head == "planar_bodies":
        if field == "cog":
            comp = {"x": 0, "y": 1, 0: 0, 1: 1}.get(sub[0]) if len(sub) == 1 else None
            if comp is None:
                return bad("cog components are cog.x / cog.y")
            return (head, i, "cog", comp), "m"
        if field not in BODY_FIELDS or sub:
            return bad(f"identifiable body fields: {', '.join(BODY_FIELDS)}, cog.x, cog.y")
        if field == "length" and len(item.get("points", [])) != 2:
            return bad("only a two-point body has a length field")
        name, unit = BODY_FIELDS[field]
        return (head, i, name), unit
    if head == "points":
        if field not in ("x", "y") or sub:
            return bad("identifiable point fields: x, y")
        return (head, i, field), "m"
    if head == "sliders":
        if field != "mass" or sub:
            return bad("identifiable slider field: mass")
        return (head, i, "mass"), "kg"
    # loads
    kind = item.get("type")
    if field == "c":
        units = {"joint_damping": "N m s/rad", "point_damping": "N s/m", "joint_friction": "N m", "point_friction": "N"}
        if kind not in units:
            return bad(f"a {kind!r} load has no damping or friction 'c'")
        return (head, i, "c"), units[kind]
    if field == "value":
        value = item.get("value")
        if kind == "force":
            comp = {"x": 0, "y": 1, 0: 0, 1: 1}.get(sub[0]) if len(sub) == 1 else None
            if comp is None:
                return bad("a force's value components are value[0] / value[1]")
            if isinstance(value, list) and isinstance(value[comp], str) and "t" in _names(value[comp]):
                return bad("only a constant load value can be identified")
            return (head, i, "value", comp), "N"
        if sub:
            return bad("this load's value is a scalar")
        if isinstance(value, (dict, list)) or (isinstance(value, str) and "t" in _names(value)):
            return bad("only a constant load value can be identified")
        return (head, i, "value"), "N m" if kind in ("torque", "motor") else ""
    return bad("identifiable load fields: c (damping), value (constant loads)")


def _names(text: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", str(text)))


def parse_bounds(text: str | None, file: str = "--bounds") -> dict[str, tuple[float, float]]:
    """``'KEY=LO:HI,KEY=LO:HI'`` -> {key path (may contain *): (lo, hi)}; ConfigError if bad."""
    out: dict[str, tuple[float, float]] = {}
    if not text:
        return out
    for part in split_list(text):
        key, sep, rng = part.partition("=")
        lo_s, sep2, hi_s = rng.partition(":")
        if not sep or not sep2 or not key.strip():
            raise ConfigError(file, part, "expected KEY=LOWER:UPPER (either side may be empty)")
        try:
            lo = float(lo_s) if lo_s.strip() else -math.inf
            hi = float(hi_s) if hi_s.strip() else math.inf
        except ValueError:
            raise ConfigError(file, part, "bounds must be numbers") from None
        if not lo < hi:
            raise ConfigError(file, part, f"lower bound {lo:g} must be below upper bound {hi:g}")
        out[key.strip()] = (lo, hi)
    return out


def split_list(text: str) -> list[str]:
    """Split on commas that are not inside brackets (``cog[0]`` keeps its brackets)."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return [p for p in parts if p]


def apply_values(doc, params: list[Parameter], values, base_gravity) -> dict:
    """A deep copy of the YAML document with each parameter set to its value (floats)."""
    out = copy.deepcopy(doc)
    tilt = None
    for par, v in zip(params, values):
        kind, where = par.target
        v = float(v)
        if kind == "gravity":
            g = base_gravity
            norm = math.hypot(*g)
            out["gravity"] = [v * g[0] / norm, v * g[1] / norm]
        elif kind == "gravity_tilt":
            tilt = v  # after the magnitude: rotates whatever gravity the document then has
        elif kind in ("joint", "joint_friction"):
            _set_joint_damping(out, where, v, "joint_damping" if kind == "joint" else "joint_friction")
        else:
            _set(out, where, v, base_gravity)
    if tilt is not None:
        gx, gy = out.get("gravity", list(base_gravity))
        c, s = math.cos(tilt), math.sin(tilt)
        out["gravity"] = [c * float(gx) - s * float(gy), s * float(gx) + c * float(gy)]
    return out


def _set(doc, path, v, base_gravity):
    node = doc
    for k in path[:-1]:
        if k == "gravity" and "gravity" not in node:
            node["gravity"] = list(base_gravity)
        if k == "cog" or (k == "value" and isinstance(node.get("value"), list)):
            node[k] = list(node[k])
        node = node[k]
    node[path[-1]] = v


def _set_joint_damping(doc, where, v, kind: str = "joint_damping"):
    point, body, body2 = where
    loads = doc.setdefault("loads", []) or []
    doc["loads"] = loads
    for ld in loads:
        if is_joint_load(doc, ld, body, body2, kind):
            ld["c"] = v
            return
    names = {i: n for i, n, _ in _items(doc, "planar_bodies", "body")}
    new = {"type": kind, "name": f"joint_{point}_{kind.split('_')[1]}", "body": names[body], "c": v}
    if body2 >= 0:
        new["body2"] = names[body2]
    loads.append(new)


def is_joint_load(doc, ld, body: int, body2: int, kind: str = "joint_damping") -> bool:
    """True if ``ld`` (a load mapping of ``doc``) is the ``kind`` load (joint_damping or
    joint_friction) between bodies ``body`` and ``body2`` (indices; -1 = the ground), in
    either order."""
    if not isinstance(ld, dict) or ld.get("type") != kind:
        return False
    return _same_pair(ld, body, body2, {i: n for i, n, _ in _items(doc, "planar_bodies", "body")})


def _same_pair(ld, body, body2, names) -> bool:
    def idx(ref):
        if ref is None or ref == "ground":
            return -1
        if isinstance(ref, str):
            return next((i for i, n in names.items() if n == ref), None)
        return int(ref)

    pair = {idx(ld.get("body")), idx(ld.get("body2"))}
    return pair == {body, body2}


def current_value(par: Parameter, spec) -> float:
    """The parameter's value in a MechanismSpec (expressions evaluated)."""
    kind, where = par.target
    if kind == "gravity":
        return float(math.hypot(*spec.gravity))
    if kind == "gravity_tilt":
        return 0.0  # the file's direction is the reference
    if kind in ("joint", "joint_friction"):
        _, body, body2 = where
        load = "joint_damping" if kind == "joint" else "joint_friction"
        for ld in spec.loads:
            if ld.kind == load and {ld.body, ld.body2} == {body, body2}:
                return float(ld.c)
        return 0.0
    head = where[0]
    if head == "sensors":
        return sensor_gain_value(spec, where)
    if head == "gravity":
        return float(spec.gravity[where[1]])
    if head == "parameters":
        return float(spec.parameters[where[1]])
    i, field, sub = where[1], where[2], where[3:]
    item = {"planar_bodies": spec.bodies, "points": spec.points, "sliders": spec.sliders, "loads": spec.loads}[head][i]
    if head == "loads" and field == "value":
        return float(item.value[sub[0] if sub else 0](0.0))
    v = getattr(item, field)
    return float(v[sub[0]] if sub else v)
