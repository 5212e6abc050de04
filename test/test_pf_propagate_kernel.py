"""The particle filter's propagation (mbde_core.estimators.particle.propagate.Propagator) on
the compiled backend, whose RK4 step is the vectorised loop of mbde_core.engine.simd_kernels,
against the same Propagator on the numpy engine: random particle sets with the filter's
extra acceleration, the kernel context carried from one step to the next (the vectorised
step leaves J out of it: the numpy path computes it when it needs it), gathered by a
resampling (take) and on two threads. Skipped without numba.
"""
import numpy as np
import pytest

from conftest import random_states
from mbde_core.engine.integrators import get_integrator
from mbde_core.estimators.particle.propagate import Propagator

pytest.importorskip("numba")
from mbde_core.engine import simd_kernels  # noqa: E402

pytestmark = pytest.mark.usefixtures("split_at_any_size")  # thread ranges split at any size (conftest)


def _run(m, backend, monkeypatch, q, qd, extras, idx, threads):
    """Three steps of 5 ms (extra accelerations ``extras``), resampled by ``idx`` after the
    second; returns the states after each step and the backends that ran them."""
    monkeypatch.setenv("MBDE_PF_BACKEND", backend)
    p = Propagator(get_integrator("rk4"), m, threads=threads)
    out, used = [], []
    qdd, t = None, 0.0
    for k, extra in enumerate(extras):
        st = p.step(t, q, qd, qdd, 0.005, extra)
        out.append(st)
        used.append(p.backend)
        assert p.context(len(st.q)) is not None  # the context at the result is kept for the next step
        q, qd, qdd, t = st.q, st.qd, st.qdd, t + 0.005
        if k == 1:
            p.take(idx)
            q, qd, qdd = q[idx], qd[idx], qdd[idx]
    return out, used


@pytest.mark.parametrize("name,N,threads", [("fourbar_pf", 3000, 2), ("fivebar", 500, 1)])
def test_one_propagation_on_the_kernel_matches_the_numpy_engine(mechanisms, monkeypatch, name, N, threads):
    m = mechanisms[name]
    assert simd_kernels.enabled() and simd_kernels.load(m) is not None
    q, qd = random_states(m, N, 5)
    rng = np.random.default_rng(6)
    extras = [rng.normal(0.0, 30.0, (N, m.dof)) for _ in range(3)]
    idx = np.sort(rng.integers(0, N, N))  # a resampling: duplicates, some particles dropped
    fast, used_fast = _run(m, "numba", monkeypatch, q, qd, extras, idx, threads)
    slow, used_slow = _run(m, "numpy", monkeypatch, q, qd, extras, idx, threads)
    assert used_fast == ["numba"] * 3 and used_slow == ["numpy"] * 3
    for a, b in zip(fast, slow):
        assert a.ok.all() and b.ok.all()
        assert np.abs(a.q - b.q).max() < 1e-10
        assert np.abs(a.qd - b.qd).max() < 1e-8
        assert np.abs(a.qdd - b.qdd).max() < 1e-8 * max(1.0, np.abs(b.qdd).max())
