"""mbde ROS 2 nodes: thin rclpy adapters around the ROS-free cores of :mod:`mbde_core.live`.

Executables (console scripts of setup.py, :mod:`mbde_nodes.entry`): ``mbde-mechanism-model``,
``mbde-simulator``, ``mbde-imu-driver``, ``mbde-encoder-driver``, ``mbde-estimator``; each
module is also runnable as ``python -m mbde_nodes.<name> --ros-args ...``. Shared
plumbing: :mod:`mbde_nodes.common`.
"""

import os

# One BLAS thread per node unless the user sets otherwise (before numpy is imported), as the
# `mbde` command does (mbde_core/cli/main.py): on the filters' small matrices OpenBLAS's own
# threads only add CPU. The CEKF with input states on adekf_slider_crank spent ~7.5 ms of
# process CPU per 0.5 ms step with OpenBLAS's default threads (scipy's expm of a 6x6 matrix,
# 2-core AMD EPYC at load ~10), 1 ms with one thread.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
