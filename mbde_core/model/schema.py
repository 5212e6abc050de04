"""The mechanism YAML schema: every key with its type, unit and meaning, in ONE table.

The loader (:mod:`mbde_core.model.loader`) checks a file's keys against these sections
(required and allowed keys, load and driver types), and the documentation's mechanism
reference is generated from them, so the two cannot drift. Conventions that users trip
over are stated here once and reused in the loader's error messages:

- points are numbered **from 0** in file order (``points: [0, 1]`` = ``[A, P1]``), and the
  expression variables ``x<i>``/``y<i>`` use the same numbering;
- the libmbse variables ``index`` (the body's number) and ``lengthIJ`` (distance between
  the body's points I and J) count **from 1**, as libmbse does;
- a ``RelativeAngleAbsoluteDOF`` is the angle of the segment from its first to its second
  point, counter-clockwise from the world x axis [rad];
- the ``length`` of a body with three or more points is the distance from its first to its
  second point, fixed by the points (only ``auto`` or that value is accepted).
"""
from __future__ import annotations

import re

from mbde_core.config.schema import Key, Section

ANGLE_CONVENTION = ("the angle of the segment from its first to its second point, counter-clockwise "
                    "from the world x axis [rad]")
RELATIVE_TYPES = {"RelativeAngleAbsoluteDOF": ANGLE_CONVENTION}


NUM = "number or expression"
REF_POINT = "point name or index (from 0)"
REF_BODY = "body name or index (from 0)"
REF_COORD = "coordinate name (`P1.x`, `theta`) or index into q (from 0)"
TIME_FN = "number, expression in `t`, or `{table: [[t, value], ...]}`"

TOP = Section("", "Top level", "A mechanism file is a mapping with these keys.", (
    Key("name", "string", "the mechanism's name", default="the file name"),
    Key("description", "string", "free text"),
    Key("parameters", "mapping name -> " + NUM, "named values for the expressions below; each may use earlier ones"),
    Key("gravity", "[gx, gy] of " + NUM, "gravitational acceleration", "m/s^2", default="[0, -9.81]"),
    Key("points", "list of points", "the points of the linkage (see below), numbered from 0 in file order", required=True),
    Key("planar_bodies", "list of bodies", "the rigid bodies (see below), numbered from 0 for references", required=True),
    Key("relative_coordinates", "list", "angle coordinates appended to q (see below)"),
    Key("sliders", "list", "points moving on fixed lines (see below)"),
    Key("loads", "list", "forces and dampers the model knows (see below)"),
    Key("driving_constraints", "list", "prescribed motions Phi(q, t) = 0 (see below)"),
    Key("independent_coordinates", "list of " + REF_COORD, "the coordinates z the estimators report",
        default="chosen by pivoted QR, angles preferred"),
    Key("initial_position", "mapping coordinate -> " + NUM, "values of independent coordinates in the initial state",
        "m or rad", default="the points' positions"),
    Key("initial_velocity", "mapping coordinate -> " + NUM, "rates of independent coordinates", "m/s or rad/s",
        default="0"),
    Key("sensors", "list of sensors", "sensors mounted on this mechanism (the sensor YAML reference)"),
))

POINT = Section("points[i]", "Points", "Each point, fixed to the ground or moving, in one assembled "
                "configuration (moving points are refined onto the constraints). After point i the expression "
                "variables `x<i>`, `y<i>` (numbered from 0) exist for later expressions.", (
    Key("name", "identifier", "name used in references", default="`P<i>`"),
    Key("x", NUM, "x coordinate", "m", required=True),
    Key("y", NUM, "y coordinate", "m", required=True),
    Key("fixed", "bool", "fixed to the ground", default="false"),
))

BODY = Section("planar_bodies[i]", "Bodies", "A rigid body through two or more points. Its frame has its "
               "origin at the first point and its x axis towards the second, y to the left "
               "(counter-clockwise); `cog` and the sensors' offsets are given in it.", (
    Key("name", "identifier", "name used in references", default="`body<i>`"),
    Key("points", "list of >= 2 " + REF_POINT, "the points the body is rigid through", required=True),
    Key("length", NUM + " or `auto`", "two points: the distance of the points (`auto`: as placed). Three or more "
        "points: fixed by the points (the distance from the first to the second); only `auto` or that value is "
        "accepted. Expressions below may use `length`", "m", default="required for two points"),
    Key("mass", NUM, "mass (may use `length`)", "kg", required=True),
    Key("I0", NUM, "moment of inertia about the FIRST point (may use `mass`, `length`); at least mass |cog|^2",
        "kg m^2", required=True),
    Key("cog", "[x, y] of " + NUM, "centre of mass in the body frame (may use `I0`)", "m", required=True),
))

RELATIVE = Section("relative_coordinates[i]", "Relative coordinates", "Coordinates appended to q after the "
                   "points' x and y.", (
    Key("name", "identifier", "the coordinate's name", default="`theta<i>`"),
    Key("type", "one of: " + ", ".join(RELATIVE_TYPES), "`RelativeAngleAbsoluteDOF`: " + ANGLE_CONVENTION,
        required=True),
    Key("points", "[a, b] of " + REF_POINT, "the segment from a to b", required=True),
))

SLIDER = Section("sliders[i]", "Sliders", "A moving point constrained to a fixed line, with an optional "
                 "point mass.", (
    Key("name", "identifier", "the slider's name", default="`slider<i>`"),
    Key("point", REF_POINT, "the moving point on the line", required=True),
    Key("origin", "[x, y] of " + NUM, "a point of the line; positions along it are measured from here", "m",
        default="the point's position"),
    Key("direction", "[dx, dy] of " + NUM, "the line's direction (normalised); or `angle`"),
    Key("angle", NUM, "the line's direction from the world x axis, instead of `direction`", "rad"),
    Key("mass", NUM, "point mass of the slider block", "kg", default="0"),
))

LOAD_TYPES = {
    # type: (required keys, optional keys, meaning)
    "force": (("point", "value"), (), "a force [N] on a moving point: `value: [fx, fy]`, each a " + TIME_FN),
    "torque": (("body", "value"), (), "a torque [N m] on a body, counter-clockwise, known to the model"),
    "motor": (("value",), ("body", "coordinate"),
              "a motor: exactly one of `body` (a torque [N m]) or `coordinate` (a generalized force on it); "
              "`value` is what the model assumes (0: unknown to it; the estimators' input states and "
              "`rule.force_limits` handle the rest)"),
    "generalized_force": (("coordinate", "value"), (), "a generalized force on a coordinate [N or N m]"),
    "joint_damping": (("body", "c"), ("body2",), "viscous torque -c (w_body - w_body2) [N m s/rad]; `body2`: "
                      "another body or `ground` (default)"),
    "point_damping": (("point", "c"), (), "viscous force -c v on a moving point [N s/m]"),
    "joint_friction": (("body", "c"), ("body2", "velocity_scale"),
                       "dry (Coulomb) friction torque -c w / sqrt(w^2 + eps^2) of the relative rate w = w_body - "
                       "w_body2 [N m], regularised below `velocity_scale` eps (default 0.01 rad/s)"),
    "point_friction": (("point", "c"), ("velocity_scale",),
                       "dry (Coulomb) friction force -c v / sqrt(|v|^2 + eps^2) on a moving point [N], "
                       "regularised below `velocity_scale` eps (default 0.01 m/s)"),
}
LOAD = Section("loads[i]", "Loads", "Forces and dampers the model knows; the keys each `type` takes are in "
               "the table after this one.", (
    Key("name", "string", "the load's name (identification: `loads.NAME.c`)", default="`load<i>_<type>`"),
    Key("type", "one of: " + ", ".join(LOAD_TYPES), "the kind of load", required=True),
    Key("point", REF_POINT, "the point it acts on (force, point_damping, point_friction)"),
    Key("body", REF_BODY, "the body it acts on (torque, motor, joint_damping, joint_friction)"),
    Key("body2", REF_BODY + " or `ground`", "the second body of a joint_damping or joint_friction", default="ground"),
    Key("coordinate", REF_COORD, "the coordinate it acts on (generalized_force, motor)"),
    Key("value", TIME_FN, "the force or torque", "N or N m"),
    Key("c", NUM, "damping coefficient (dampers) or friction torque / force (friction)",
        "N m s/rad, N s/m, N m or N"),
    Key("velocity_scale", NUM, "regularisation eps of dry friction", "rad/s or m/s", default="0.01"),
))

DRIVER_TYPES = {
    # type: (reference key, function key, meaning)
    "coordinate": ("coordinate", "position", "q_c = f(t): a coordinate follows `position`"),
    "distance": ("body", "length", "|P_j - P_i| = f(t): a two-point body's length follows `length` (the body "
                 "massless or with its mass at one of its points)"),
}
DRIVER = Section("driving_constraints[i]", "Driving constraints", "Prescribed motions: the position problem "
                 "solves Phi(q, t) = 0 with them, the dynamics are those of the remaining degrees of freedom. "
                 "Supported by the particle filters; the Kalman observers and scenarios refuse them.", (
    Key("name", "identifier", "the driver's name", default="`driver<i>`"),
    Key("type", "one of: " + ", ".join(DRIVER_TYPES), "what is prescribed", required=True),
    Key("coordinate", REF_COORD, "the driven coordinate (type coordinate)"),
    Key("body", REF_BODY, "the driven two-point body (type distance)"),
    Key("position", TIME_FN, "the coordinate's value (type coordinate)", "m or rad"),
    Key("length", TIME_FN, "the body's length (type distance)", "m"),
    Key("velocity", TIME_FN, "f'(t)", default="4th-order finite differences of f"),
    Key("acceleration", TIME_FN, "f''(t)", default="4th-order finite differences of f"),
))

SECTIONS = (TOP, POINT, BODY, RELATIVE, SLIDER, LOAD, DRIVER)

# expression variables: (name, where it exists, meaning)
VARIABLES = (
    ("parameter names", "everywhere after their definition", "the values of `parameters`"),
    ("`x<i>`, `y<i>`", "after point i", "coordinates of point i [m], points numbered **from 0** in file order"),
    ("`index`", "in a body", "the body's number counted **from 1** (libmbse)"),
    ("`length`", "in a body, after `length`", "the body's length [m]"),
    ("`auto`", "in a two-point body's `length`", "the distance of its two points [m]"),
    ("`lengthIJ`", "in a body with >= 3 points", "distance between the body's points I and J, numbered **from 1** "
     "within the body (`length12`, `length13`, ...; libmbse)"),
    ("`mass`, `I0`", "in a body, after them", "the body's mass [kg] and inertia about its first point [kg m^2]"),
    ("`t`", "in time functions (loads, drivers)", "time [s]"),
    ("`pi`, `e`", "everywhere", "constants"),
)

_UNKNOWN = re.compile(r"unknown name '([A-Za-z_][A-Za-z0-9_]*)'")


def expression_hint(message: str, path: str, doc) -> str | None:
    """A sentence naming the right convention when ``message`` (a loader error at key path
    ``path`` of the document ``doc``) is an unknown expression variable that mixes up the
    0-based point numbering and libmbse's 1-based ``index``/``lengthIJ``; else None."""
    m = _UNKNOWN.search(message)
    if m is None or not isinstance(doc, dict):
        return None
    name = m.group(1)
    points = doc.get("points") if isinstance(doc.get("points"), list) else []
    at_point = re.match(r"points\[(\d+)\]", path)
    at_body = re.match(r"planar_bodies\[(\d+)\]", path)
    xy = re.fullmatch(r"([xy])(\d+)", name)
    if xy:
        i = int(xy.group(2))
        available = int(at_point.group(1)) if at_point else len(points)
        last = (f"{xy.group(1)}0..{xy.group(1)}{available - 1}" if available > 1 else
                f"{xy.group(1)}0" if available else "none yet")
        where = "points defined above this one" if at_point else "the file's points"
        text = (f"x<i>/y<i> are the coordinates of point i, numbered from 0 in file order, and exist for {where} "
                f"(here {last})")
        if i >= available:
            text += f": point {i} is not defined yet" if at_point else f": there is no point {i} (counting from 1?)"
        return text
    ll = re.fullmatch(r"length(\d)(\d)", name)
    if ll and at_body:
        bodies = doc.get("planar_bodies") or []
        k = int(at_body.group(1))
        body = bodies[k] if k < len(bodies) and isinstance(bodies[k], dict) else {}
        n = len(body.get("points") or [])
        if n <= 2:
            return "lengthIJ exists only for bodies with 3 or more points; a two-point body's distance is `length`"
        i, j = int(ll.group(1)), int(ll.group(2))
        text = (f"lengthIJ numbers the body's own points from 1 (libmbse): length12 is the distance from its first "
                f"to its second point; this body has points 1..{n}")
        if 0 <= i < n and 0 <= j < n and i != j and (i == 0 or j == 0):
            text += f" (did you mean length{i + 1}{j + 1}?)"
        return text
    if name in ("index", "length", "mass", "I0", "auto") or re.fullmatch(r"length\d\d", name):
        return f"`{name}` exists only inside a planar_bodies entry"
    return None
