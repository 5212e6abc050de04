"""One BLAS thread for the estimators' steps (:mod:`~mbde_core.estimators.stage.core`).

The filters' matrices are small (6x6 to 30x30): OpenBLAS's own threads only cost there.
The ``mbde`` command and the nodes set one BLAS thread before numpy is imported
(``OPENBLAS_NUM_THREADS``, mbde_core/cli/main.py); a program that imports mbde_core as a
library kept OpenBLAS's default, one thread per core, whose spinning threads count in its
CPU: a CEKF with an input state on paper 004's slider-crank (1 kHz accelerometer, 1 ms
step) took 8.4-8.5 ms of process CPU per step where it takes 1.5-1.7 ms with one thread
(the 6x6 ``scipy.linalg.expm`` of its transition). When an estimator stage is built
:func:`single_blas` therefore sets every BLAS library of the process to one thread, as the
command does, unless the user chose their number (``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS`` or ``OMP_NUM_THREADS`` set): once, not around every step -- switching
back to several threads after each step woke OpenBLAS's threads, which then spun (+15 %
CPU per step for the UKF there, which uses no threaded BLAS call). A program that wants
BLAS threads for its own work after the estimators sets them back itself
(``threadpoolctl.threadpool_limits``).
"""
from __future__ import annotations

import os

try:
    from threadpoolctl import threadpool_limits
except ImportError:  # pragma: no cover - a declared dependency; without it the BLAS threads stay
    threadpool_limits = None

USER_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
_done = [False]


def single_blas() -> None:
    """BLAS on one thread from now on, once per process (module doc); cheap after the first call."""
    if _done[0]:
        return
    _done[0] = True
    if threadpool_limits is None or any(os.environ.get(v) for v in USER_VARIABLES):
        return
    threadpool_limits(limits=1, user_api="blas")
