"""Read a mechanism YAML file (libmbse format + mbde extensions) into a MechanismSpec.

The libmbse format (``parameters``, ``points``, ``planar_bodies``,
``relative_coordinates``) is read unchanged; mbde adds names, ``gravity``, ``sliders``,
``loads``, ``driving_constraints`` (:mod:`mbde_core.model.drivers`),
``independent_coordinates``, the initial state and ``sensors``. Every key, its unit and
its conventions are in ONE table, :mod:`mbde_core.model.schema`, which this loader checks
files against and the documentation's reference is generated from.
"""
from __future__ import annotations

import math
import os

import numpy as np

from mbde_core.config.yamlnode import Node, parse_yaml, read_yaml
from mbde_core.errors import ConfigError
from mbde_core.model import schema
from mbde_core.model.loader_items import NAME_RE, coord_values, fixed_length, item_name, item_ref, read_drivers, read_load
from mbde_core.model.spec import BodySpec, LoadSpec, MechanismSpec, PointSpec, RelativeCoordinateSpec, SliderSpec

# the keys and types come from the schema (mbde_core/model/schema.py), the documentation's source too
TOP_KEYS = schema.TOP.names()
REL_TYPES = tuple(schema.RELATIVE_TYPES)


def load_mechanism_spec(path: str | os.PathLike) -> MechanismSpec:
    """Load and validate a mechanism YAML file; raises ConfigError (file, key path, problem)."""
    return spec_from_node(read_yaml(path))


def mechanism_spec_from_text(text: str, label: str = "<string>") -> MechanismSpec:
    return spec_from_node(parse_yaml(text, label))


def spec_from_node(root: Node) -> MechanismSpec:
    try:
        return _spec_from_node(root)
    except ConfigError as err:  # an index convention mixed up: name the right one
        hint = schema.expression_hint(err.message, err.path, root.value)
        if hint is None:
            raise
        raise ConfigError(err.file, err.path, f"{err.message}; {hint}") from None


def _spec_from_node(root: Node) -> MechanismSpec:
    root.mapping(required=schema.TOP.required(), optional=TOP_KEYS)
    file = root.file
    variables: dict[str, float] = {}

    # -- parameters ---------------------------------------------------------------------
    params: dict[str, float] = {}
    if root.has("parameters") and root.get("parameters").value is not None:
        for key, node in root.get("parameters").items():
            if not NAME_RE.match(key) or "-" in key:
                raise node.error("parameter names must be identifiers")
            params[key] = node.number(variables)
            variables[key] = params[key]

    # -- points -------------------------------------------------------------------------
    points: list[PointSpec] = []
    names_seen: dict[str, str] = {}
    for i, node in enumerate(root.req("points").sequence(min_len=1)):
        node.mapping(required=schema.POINT.required(), optional=schema.POINT.names())
        x = node.get("x").number(variables)
        y = node.get("y").number(variables)
        fixed = node.get("fixed").boolean() if node.has("fixed") else False
        name = item_name(node, f"P{i}", names_seen, "point")
        points.append(PointSpec(name, x, y, fixed))
        variables[f"x{i}"] = x
        variables[f"y{i}"] = y
    if all(p.fixed for p in points):
        raise root.get("points").error("every point is fixed: nothing can move")
    point_index = {p.name: i for i, p in enumerate(points)}

    # -- bodies -------------------------------------------------------------------------
    bodies: list[BodySpec] = []
    for bi, node in enumerate(root.req("planar_bodies").sequence(min_len=1)):
        node.mapping(required=schema.BODY.required(), optional=schema.BODY.names())
        name = item_name(node, f"body{bi}", names_seen, "body")
        pts_nodes = node.get("points").sequence(min_len=2)
        idx = tuple(item_ref(n, point_index, len(points), "point", variables) for n in pts_nodes)
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
            fixed_length(node, length, bv)
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
            node.mapping(required=schema.RELATIVE.required(), optional=schema.RELATIVE.names())
            if node.get("type").value not in REL_TYPES:
                raise node.get("type").error(
                    f"unknown type {node.get('type').value!r}; the one type is RelativeAngleAbsoluteDOF: "
                    + schema.ANGLE_CONVENTION)
            kind = node.get("type").string(REL_TYPES)
            pts = node.get("points").sequence(min_len=2, max_len=2)
            a, b = (item_ref(n, point_index, len(points), "point", variables) for n in pts)
            if a == b:
                raise node.get("points").error("the two points must differ")
            if points[a].fixed and points[b].fixed:
                raise node.get("points").error("both points are fixed: the angle cannot change")
            name = item_name(node, f"theta{ri}", names_seen, "relative coordinate")
            rels.append(RelativeCoordinateSpec(name, kind, (a, b)))

    # -- sliders ---------------------------------------------------------------------------
    sliders: list[SliderSpec] = []
    if root.has("sliders") and root.get("sliders").value is not None:
        for si, node in enumerate(root.get("sliders").sequence()):
            node.mapping(required=schema.SLIDER.required(), optional=schema.SLIDER.names())
            k = item_ref(node.get("point"), point_index, len(points), "point", variables)
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
            name = item_name(node, f"slider{si}", names_seen, "slider")
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
            loads.append(read_load(node, li, point_index, body_index, coord_index, points, bodies, variables))

    drivers = read_drivers(root, coord_index, coord_names, body_index, bodies, names_seen, variables)

    # -- independent coordinates, initial state ------------------------------------------------
    independent = None
    if root.has("independent_coordinates") and root.get("independent_coordinates").value is not None:
        nodes = root.get("independent_coordinates").sequence(min_len=1)
        independent = tuple(item_ref(n, coord_index, len(coord_names), "coordinate", variables) for n in nodes)
        if len(set(independent)) != len(independent):
            raise root.get("independent_coordinates").error("a coordinate is listed twice")
    initial_position = coord_values(root.get("initial_position"), coord_index, coord_names, variables)
    initial_velocity = coord_values(root.get("initial_velocity"), coord_index, coord_names, variables)

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
