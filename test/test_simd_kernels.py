"""The vectorised RK4 step of particle sets (mbde_core.engine.simd_kernels) and its pieces.

Each piece against something it did not produce: the branch-free sincos against libm
(ulps), the unrolled pivoting solves against LAPACK, the text-level inliner against the
functions it flattens, the step against the numpy engine after a particle needed more
Newton iterations than the vector loop takes (the REDO fallback), the generalized input
forces against the numpy engine on the same mechanism with the force as a load of its
model, and the energy of a conservative linkage. (test_pf_numba compares the step with
the numpy engine on five mechanisms, thread counts, subsets and non-finite inputs.)
"""
import math

import numpy as np
import pytest

from conftest import mech_path, random_states
from mbde_core.engine import fastpath, simd_math
from mbde_core.engine.inline_text import Library
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism

ULP = np.finfo(float).eps


def _sincos_python():
    ns = {"math": math, "np": np}
    exec(simd_math.SINCOS, ns)
    return ns["sincos"]


def ulps(got, want):
    return abs(got - want) / max(math.ulp(want), 2.0**-1074) if want != 0 else abs(got) / 2.0**-1074


def test_sincos_within_one_ulp_of_libm():
    sincos = _sincos_python()
    rng = np.random.default_rng(0)
    xs = np.concatenate([rng.uniform(-10, 10, 4000), rng.uniform(-8e5, 8e5, 2000),
                         np.arange(-40, 41) * (math.pi / 4), np.arange(-40, 41) * (math.pi / 2) + 1e-9, [0.0, -0.0, 1e-300]])
    worst = 0.0
    for x in xs:
        s, c = sincos(float(x))
        for got, want in ((s, math.sin(x)), (c, math.cos(x))):
            # 1 ulp of the result, or of 1 for results near 0 (x near a multiple of pi/2: the
            # reduced argument's own rounding, libm's too, is 2^-53 absolute)
            err = abs(got - want) / max(math.ulp(want), ULP if abs(want) < 1e-6 else 0.0)
            worst = max(worst, err)
    assert worst <= 1.0


def test_sincos_is_nan_beyond_its_range_and_for_non_finite_input():
    sincos = _sincos_python()
    for x in (1e6, -1e7, math.inf, -math.inf, math.nan):
        with np.errstate(invalid="ignore"):  # the NaN is made by sqrt of a negative number
            s, c = sincos(x)
        assert math.isnan(s) and math.isnan(c)


@pytest.mark.parametrize("k", [3, 4])
def test_unrolled_solves_match_lapack(k):
    ns = {}
    exec(simd_math.solve_k(k), ns)
    solve = ns[f"SOLVE{k}"]
    rng = np.random.default_rng(k)
    for _ in range(200):
        A = rng.normal(size=(k, k))
        A[0, 0] = 1e-12 * A[0, 0]  # needs the pivoting
        b = rng.normal(size=k)
        x = np.array(solve(tuple(map(tuple, A)), tuple(b)))
        assert np.allclose(x, np.linalg.solve(A, b), rtol=1e-9, atol=1e-9)


LIB = '''
def f(a, b, ez):
    t1 = a * b + 1.0
    t2 = t1 / (a - b)
    if ez is not None:
        t2 = t2 + ez[0]
    return (t2, t1 * 2.0)


def g(x, y):
    u, v = f(x, y, None)
    w = f(x, u, (v,))
    return (w[0] + w[1], u)
'''


def test_flattened_function_computes_what_the_calls_compute():
    ns = {}
    exec(LIB, ns)
    flat = Library(LIB).flatten("def h(x, y):\n    r = g(x, y)\n    p, q = f(r[0], r[1], None)\n    return p - q\n")
    assert "f(" not in flat.split("\n", 1)[1] and "g(" not in flat.split("\n", 1)[1]
    ns2 = {}
    exec(flat, ns2)
    for x, y in ((0.3, 1.7), (-2.0, 0.5), (5.0, 4.0)):
        r = ns["g"](x, y)
        p, q = ns["f"](r[0], r[1], None)
        assert ns2["h"](x, y) == p - q  # the same operations on the same operands: bit-identical


def test_inliner_refuses_a_run_time_branch():
    lib = Library("def f(a):\n    if a > 0:\n        a = -a\n    return a\n")
    with pytest.raises(ValueError, match="run-time branch"):
        lib.flatten("def h(x):\n    return f(x)\n")


pytest.importorskip("numba")
from mbde_core.engine import simd_kernels  # noqa: E402


def numpy_step(m, t, q, qd, qdd, h, extra=None):
    return get_integrator("rk4").step(m, t, MBState(q, qd, qdd), h, extra_zdd=extra)


@pytest.fixture(scope="module")
def fourbar_pf(mechanisms):
    m = mechanisms["fourbar_pf"]
    assert simd_kernels.load(m) is not None
    return m


def test_particles_the_vector_loop_cannot_finish_are_stepped_by_the_scalar_code(fourbar_pf):
    """A huge acceleration on a few particles moves their stages far from the predictors:
    their position problems need more than the loop's two Newton iterations (REDO)."""
    m = fourbar_pf
    q, qd = random_states(m, 64, 1)
    extra = np.zeros((64, 1))
    extra[[3, 40]] = [[4e4], [-6e4]]
    q1, qd1, qdd1, ok, ctx = simd_kernels.rk4_step(m, 0.0, q, qd, None, 0.005, extra)
    ra = numpy_step(m, 0.0, q, qd, None, 0.005, extra)
    assert ok.all() and ra.ok.all()
    assert np.abs(q1 - ra.q).max() < 1e-10 and np.abs(qd1 - ra.qd).max() < 1e-8
    assert np.abs(qdd1 - ra.qdd).max() < 1e-8 * max(1.0, np.abs(ra.qdd).max())
    V = fastpath.kernels(m).vector  # the context of the recomputed particles too
    tr = V.trig(np.ascontiguousarray(q1.T))
    assert np.allclose(ctx.tr[0], tr[0], atol=1e-12) and np.allclose(ctx.tr[1], tr[1], atol=1e-12)


@pytest.mark.parametrize("name,coords,values", [("fourbar_pf", ["theta"], [0.8]),
                                                ("fivebar", None, [1.5, -0.7])])
def test_input_forces_are_the_mechanism_with_those_loads(mechanisms, name, coords, values):
    """u on the input coordinates during the step = the numpy engine on the model with the
    same generalized forces as constant loads (a different code path: the loads enter Q)."""
    m = mechanisms[name]
    names = list(m.coordinate_names)
    cols = [int(c) for c in m.independent] if coords is None else [names.index(c) for c in coords]
    coords = coords or [names[c] for c in cols]
    with open(mech_path(name)) as f:
        text = f.read()
    loads = "".join(f"  - {{type: generalized_force, coordinate: {c}, value: {v}}}\n" for c, v in zip(coords, values))
    loaded = Mechanism(mechanism_spec_from_text(text + "\nloads:\n" + loads, name + "_loaded"))
    N = 40
    q, qd = random_states(m, N, 2)
    u = np.tile(values, (N, 1))
    a, b = (q, qd, None), (q, qd, None)
    for k in range(10):
        t = 0.01 * k
        ra = numpy_step(loaded, t, *a, 0.005)
        rb = simd_kernels.rk4_step(m, t, *b, 0.005, None, 1, u, cols)
        a, b = (ra.q, ra.qd, ra.qdd), (rb[0], rb[1], None)  # qdd without u at the result: not the loaded one
    assert np.abs(rb[0] - ra.q).max() < 1e-10 and np.abs(rb[1] - ra.qd).max() < 1e-9


def test_energy_of_a_conservative_linkage_is_kept(fourbar_pf):
    """fourbar_pf (gravity only) over 1 s of 5 ms steps: the energy changes by RK4's own error
    (~1e-5 of it here), the same as on the numpy path."""
    m = fourbar_pf
    q, qd = random_states(m, 30, 3)
    e0 = m.energy(q, qd)
    a = b = (q, qd, None)
    for k in range(200):
        ra = numpy_step(m, 0.005 * k, *a, 0.005)
        rb = simd_kernels.rk4_step(m, 0.005 * k, *b, 0.005)
        a, b = (ra.q, ra.qd, ra.qdd), rb[:3]
    drift_numpy = np.abs(m.energy(ra.q, ra.qd) - e0)
    drift = np.abs(m.energy(rb[0], rb[1]) - e0)
    assert drift.max() < 1e-4 * np.abs(e0).max()
    assert np.abs(drift - drift_numpy).max() < 1e-9


def test_switch_off(fourbar_pf, monkeypatch):
    monkeypatch.setenv("MBDE_PF_SIMD", "0")
    assert not simd_kernels.enabled()
    monkeypatch.setenv("MBDE_PF_SIMD", "1")
    assert simd_kernels.enabled() and simd_kernels.cached(fourbar_pf)


def test_large_dependent_blocks_are_left_to_the_scalar_module():
    from engine_reference import EXTRA

    m = Mechanism(mechanism_spec_from_text(EXTRA["triad"], "triad"))  # a 6 x 6 dependent block
    assert simd_kernels.load(m) is None

