"""The errorEKF's single-state hot path compiled with numba (rk4 prediction, measurement row, correction).

:mod:`mbde_core.engine.rk4_single` and :mod:`mbde_core.estimators.kalman.errorekf_scalar` run
the errorEKF's per-step work on Python floats: ~85 us for the rk4 step of the four-bar
(four position problems, four dynamics evaluations) and ~80 us for one gyroscope update,
of a stage that must stay under ~165 us per 5 ms step to replay one hour in two minutes.
Here the same algorithm text runs compiled, from the mechanism's numba module
(:mod:`mbde_core.engine.numba_kernels`, :mod:`mbde_core.engine.numba_source`: the
generated scalar kernels under ``@njit``):

- prediction: ``rk4_one`` (the batched PF step's per-particle function, called with one
  state): :class:`mbde_core.engine.integrators.RK4` with x = [z, zd] (see rk4_single),
  returning the state at t + h and the kernel values there (tr, J, R, zdd, R'zd), which
  the update's Jacobian uses;
- measurement row (paper 003 sec. 3.1.2): ``hrow``, H = [h_q R + h_qd (dqd/dz), h_qd R]
  with Phi_q,d (dqd/dz)_k,d = -D(R_k, qd) (errorekf_scalar's doc); the sensor's h, h_q,
  h_qd stay in Python (``linearize_floats``);
- exact correction (paper 003 sec. 3.3 with the position problem): ``correct_one``,
  Newton on Phi(q) = 0 at z + dz from q + R dz, then qd = R (zd + dzd) and the dynamics;
- one call per scalar reading, ``update_one`` (:func:`update`): the row, s = H P H^T + r,
  the gate d^2 = y^2 / s, K = P H^T / s, dx = K y, the Joseph form
  P+ = (I - K H) P (I - K H)^T + K r K^T (symmetrised) and the correction above.

The operations are those of the Python path in the same order and without fast-math, so
results agree with it to rounding (libm's sin/cos in both; tested for a four-bar, a
five-bar (2 DOF) and a slider-crank). A computation that meets a non-finite value
(``bad``) is redone by the Python path, which applies its own rules.

When the compiled path is used (``MBDE_EKF_BACKEND`` = ``python`` | ``numba`` |
``auto``, default auto): numba importable, the mechanism has generated kernels and no
drivers, and, in auto, either numba's disk cache already holds the compiled functions
for this mechanism (a load costs ~0.5 s) and the run is not known to be short (the
caller's ``expect_steps``: at least :data:`LOAD_STEPS` steps), or the estimator has run
:data:`AUTO_STEPS` predictions in this process: a long run, which then compiles in a background thread
(:class:`Background`; the one-time compile, ~10-20 s of CPU on a busy 2-core machine,
is repaid within ~2 min of 200 Hz data) while it goes on in Python, and switches when
the compiled functions are ready. Short runs (unit tests of many mechanisms) therefore
never compile; ``numba`` compiles at construction (the unit tests of this path).
"""
from __future__ import annotations

import math
import os
import threading

import numpy as np

from mbde_core.engine import numba_kernels
from mbde_core.engine.integrators import MBState
from mbde_core.estimators.base import UpdateResult, accepted_result
from mbde_core.estimators.kalman.reduced import FullState

AUTO_STEPS = 24000  # predictions before auto compiles (2 min at 200 Hz)
# steps from which loading the cached compiled path pays in auto: importing numba and
# loading the functions cost ~0.6 s of CPU in a fresh process, the compiled step saves
# ~0.1 ms (10 s fourbar_imu bag, 2000 steps: worker CPU 2.0 s compiled, 1.4 s Python)
LOAD_STEPS = 6000
FUNCS = ("rk4_one", "update_one")


def requested() -> str:
    val = os.environ.get("MBDE_EKF_BACKEND", "auto").strip().lower() or "auto"
    return val if val in ("python", "numba", "auto") else "auto"


def _cached(mech) -> bool:
    """numba's disk cache holds FUNCS of this mechanism's module (without importing numba)."""
    return numba_kernels.cached(mech, tuple(FUNCS))


def select(mech, force_check: bool = False, steps: int | None = None):
    """The compiled module for the errorEKF of ``mech``, or None (module docstring's rule).
    force_check: the auto rule's step count was reached (compile if needed); steps: the
    steps the run expects (None: unknown)."""
    want = requested()
    if want == "python" or not numba_kernels.supported(mech):
        return None
    if want == "auto" and not force_check and (not _cached(mech) or (steps is not None and steps < LOAD_STEPS)):
        return None
    if numba_kernels.numba() is None:
        return None
    mod = numba_kernels.load(mech)
    if mod is None or not hasattr(mod, "hrow"):
        return None
    return mod


class Background:
    """The compiled module of a long run, compiled in a daemon thread (the auto rule after
    AUTO_STEPS): the estimator keeps stepping on the Python path meanwhile (a live node
    does not stall) and switches when ``module`` is set (results are equal to rounding)."""

    def __init__(self, est, dt: float):
        self.module = self.error = None
        K = est._kernels
        n, g = K.n, K.g
        q = tuple(est.state.q.tolist())
        qd = tuple(est.state.qd.tolist())
        tv = K.time_values(est.t)
        tv = tuple(float(x) for x in tv) if tv else ()
        self._args = (est.mech, q, qd, ZERO(n), ZERO(g), tv, float(dt), 2 * g)
        self.thread = threading.Thread(target=self._run, name="mbde-errorekf-numba", daemon=True)
        self.thread.start()

    def _run(self):
        mech, q, qd, zn, zg, tv, dt, nx = self._args
        try:
            mod = select(mech, force_check=True)
            if mod is None:
                return
            # the argument types of predict() and update() (floats from the kernels)
            q1, qd1, _, _, _, tr1, J1, R1, _, _ = mod.rk4_one(q, qd, zn, False, zg, tv, tv, tv, dt)
            mod.update_one(q1, qd1, tr1, J1, R1, qd1, qd1, 0.0, 1.0, np.eye(nx), math.inf, tv)
        except Exception as exc:  # noqa: BLE001 -- no compiled path then: the Python one goes on
            self.error = exc
            return
        self.module = mod


def auto(est, dt):
    """errorekf_numba's auto rule: after AUTO_STEPS predictions compile in the
    background, then use the compiled path from the first step after it is ready."""
    if est._nb_wait > 0:
        est._nb_wait -= 1
        if est._nb_wait == 0:
            est._nb_bg = Background(est, dt)
    elif est._nb_bg.module is not None:
        est._nb, est._nb_bg, est._nb_wait = est._nb_bg.module, None, -1
    elif not est._nb_bg.thread.is_alive():  # nothing compiled: Python only
        est._nb_bg, est._nb_wait = None, -1


def predict(est, mod, dt, extra) -> bool:
    """errorekf_scalar.predict on the compiled rk4_one; False: redo on the Python path."""
    K = est._kernels
    state = est.state
    q = tuple(state.q.tolist())
    qd = tuple(state.qd.tolist())
    has = state.qdd is not None
    qdd = tuple(state.qdd.tolist()) if has else ZERO(K.n)
    v = tuple(extra.tolist()) if extra is not None else ZERO(K.g)
    t = est.t
    tv0 = K.time_values(t)
    if tv0:  # time-dependent loads (otherwise the empty tuple at every time)
        tv = K.time_values
        tv0, tv1, tv2 = (tuple(float(x) for x in tv(s)) for s in (t, t + 0.5 * dt, t + dt))
    else:
        tv1 = tv2 = tv0
    q1, qd1, qdd1, ok, bad, tr1, J1, R1, zdd1, rd1 = mod.rk4_one(q, qd, qdd, has, v, tv0, tv1, tv2, float(dt))
    if bad:
        return False
    est.advance_clock(dt)
    if ok and math.isfinite(sum(q1)):
        qa = np.array(q1)
        est.state = type(state)(qa, np.array(qd1), np.array(qdd1))
        est.full = FullState(qa, est.state.qd, est.state.qdd, np.array(zdd1), np.array(R1), np.array(rd1), (q1, tr1, J1))
    else:
        est.failures += 1
        est.state = type(state)(state.q, state.qd)
        est.full = None
    return True


_ZEROS: dict[int, tuple] = {}


def ZERO(k: int) -> tuple:
    z = _ZEROS.get(k)
    if z is None:
        z = _ZEROS[k] = (0.0,) * k
    return z


def row(mod, st: FullState, qd: list, hq, hqd) -> list:
    """The measurement row H (2g floats) at the FullState ``st`` (hrow)."""
    xs, tr, J = st.ctx
    return list(mod.hrow(tuple(xs), tuple(qd), tuple(tr), tuple(J), tuple(map(tuple, st.R.tolist())),
                         tuple(hq), tuple(hqd)))


def update(est, mod, st: FullState, name, value, gates, variance_factor: float = 1.0):
    """errorekf_scalar.update on update_one (the sensor's h, h_q, h_qd and the residual
    in Python): (UpdateResult, dx), dx the correction the Python path must make (numbers
    not finite on the compiled one), else None."""
    sensor = est.sensors[name]
    xs, tr, J = st.ctx
    qd = st.qd.tolist()
    h, hq, hqd = sensor.linearize_floats(xs, qd)
    y = sensor.residual(np.asarray(value, float), np.array([h]))  # ReducedModel.residual of one sensor
    r = float(est.model.noise_covariance([name], est._sigma)[0, 0]) * variance_factor
    yv = float(y[0])
    gate = gates.get(name) if gates else None
    K = est._kernels
    tv = K.time_values(est.t)
    if tv:
        tv = tuple(float(x) for x in tv)
    gated, d2, s, P, Kg, code, q, tr1, J1, qd1, zdd, qdd, R, rd = mod.update_one(
        tuple(xs), tuple(qd), tuple(tr), tuple(J), tuple(map(tuple, st.R.tolist())), tuple(hq), tuple(hqd),
        yv, r, np.ascontiguousarray(est.P, dtype=float), math.inf if gate is None else float(gate), tv)
    dist = [] if gate is None else [(name, d2)]
    if gated:
        return UpdateResult([], [name], distances=dist), None
    est.P = P
    res = accepted_result(name, y, s, dist)
    if code == 0:
        new = FullState(np.array(q), np.array(qd1), np.array(qdd), np.array(zdd), np.array(R), np.array(rd), (q, tr1, J1))
        est.state = MBState(new.q, new.qd, new.qdd)
        est.full = new
    elif code in (1, 2):
        est.failures += 1
    else:  # non-finite on the way: the Python correction decides
        return res, [k * yv for k in Kg.tolist()]
    return res, None


def correct(est, mod, z, zd, guess):
    """The exact correction on correct_one: the new FullState, False (not assembled: a
    failure) or None (non-finite: the Python path decides)."""
    K = est._kernels
    q, ok, bad, tr, J, qd, zdd, qdd, R, rd = mod.correct_one(tuple(z), tuple(zd), tuple(guess),
                                                            tuple(float(x) for x in K.time_values(est.t)))
    if bad:
        return None
    if not ok:
        return False
    return FullState(np.array(q), np.array(qd), np.array(qdd), np.array(zdd), np.array(R), np.array(rd), (q, tr, J))
