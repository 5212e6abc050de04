"""numba backend of the batched RK4 step: one compiled loop over particles on every core.

Why: the numpy path (:mod:`mbde_core.engine.fastpath`, ``vector`` kernels) runs a
batched RK4 step as ~10^3 numpy operations on (N,) rows. Each is fast, but the Python
glue between them holds the GIL, so a thread pool over particle chunks does not scale
(:mod:`mbde_core.estimators.particle.propagate`), and at N = 1e5 the ~100 live temporaries fall
out of the caches. Here the mechanism's ``scalar`` kernels (the same generated text,
:mod:`mbde_core.model.codegen`) are compiled by numba together with the RK4 algorithm
written for one particle (:mod:`mbde_core.engine.numba_source`), and a ``prange`` loop
runs the particles on numba's threads without the GIL: every particle's state lives in
registers (tuples of floats), nothing is allocated per particle.

Mathematics (per particle, identical to :class:`mbde_core.engine.integrators.RK4`):
x = [z, zd], zdd = f(z, zd, t) + v by the R-matrix method (R = [I; -Phi_q,d^-1 Phi_q,z]
by block-triangular solves with Phi_q,d; Mbar = R^T M R, Qbar = R^T (Q - M R'zd),
Mbar zdd = Qbar); four stages, each position problem Phi(q) = 0 solved by Newton from
the same second/first-order predictors as the numpy path (|Phi| <= 1e-14 max(1, L^2),
<= 30 iterations, steps limited to the length scale), qd = R zd. The operations are the
``scalar`` kernels' in the same order; results agree with the numpy path to rounding
(only sin/cos may differ by an ulp: libm vs numpy's SIMD loops) -- tested on a four-bar,
a five-bar (2 DOF), a slider-crank and mechanisms with loads and dense blocks.

The vectorised loop: when :func:`mbde_core.engine.simd_kernels.enabled` (``MBDE_PF_SIMD``,
default on) and the mechanism's SIMD module builds (dependent blocks of at most 3
coordinates, a flattened step of at most ``simd_source.MAX_LINES`` lines), :func:`rk4_step`
runs it instead of the per-particle loop below (which stays the fallback for the other
mechanisms): blocks of particles as a structure of arrays through one straight-line loop
body that LLVM vectorises. Four-bar (fourbar_pf), the PF's propagation, process CPU time
per particle-step on a 2-core AMD EPYC (Zen 4, AVX-512) under a load average of ~4: 69 ns
at 1e4 particles and 106 ns at 1e5 (this per-particle loop: ~500 ns; the numpy path:
580-680 ns); the filter's results agree with the numpy path to ~1e-13 rad (RMSE of z).

Exceptions are not guessed at: a particle whose Newton step or result is not finite
(exactly singular block, infinite input) is flagged and recomputed by the numpy path,
which then applies its own rules (least-squares steps, failure flags).

Determinism: each particle is computed alone, from its own inputs, so its result does
not depend on the thread count or on how ``prange`` splits the loop (tested).

Compilation: the module text is written to a cache directory and imported from there
(:mod:`mbde_core.engine.numba_cache`), every function ``@njit(cache=True)``: numba stores
the machine code next to it, so only the first use of a mechanism on a machine compiles (~10-20 s for the four-bar on a busy
2-core machine; later processes load it in ~0.5 s). Compiled modules are shared per
process by text.

Threads: ``threads`` (default :func:`mbde_core.estimators.particle.propagate.default_threads`:
the CPU count or ``MBDE_PF_THREADS``). The set is cut into ``threads`` contiguous ranges
(boundaries N i / threads); the calling thread steps the first and a small thread pool
(:mod:`mbde_core.engine.thread_pools`, fork-safe) the others, each through
``rk4_range``, which releases the GIL. numba's own parallel
loop (``prange``) was used before: its fork-safe threading layer, ``workqueue``, waits by
naps of usleep(1) (75 us on a 2-vCPU VM, measured) in the workers and in the caller, and
in the filter's step (a parallel launch every ~2 ms, serial numpy work in between) the
second core stayed mostly idle: four-bar, 1e4 particles, idle 2-core machine, rk4 3.4-3.5 ms
per step on two threads against 4.4 on one (process CPU / wall 1.2); the GNU OpenMP layer
gave 2.0 ms but is not fork-safe (the benches and replay fork worker processes). Own
threads: see ``mbde bench pf --only speed``. The PF's other compiled kernels
(:mod:`mbde_core.estimators.particle.compiled`: moments, proposal, resampling) run the same
way on their own pool; the layer stays ``workqueue`` unless ``NUMBA_THREADING_LAYER`` says
otherwise, for any parallel loop that may remain.

Selection (:func:`backend`): ``MBDE_PF_BACKEND`` = ``numpy`` | ``numba`` | ``auto``
(default): numba when importable, the mechanism has kernels and no drivers, and one of

- N >= ``MBDE_PF_NUMBA_MIN`` (default :data:`AUTO_MIN` particles);
- the compiled module of the mechanism is already on disk (:func:`cached`: an earlier
  process compiled it; loading it costs ~0.3 s, a step of 300 four-bar particles then
  ~0.15 ms instead of ~1.2 ms on numpy);
- the caller expects at least :data:`WORK_MIN` particle-steps (``work``: particles x
  remaining steps; a replay knows its bag's length), enough for a first compile (5-20 s)
  to pay: numpy costs ~4 us per particle-step, numba ~0.5 us.

Otherwise (a short run of a small set on a mechanism never compiled here, e.g. the
tests of many mechanisms) numpy runs and nothing is compiled. ``numba`` forces it
whenever possible. Sets below ``SERIAL_MAX`` particles, or whose step costs less than two
hand-offs to a pool thread (:func:`mbde_core.engine.thread_pools.parts`), run in the calling
thread alone (a hand-over costs more than it saves there and the replay's worker processes already
fill the cores): ``rk4_range`` over the whole set, so a step hands nothing over to
another thread (on a busy machine that thread waited for a time slice at every step:
replay's pf worker 13.7 s wall for 5.4 s of CPU, measured with numba's prange).
"""
from __future__ import annotations

import os

import numpy as np

from mbde_core.engine import fastpath, numba_cache, simd_kernels, step_backends, thread_pools
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.engine.numba_cache import SERIAL_MAX, numba
from mbde_core.engine.numba_source import module_source

AUTO_MIN = 4096
WORK_MIN = 5_000_000  # particle-steps from which a first compile pays (auto)
_LOCK = numba_cache.LOCK  # the lock of the compiled modules (also serialises calls into numba's threads)
_MODULES = numba_cache.MODULES  # the modules imported in this process, by key
_folders = numba_cache.folders  # where the scalar module is looked for on disk


def describe() -> str:
    """One line for reports: whether numba is available and how the backend is chosen."""
    nb = numba()
    if nb is None:
        return "PF backend: numpy (numba is not importable: pip install numba)"
    return (f"PF backend: MBDE_PF_BACKEND={requested()} (numba {nb.__version__}, rk4 on numba from "
            f"{os.environ.get('MBDE_PF_NUMBA_MIN', AUTO_MIN)} particles when auto)")


def requested() -> str:
    """The backend asked for by MBDE_PF_BACKEND: numpy, numba or auto."""
    val = os.environ.get("MBDE_PF_BACKEND", "auto").strip().lower() or "auto"
    return val if val in ("numpy", "numba", "auto") else "auto"


def supported(mech) -> bool:
    """The mechanism can run on this backend (generated kernels, no drivers)."""
    return fastpath.kernels(mech) is not None and not getattr(mech, "drivers", None)


def backend(mech, N: int, integrator_name: str = "rk4", work: float = 0.0) -> str:
    """'numba' or 'numpy': the backend that runs a step of N particles; work: the
    particle-steps the caller expects to run (0: unknown; module docstring)."""
    want = requested()
    if want == "numpy" or integrator_name != "rk4":
        return "numpy"
    if not supported(mech):
        return "numpy"
    if want == "auto":  # tested first: a small set never imports numba (~0.4 s of CPU) unless cached
        try:
            lo = int(os.environ.get("MBDE_PF_NUMBA_MIN", AUTO_MIN))
        except ValueError:
            lo = AUTO_MIN
        if N < lo and work < WORK_MIN and not cached(mech):
            return "numpy"
    if numba() is None:
        return "numpy"
    if _simd(mech, N):
        return "numba"
    return "numba" if load(mech) is not None else "numpy"


def _simd(mech, N: int) -> bool:
    """Whether the vectorised loop steps N particles: enabled, its module builds, and it is
    compiled already, or nothing is (a compile is due anyway), or the set is large
    (>= AUTO_MIN: its compile pays). A small set whose mechanism has only the per-particle
    module compiled keeps that one (no 5-15 s compile for a short run)."""
    if not simd_kernels.enabled():
        return False
    if not (simd_kernels.cached(mech) or N >= AUTO_MIN or not _scalar_cached(mech, ("rk4_range",))):
        return False
    return simd_kernels.load(mech) is not None


def cached(mech, funcs: tuple = ("rk4_range",)) -> bool:
    """Whether the compiled module of ``mech`` is loaded in this process or on disk (its
    source file and numba's index of each of ``funcs`` next to it), so that using it costs
    a load, not a compile. The disk is looked at once per mechanism kernels, ``funcs`` and
    process (the answer is remembered: a small set asks at every step)."""
    if funcs == ("rk4_range",) and simd_kernels.enabled() and simd_kernels.cached(mech):
        return True
    return _scalar_cached(mech, funcs)


def _scalar_cached(mech, funcs) -> bool:
    """:func:`cached` of the per-particle module alone."""
    K = fastpath.kernels(mech)
    if K is None:
        return False
    if getattr(K, "_numba", None):
        return True
    return numba_cache.memo_on_disk(K, "_numba_on_disk", funcs, lambda: _on_disk(mech, K, funcs))


def _on_disk(mech, K, funcs) -> bool:
    ver = numba_cache.version()
    if ver is None:
        return False
    try:
        text = module_source(mech, K)[0]
    except ValueError:
        return False
    return numba_cache.on_disk(numba_cache.module_key(text, ver), funcs, _MODULES, _folders())


def load(mech):
    """The compiled module of ``mech`` (a namespace with ``rk4_range``, ``NT``, ``NJ``), or None."""
    K = fastpath.kernels(mech)
    if K is None or numba() is None:
        return None
    mod = getattr(K, "_numba", None)
    if mod is not None:
        return mod or None
    try:
        text, nt, nj = module_source(mech, K)
    except ValueError:
        K._numba = False
        return None
    mod = numba_cache.import_text(numba_cache.module_key(text, numba().__version__), text)
    mod.NT, mod.NJ = nt, nj
    K._numba = mod
    return mod


def rk4_step(mech, t, q, qd, qdd, h, extra=None, threads: int = 1):
    """One RK4 step of N particles on numba: (q1, qd1, qdd1 (N, n) Fortran-ordered as the numpy path's, ok (N,),
    Context at q1 or None). qdd (N, n) or None (then computed at (q, qd)); extra (N, g)
    or None: acceleration added to zdd during the step (``RK4.step``'s extra_zdd).
    The vectorised loop of :mod:`mbde_core.engine.simd_kernels` runs it when enabled and
    the mechanism's module builds; else the per-particle loop below."""
    if _simd(mech, q.shape[0]):
        return simd_kernels.rk4_step(mech, t, q, qd, qdd, h, extra, threads)
    mod = load(mech)
    K = fastpath.kernels(mech)
    N, n, g = q.shape[0], K.n, K.g
    f = fastpath.soa  # batch-last (k, N) C-contiguous: free for the (N, n) F-ordered results of a step
    Q, QD = f(q, n), f(qd, n)
    QDD = np.zeros((n, 1)) if qdd is None else f(qdd, n)
    V = np.zeros((g, 1)) if extra is None else f(extra, g)
    tv = [tuple(float(x) for x in K.time_values(s)) for s in (t, t + 0.5 * h, t + h)]
    oq, oqd, oqdd = np.empty((n, N)), np.empty((n, N)), np.empty((n, N))
    ok, bad = np.empty(N, dtype=bool), np.empty(N, dtype=bool)
    otr, oj, orr = np.empty((mod.NT, N)), np.empty((mod.NJ, N)), np.empty((n * g, N))
    args = (Q, QD, QDD, qdd is not None, V, extra is not None, tv[0], tv[1], tv[2], float(h),
            oq, oqd, oqdd, ok, bad, otr, oj, orr)
    parts = thread_pools.parts(N, threads, 500.0, SERIAL_MAX)  # ~500 ns a particle (module docstring)
    bounds = [N * i // parts for i in range(parts + 1)]
    pending = [thread_pools.pool("rk4", parts - 1).submit(mod.rk4_range, *args, bounds[i], bounds[i + 1]) for i in range(1, parts)]
    mod.rk4_range(*args, bounds[0], bounds[1])
    for f in pending:
        f.result()
    ctx = step_backends.Context(N, tuple(otr), tuple(oj), tuple(tuple(orr[i * g + k] for k in range(g)) for i in range(n)))
    if bad.any():  # non-finite values met: the numpy path decides for those particles
        idx = np.nonzero(bad)[0]
        st = get_integrator("rk4").step(mech, t, MBState(Q[:, idx].T, QD[:, idx].T, None if qdd is None else QDD[:, idx].T),
                                        h, extra_zdd=None if extra is None else V[:, idx].T)
        oq[:, idx], oqd[:, idx], oqdd[:, idx], ok[idx] = st.q.T, st.qd.T, st.qdd.T, st.ok
        fastpath.finite_ok(ok, idx, oq, oqd, oqdd)
        ctx = None
    return oq.T, oqd.T, oqdd.T, ok, ctx


def place(mech, z, zd, guess):
    """M particles placed at z (M, g) from the guesses (M, n) by the compiled kernel of
    :mod:`mbde_core.engine.place_source` in the calling thread (the GIL released):
    (q (M, n), qd = R zd (M, n), the columns of R (g, M, n), ok (M,): converged and finite),
    equal to kinematics.solve_position, r_matrix and velocity to rounding; None when the
    kernel is not available (numba missing, no kernels, drivers)."""
    if getattr(mech, "drivers", None):
        return None
    mod = load(mech)
    if mod is None or not hasattr(mod, "place_range"):
        return None
    M, n, g = z.shape[0], mech.n, mech.dof
    f = np.ascontiguousarray
    oq, oqd, orr = np.empty((n, M)), np.empty((n, M)), np.empty((n * g, M))
    ok, bad = np.empty(M, dtype=bool), np.empty(M, dtype=bool)
    mod.place_range(f(z.T, dtype=float), f(zd.T, dtype=float), f(guess.T, dtype=float), oq, oqd, orr, ok, bad, 0, M)
    return oq.T, oqd.T, orr.reshape(n, g, M).transpose(1, 2, 0), ok & ~bad
