"""MarkerArrayTemplate writes the bytes of marker_array_cdr, frame after frame."""
from __future__ import annotations

import numpy as np

from mbde_core.rosio.cdr_writer import CdrWriter
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.viz.marker_cdr import MarkerArrayTemplate
from mbde_core.viz.marker_msgs import marker_array_cdr
from mbde_core.viz.markers import Shape


def _frame(rng, k):
    n = 6 if k < 3 else 8  # the shape changes at frame 3: a new template
    return [
        Shape("lines", "a/bars", 0, rng.normal(size=(n, 2)), tuple(rng.uniform(size=4)), rng.uniform(), z=rng.normal()),
        Shape("points", "a/pts", 1, rng.normal(size=(5, 2)), (0, 1, 0, 0.5), rng.uniform(),
              colors=rng.uniform(size=(5, 4)), z=0.003),
        Shape("lines", "a/empty", 2, np.zeros((0, 2)) if k % 2 else rng.normal(size=(4, 2)), (0, 0, 1, 1), 0.1),
        Shape("text", "a/label", 3, rng.normal(size=(1, 2)), (1, 1, 1, 1), 0.2,
              text="ukf  NIS 1.07  é" if k != 4 else "ukf"),
    ]


def test_template_frames_equal_the_writer():
    store = RosbagsFactory().typestore
    writer, template = CdrWriter(store), MarkerArrayTemplate(store)
    rng = np.random.default_rng(5)
    for k in range(8):
        shapes = _frame(rng, k)
        for stamp in (1795817562.123456789 + k, 0.1 * k):
            assert template.serialize(shapes, "world", stamp) == marker_array_cdr(writer, shapes, "world", stamp)
