"""CdrWriter and marker_array_cdr write the bytes rosbags' serialize_cdr writes."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import mech_path
from mbde_core.model.mechanism import load_mechanism
from mbde_core.rosio.cdr_writer import CdrWriter
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.types import MechanismSnapshot
from mbde_core.viz.marker_msgs import MARKER_ARRAY, marker_array, marker_array_cdr
from mbde_core.viz.markers import MechanismDrawer, Shape, estimate_shapes


@pytest.fixture(scope="module")
def factory():
    return RosbagsFactory()


def test_shapes_of_every_kind_give_rosbags_bytes(factory):
    writer = CdrWriter(factory.typestore)
    rng = np.random.default_rng(3)
    shapes = [
        Shape("lines", "a/bars", 0, rng.normal(size=(6, 2)), (1, 0, 0, 1), 0.02, z=0.01),
        Shape("points", "a/pts", 1, rng.normal(size=(5, 2)), (0, 1, 0, 0.5), 0.05,
              colors=rng.uniform(size=(5, 4)), z=0.003),
        Shape("lines", "a/empty", 2, np.zeros((0, 2)), (0, 0, 1, 1), 0.0),
        Shape("text", "a/label", 3, np.array([[0.1, -2.0]]), (1, 1, 1, 1), 0.2, text="ukf  NIS 1.07  é"),
        Shape("text", "a/odd", 4, np.array([[0.0, 0.0]]), (1, 1, 1, 1), 0.1, text="abc"),
    ]
    for stamp in (0.0, 1795817562.123456789, 12.5):
        for k in range(len(shapes) + 1):
            ref = factory.typestore.serialize_cdr(marker_array(factory, shapes[k:] + shapes[:k], "world", stamp),
                                                  MARKER_ARRAY)
            assert marker_array_cdr(writer, shapes[k:] + shapes[:k], "world", stamp) == bytes(ref)


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank"])
def test_estimate_markers_give_rosbags_bytes(factory, name):
    mech = load_mechanism(mech_path(name))
    drawer = MechanismDrawer(mech)
    writer = CdrWriter(factory.typestore)
    g = mech.dof
    q, z = mech.q0, mech.q0[mech.independent]
    snap = MechanismSnapshot(3.25, q, np.zeros(mech.n), np.zeros(mech.n), z, np.zeros(g), np.zeros(g),
                             cov=np.eye(2 * g) * 1e-3, branch_probabilities=np.array([0.25, 0.75]))
    shapes = estimate_shapes(drawer, "ukf", snap, nis=1.5)
    ref = factory.typestore.serialize_cdr(marker_array(factory, shapes, "map", 3.25), MARKER_ARRAY)
    assert marker_array_cdr(writer, shapes, "map", 3.25) == bytes(ref)
