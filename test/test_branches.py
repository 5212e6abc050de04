"""Assembly branches: counts, labels consistent along motions, branch-constrained assembly."""
import re

import numpy as np
import pytest

from mbde_core.engine import kinematics
from mbde_core.engine.branches import BranchTool
from mbde_core.engine.integrators import MBState, get_integrator


@pytest.mark.parametrize("name, count", [("fourbar", 2), ("fourbar_pf", 2), ("fivebar", 2), ("slider_crank", 2), ("pendulum", 1)])
def test_branch_counts(mechanisms, name, count):
    m = mechanisms[name]
    bt = BranchTool(m)
    qs, labels = bt.enumerate(m.q0[m.independent])
    assert len(qs) == count
    assert sorted(labels.tolist()) == list(range(count))
    assert labels[0] == 0 and np.max(np.abs(qs[0] - m.q0)) < 1e-9  # label 0 = as drawn
    for q in qs:
        assert np.max(np.abs(m.phi(q))) < 1e-10


def test_fourbar_has_exactly_two_branches_everywhere(mechanisms):
    m = mechanisms["fourbar_pf"]  # Grashof crank-rocker: every crank angle assembles
    bt = BranchTool(m, seed=1)
    for th in np.linspace(-np.pi, np.pi, 13):
        qs, labels = bt.enumerate(np.array([th]))
        assert len(qs) == 2 and sorted(labels.tolist()) == [0, 1]
        # the two assemblies mirror P2 about the line P1-B
        P = m.points(qs)
        assert np.allclose(P[0, 1], P[1, 1])


def test_label_is_constant_along_a_motion(mechanisms):
    m = mechanisms["fourbar_pf"]
    bt = BranchTool(m)
    integ = get_integrator("rk4")
    for label in (0, 1):
        q0 = bt.assemble(m.q0[m.independent][None], np.array([label]))[0][0]
        s = MBState(q0, kinematics.velocity(m, q0, [12.0]))  # full crank revolutions
        seen = set()
        for k in range(600):
            s = integ.step(m, k * 2e-3, s, 2e-3)
            seen.add(int(bt.label(s.q[None])[0]))
        assert seen == {label}


def test_assemble_on_requested_branch(mechanisms):
    m = mechanisms["fourbar_pf"]
    bt = BranchTool(m, seed=3)
    rng = np.random.default_rng(0)
    z = rng.uniform(-np.pi, np.pi, (200, 1))
    labels = rng.integers(0, 2, 200)
    q, ok = bt.assemble(z, labels)
    assert ok.mean() > 0.95
    assert np.all(bt.label(q[ok]) == labels[ok])
    np.testing.assert_allclose(q[ok][:, m.independent], z[ok])
    assert np.max(np.abs(m.phi(q[ok]))) < 1e-10


@pytest.mark.parametrize("name", ["fourbar", "fivebar"])
def test_enumerate_many_equals_one_node_at_a_time(mechanisms, name):
    """The batched enumeration (the PF's branch atlas) gives the same configurations and labels, bit for bit."""
    m = mechanisms[name]
    z0 = m.q0[m.independent]
    zs = z0 + np.linspace(-1.0, 1.0, 7)[:, None] * np.ones(m.dof)
    one, many = BranchTool(m, seed=3), BranchTool(m, seed=3)
    expected = [one.enumerate(z) for z in zs]
    got = many.enumerate_many(zs)
    assert len(got) == len(expected)
    for (qa, la), (qb, lb) in zip(expected, got):
        assert np.array_equal(qa, qb) and np.array_equal(la, lb)
    assert one.signatures == many.signatures


# A Stephenson-type six-bar: a four-bar whose coupler is a ternary body carrying a dyad to a
# third pivot. Four assemblies at one crank angle (two of the four-bar, two of the dyad); the
# dyad's apex joins a ternary body's third point.
STEPHENSON = """
points:
  - {name: A, x: 0, y: 0, fixed: true}
  - {name: P1, x: 0, y: 1}
  - {name: P2, x: 2.5, y: 2.0}
  - {name: B, x: 3, y: 0, fixed: true}
  - {name: P3, x: 1.5, y: 3.0}
  - {name: P4, x: 4.0, y: 3.5}
  - {name: C, x: 6, y: 1, fixed: true}
planar_bodies:
  - {name: crank, points: [A, P1], length: auto, mass: 1, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {name: coupler, points: [P1, P2, P3], mass: 2, I0: 3, cog: [1, 0.5]}
  - {name: rocker, points: [P2, B], length: auto, mass: 1, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {name: link, points: [P3, P4], length: auto, mass: 1, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {name: output, points: [P4, C], length: auto, mass: 1, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
relative_coordinates:
  - {name: theta, type: RelativeAngleAbsoluteDOF, points: [A, P1]}
"""


def test_every_assembly_of_a_multi_loop_linkage_gets_its_own_label(tmp_path):
    """Distinct assemblies get distinct labels (they used to share them: labels read before a
    later signature was sorted in, and no sign at a ternary body's third point), the file's
    configuration is label 0, and `mbde info` prints them so."""
    from conftest import run_mbde
    from mbde_core.engine.branches import BranchTool
    from mbde_core.model.mechanism import Mechanism
    from mbde_core.model.loader import mechanism_spec_from_text

    m = Mechanism(mechanism_spec_from_text(STEPHENSON, "stephenson.yaml"))
    qs, labels = BranchTool(m).enumerate(m.q0[m.independent])
    assert len(qs) == 4 and sorted(labels) == [0, 1, 2, 3]
    assert np.max(np.abs(qs[list(labels).index(0)] - m.q0)) < 1e-9
    # a second tool labels the same assemblies the same way
    qs2, labels2 = BranchTool(m).enumerate(m.q0[m.independent])
    for q, lab in zip(qs, labels):
        k = int(np.argmin(np.abs(qs2 - q).max(axis=1)))
        assert labels2[k] == lab
    (tmp_path / "stephenson.yaml").write_text(STEPHENSON)
    out = run_mbde("info", tmp_path / "stephenson.yaml").stdout
    assert sorted(re.findall(r"branch (\d+):", out)) == ["0", "1", "2", "3"]
