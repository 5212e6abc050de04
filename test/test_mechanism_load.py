"""Loading shipped mechanisms and the libmbse reference file, and the format's semantics."""
import math
import os

import numpy as np
import pytest

from conftest import MSC_DIR, mech_path
from engine_reference import NOANGLE
from mbde_core.errors import ConfigError
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism, load_mechanism


def test_msc_reference_file_loads_unchanged():
    m = load_mechanism(os.path.join(MSC_DIR, "fourbars1-with-rel-angle.yaml"))
    assert m.n == 5 and m.dof == 1
    assert m.coordinate_names == ["P1.x", "P1.y", "P2.x", "P2.y", "theta0"]
    assert list(m.independent) == [4]  # the relative angle is chosen as z
    np.testing.assert_allclose(m.q0, [1, 0, 1, 2, 0], atol=1e-14)
    lengths = [b.length for b in m.spec.bodies]
    np.testing.assert_allclose(lengths, [1, 2, math.hypot(3, 2)])
    np.testing.assert_allclose([b.I0 for b in m.spec.bodies], [1 / 3, 2 * 4 / 3, 4 * 13 / 3])


@pytest.mark.parametrize(
    "name, n, dof, z",
    [
        ("fourbar", 5, 1, ["theta"]),
        ("fourbar_pf", 5, 1, ["theta"]),
        ("fivebar", 8, 2, ["theta1", "theta2"]),
        ("slider_crank", 5, 1, ["theta"]),
        ("pendulum", 3, 1, ["theta"]),
    ],
)
def test_shipped_mechanisms(mechanisms, name, n, dof, z):
    m = mechanisms[name]
    assert (m.n, m.dof, m.independent_names) == (n, dof, z)
    assert np.max(np.abs(m.phi(m.q0))) < 1e-12


def test_fourbar_geometry(mechanisms):
    m = mechanisms["fourbar"]
    assert m.q0[4] == pytest.approx(math.pi / 3, abs=1e-12)
    P = m.points(m.q0)
    np.testing.assert_allclose(np.linalg.norm(P[1] - P[0]), 2.0, rtol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(P[2] - P[1]), 8.0, rtol=1e-13)
    np.testing.assert_allclose(np.linalg.norm(P[3] - P[2]), 5.0, rtol=1e-13)
    assert [b.mass for b in m.spec.bodies] == [2.0, 8.0, 5.0]


def test_fourbar_pf_is_refined_from_approximate_points(mechanisms):
    m = mechanisms["fourbar_pf"]
    P = m.points(m.q0)
    assert np.linalg.norm(P[3] - P[2]) == pytest.approx(0.540, rel=1e-12)
    assert np.linalg.norm(P[2] - P[1]) == pytest.approx(0.270, rel=1e-12)
    assert P[2, 1] > 0  # coupler up, as drawn


def test_libmbse_variables_and_polygons():
    text = NOANGLE
    spec = mechanism_spec_from_text(text)
    assert spec.parameters == {"a": 2.0, "b": 6.0}
    assert [b.mass for b in spec.bodies] == [1.0, 3.0, 1.0]  # index is 1-based
    assert spec.bodies[1].cog == (1.0, 0.1)  # length12 = |P1 P2| = 2
    assert spec.bodies[1].I0 == pytest.approx(3.0 * 4.25)  # length13^2 = |P1 P3|^2 = 2^2 + 0.5^2
    m = Mechanism(spec)
    assert m.dof == 1  # a four-bar with a ternary (triangle) coupler
    from mbde_core.engine import kinematics

    q, ok = kinematics.solve_position(m, m.q0[m.independent] + 0.05, m.q0)
    assert ok
    P0, P = m.points(m.q0), m.points(q)
    assert np.max(np.abs(P - P0)) > 0.01  # it moved
    for i, j in ((1, 2), (1, 3), (2, 3)):  # the triangle is rigid (no mirror flip either)
        assert np.linalg.norm(P[j] - P[i]) == pytest.approx(np.linalg.norm(P0[j] - P0[i]), rel=1e-12)
    area = lambda X: (X[2, 0] - X[1, 0]) * (X[3, 1] - X[1, 1]) - (X[2, 1] - X[1, 1]) * (X[3, 0] - X[1, 0])  # noqa: E731
    assert area(P) == pytest.approx(area(P0), rel=1e-12)


def test_extensions_sliders_loads_names_initial_state():
    text = """
points:
  - {name: A, x: 0, y: 0, fixed: true}
  - {name: C, x: 0.1, y: 0}
  - {name: S, x: 0.4, y: 0}
planar_bodies:
  - {name: crank, points: [A, C], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
  - {name: rod, points: [C, S], length: auto, mass: 1, I0: mass*length^2/3, cog: [length/2, 0]}
sliders: [{name: guide, point: S, angle: 0, mass: 2}]
relative_coordinates: [{name: th, type: RelativeAngleAbsoluteDOF, points: [A, C]}]
gravity: [0, -1.62]
loads:
  - {type: motor, coordinate: th, value: "0.5*sin(t)"}
  - {type: joint_damping, body: crank, c: 0.01}
  - {type: force, point: S, value: [-1, 0]}
  - {type: torque, body: rod, value: {table: [[0, 0], [1, 2]]}}
  - {type: point_damping, point: S, c: 0.3}
initial_position: {th: 0.3}
initial_velocity: {th: 2.0}
"""
    m = Mechanism(mechanism_spec_from_text(text))
    assert m.gravity.tolist() == [0, -1.62]
    assert m.q0[m.coordinate_index("th")] == pytest.approx(0.3)
    assert m.qd0[m.coordinate_index("th")] == pytest.approx(2.0)
    assert abs(m.q0[m.coordinate_index("S.y")]) < 1e-14
    Q0 = m.forces(0.0, m.q0, np.zeros(m.n))
    Q1 = m.forces(0.5, m.q0, np.zeros(m.n))
    assert Q1[m.coordinate_index("th")] - Q0[m.coordinate_index("th")] == pytest.approx(0.5 * math.sin(0.5))
    k = m.coordinate_index("S.x")
    assert m.M[k, k] > 2.0  # slider point mass added


# ------------------------------------------------------------------ index conventions
BASE_PTS = "points: [{x: 0, y: 0, fixed: true}, {x: 1, y: 0}, {x: 1, y: 1}]\n"


@pytest.mark.parametrize("text, where, says", [
    # x<i> is 0-based and exists for points above: using the point itself names the range
    ("points: [{x: 0, y: 0, fixed: true}, {x: 1, y: x1}]\nplanar_bodies: [{points: [0, 1], length: auto, mass: 1, I0: 1, cog: [0, 0]}]",
     "points[1].y", "numbered from 0 in file order, and exist for points defined above this one (here x0)"),
    # counting points from 1 in a body
    (BASE_PTS + "planar_bodies: [{points: [0, 1], length: x3, mass: 1, I0: 1, cog: [0, 0]}]",
     "planar_bodies[0].length", "there is no point 3 (counting from 1?)"),
    # lengthIJ is 1-based within the body: the 0-based spelling names the right one
    (BASE_PTS + "planar_bodies: [{points: [0, 1, 2], mass: length01, I0: 1, cog: [0, 0]}]",
     "planar_bodies[0].mass", "numbers the body's own points from 1 (libmbse)"),
    (BASE_PTS + "planar_bodies: [{points: [0, 1, 2], mass: length01, I0: 1, cog: [0, 0]}]",
     "planar_bodies[0].mass", "did you mean length12?"),
    (BASE_PTS + "planar_bodies: [{points: [0, 1], length: length12, mass: 1, I0: 1, cog: [0, 0]}]",
     "planar_bodies[0].length", "only for bodies with 3 or more points"),
    # a ternary body's length is fixed by its points
    (BASE_PTS + "planar_bodies: [{points: [0, 1, 2], length: 2, mass: 1, I0: 1, cog: [0, 0]}]",
     "planar_bodies[0].length", "distance from its first to its second point (1 m), fixed by the points"),
    # the angle convention in the error
    (BASE_PTS + "planar_bodies: [{points: [0, 1], length: auto, mass: 1, I0: 1, cog: [0, 0]}]\n"
     "relative_coordinates: [{type: RelativeAngle, points: [0, 1]}]",
     "relative_coordinates[0].type", "counter-clockwise from the world x axis"),
])
def test_index_and_length_conventions_in_errors(text, where, says):
    with pytest.raises(ConfigError) as err:
        mechanism_spec_from_text(text, "m.yaml")
    assert err.value.path == where and says in str(err.value), str(err.value)


def test_ternary_body_length_auto_or_its_value_is_accepted():
    for length in ("auto", "1.0", "sqrt(1)"):
        spec = mechanism_spec_from_text(
            BASE_PTS + f"planar_bodies: [{{points: [0, 1, 2], length: {length}, mass: 1, I0: 1, cog: [0, 0]}}]", "m.yaml")
        assert spec.bodies[0].length == pytest.approx(1.0)


def test_schema_is_what_the_loader_accepts():
    """Every key of the schema's sections is accepted where the schema says (one file using
    them all loads), and a key the schema does not list is refused with its path."""
    from mbde_core.model import schema

    assert set(schema.LOAD_TYPES) == {"force", "torque", "motor", "generalized_force", "joint_damping", "point_damping",
                                      "joint_friction", "point_friction"}
    for sec in schema.SECTIONS:
        assert all(k.meaning for k in sec.keys), sec.path
    with pytest.raises(ConfigError) as err:
        mechanism_spec_from_text(BASE_PTS.replace("{x: 1, y: 0}", "{x: 1, y: 0, fixd: true}")
                                 + "planar_bodies: [{points: [0, 1], length: auto, mass: 1, I0: 1, cog: [0, 0]}]", "m.yaml")
    assert err.value.path == "points[1].fixd" and "did you mean 'fixed'" in str(err.value)
