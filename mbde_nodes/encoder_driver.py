"""``encoder_driver`` node: the encoders and slider position sensors of the model, published as
sensor_msgs/JointState, sampled from the ground truth
(see :mod:`mbde_nodes.driver`)."""
from __future__ import annotations

import sys

from mbde_nodes.common import run
from mbde_nodes.driver import Driver


def main(argv=None) -> int:
    return run(lambda: Driver("encoder_driver"), argv)


if __name__ == "__main__":
    sys.exit(main())
