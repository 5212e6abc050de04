"""The generated kernels and fast paths equal the reference computations.

Three references: plain formulas (engine_reference: Phi row by row, Phi_q by complex
step, dense linear algebra), the engine's generic numpy code (a Mechanism without
generated kernels), and the textbook ALI3-P step. Every shipped mechanism and the extra
ones (loads, polygons, an oblique slider, a dependent angle, a triad, no angle, a
redundant constraint) are checked on random states, single and batched (small batches
run state by state, large ones batch-last), to 1e-12 relative unless stated.
"""
import pickle

import numpy as np
import pytest

import engine_reference as ref
from mbde_core.engine import dynamics, fastpath, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.model.loader import mechanism_spec_from_text
from mbde_core.model.mechanism import Mechanism

SHIPPED = ["fourbar", "fourbar_pf", "fivebar", "slider_crank", "pendulum"]
ALL = SHIPPED + list(ref.EXTRA)


@pytest.fixture(scope="module")
def mechs(mechanisms):
    out = dict(mechanisms)
    for name, text in ref.EXTRA.items():
        out[name] = Mechanism(mechanism_spec_from_text(text, name))
    return out


ULPS = 1e-14  # relative: "equal to rounding" between two implementations of one formula


def rel(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


def states(m, N, seed, spread=0.1):
    """N assembled states near q0 with random velocities (generic code, so independent of the fast paths)."""
    g = ref.generic(m)
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + rng.uniform(-spread, spread, (N, m.dof))
    q, ok = kinematics.solve_position(g, z, np.broadcast_to(m.q0, (N, m.n)))
    assert ok.all()
    qd = kinematics.velocity(g, q, rng.uniform(-2, 2, (N, m.dof)))
    return np.ascontiguousarray(q), np.ascontiguousarray(qd)


def test_every_mechanism_has_kernels(mechs):
    for name in ALL:
        assert mechs[name]._fast() is not None, name
    assert [len(r) for r, _ in mechs["fourbar"]._fast().blocks] == [2, 2]  # crank, then the dyad
    assert 6 in [len(r) for r, _ in mechs["triad"]._fast().blocks]  # dense elimination path


@pytest.mark.parametrize("name", ALL)
def test_constraint_kernels_match_reference(mechs, name):
    m = mechs[name]
    K = m._fast()
    q, qd = states(m, 4, seed=1)
    q = q + np.random.default_rng(2).normal(0, 1e-2, q.shape)  # off the manifold too
    scale = max(1.0, m.length_scale) ** 2
    for k in range(4):
        assert np.max(np.abs(m.phi(q[k]) - ref.phi(m, q[k]))) <= 1e-14 * scale
        assert rel(m.phi_q(q[k]), ref.phi_q(m, q[k])) < 1e-14
        assert rel(m.phi_q_dot_qd(q[k], qd[k]), ref.phi_q_dot_qd(m, q[k], qd[k])) < 1e-13
    # batched (vector kernels) equal the single-state (scalar) kernels to rounding (numpy's
    # SIMD loops and Python floats may round differently on other CPUs)
    for N in (4, 40):
        qb = np.tile(q, (N // 4, 1))
        qdb = np.tile(qd, (N // 4, 1))
        assert np.max(np.abs(m.phi(qb)[:4] - np.array([m.phi(x) for x in q]))) <= 1e-14 * scale
        assert rel(m.phi_q(qb)[:4], np.array([m.phi_q(x) for x in q])) < ULPS
        assert rel(m.phi_q_dot_qd(qb, qdb)[:4], np.array([m.phi_q_dot_qd(x, v) for x, v in zip(q, qd)])) < ULPS
    # the generic evaluators agree as well
    gm = ref.generic(m)
    assert np.max(np.abs(m.phi(q) - gm.phi(q))) <= 1e-14 * scale
    assert rel(m.phi_q(q), gm.phi_q(q)) < 1e-15
    assert rel(m.phi_q_dot_qd(q, qd), gm.phi_q_dot_qd(q, qd)) < 1e-14
    trig = K.scalar.trig(q[0].tolist())
    expected = [v for c in m.rel_columns for v in (np.sin(q[0, c]), np.cos(q[0, c]))]
    assert len(trig) == len(expected) and np.max(np.abs(np.subtract(trig, expected)), initial=0.0) <= 4e-16


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("N", [1, 5, 40])
def test_kinematics_and_dynamics_match_reference(mechs, name, N):
    m = mechs[name]
    q, qd = states(m, N, seed=3)
    rng = np.random.default_rng(4)
    zdd = rng.normal(size=(N, m.dof))
    eQ = rng.normal(size=(N, m.n))
    t = 0.7
    args = (lambda a: a[0]) if N == 1 else (lambda a: a)  # N = 1: the single-state API
    qdd = kinematics.acceleration(m, args(q), args(qd), args(zdd))
    R = kinematics.r_matrix(m, args(q))
    vel = kinematics.velocity(m, args(q), args(qd[:, m.independent]))
    rd = kinematics.rdot_zd(m, args(q), args(qd))
    Q = m.forces(t, args(q), args(qd))
    zf, qf = dynamics.forward(m, t, args(q), args(qd), extra_Q=args(eQ))
    ev = dynamics.evaluate(m, t, q, qd, extra_zdd=zdd)
    Q, qdd, R, vel, rd, zf, qf = (a if N > 1 else a[None] for a in (Q, qdd, R, vel, rd, zf, qf))
    gm = ref.generic(m)
    for k in range(N):
        Rk = ref.r_matrix(m, q[k])
        assert rel(R[k], Rk) < 1e-12
        assert rel(vel[k], qd[k]) < 1e-12  # qd is on the velocity manifold
        assert rel(Q[k], gm.forces(t, q[k], qd[k])) < 1e-15
        # accelerations with zdd given satisfy Phi_q qdd + (Phi_q)' qd = 0 and match R zdd + R'zd
        a_ref = Rk @ zdd[k] + kinematics.rdot_zd(gm, q[k], qd[k])
        assert rel(qdd[k], a_ref) < 1e-12
        assert rel(rd[k], kinematics.rdot_zd(gm, q[k], qd[k])) < 1e-12
        # forward dynamics = the Lagrange-multiplier solution
        qdd_ref = ref.accelerations(m, q[k], qd[k], gm.forces(t, q[k], qd[k]) + eQ[k])
        assert rel(qf[k], qdd_ref) < 1e-10
        assert rel(zf[k], qdd_ref[m.independent]) < 1e-10
        # evaluate() fields
        ev_ref = dynamics.evaluate(gm, t, q[k:k + 1], qd[k:k + 1], extra_zdd=zdd[k:k + 1])
        for f in ("zdd", "qdd", "R", "rdzd", "phi_q", "Mbar", "Qbar", "Q"):
            assert rel(getattr(ev, f)[k], getattr(ev_ref, f)[0]) < 1e-11, f


@pytest.mark.parametrize("name", SHIPPED)
def test_single_state_kinematics_equal_the_generic_code_to_rounding(mechs, name):
    m = mechs[name]
    gm = ref.generic(m)
    q, qd = states(m, 3, seed=5)
    zdd = np.random.default_rng(6).normal(size=(3, m.dof))
    for k in range(3):
        guess = q[k] + 1e-3 * qd[k]
        z = guess[m.independent]
        (qa, oka), (qb, okb) = kinematics.solve_position(m, z, guess), kinematics.solve_position(gm, z, guess)
        assert oka and okb and rel(qa, qb) < ULPS
        for f, fargs in ((kinematics.velocity, (q[k], qd[k, m.independent])), (kinematics.r_matrix, (q[k],)),
                         (kinematics.rdot_zd, (q[k], qd[k])), (kinematics.acceleration, (q[k], qd[k], zdd[k]))):
            assert rel(f(m, *fargs), f(gm, *fargs)) < ULPS, f.__name__
        assert rel(dynamics.forward_lagrange(m, 0.3, q[k], qd[k])[0],
                   dynamics.forward_lagrange(gm, 0.3, q[k], qd[k])[0]) < 1e-12


@pytest.mark.parametrize("name", ALL)
def test_position_problem_single_small_and_large_batches(mechs, name):
    m = mechs[name]
    gm = ref.generic(m)
    q, qd = states(m, 40, seed=7)
    guess = q + 2e-3 * qd + np.random.default_rng(8).normal(0, 1e-4, q.shape)
    z = q[:, m.independent] + 2e-3 * qd[:, m.independent]
    tol = 1e-14 * max(1.0, m.length_scale**2)
    big, ok_big = kinematics.solve_position(m, z, guess)
    small, ok_small = kinematics.solve_position(m, z[:5], guess[:5])
    gen, ok_gen = kinematics.solve_position(gm, z, guess)
    assert ok_big.all() and ok_small.all() and ok_gen.all()
    assert np.max(np.abs(ref.generic(m).phi(big))) <= 1e3 * tol
    assert rel(big, gen) < 1e-12 and rel(small, gen[:5]) < 1e-12
    for k in (0, 17):
        single, ok = kinematics.solve_position(m, z[k], guess[k])
        assert ok and rel(single, gen[k]) < 1e-12
        np.testing.assert_array_equal(big[k, m.independent], z[k])


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("integ", ["euler", "rk4", "trapezoidal", "midpoint", "symplectic_euler"])
def test_integrators_fast_equal_generic(mechs, name, integ):
    m = mechs[name]
    gm = ref.generic(m)
    q, qd = states(m, 20, seed=9)
    it = get_integrator(integ)
    v = np.random.default_rng(10).normal(size=(20, m.dof))
    qdd = dynamics.forward(gm, 0.2, q, qd)[1]
    for N in (1, 5, 20):
        sl = slice(0, N)
        for state, extra in ((MBState(q[sl], qd[sl]), None), (MBState(q[sl], qd[sl], qdd[sl]), v[sl])):
            fast = it.step(m, 0.2, state, 2e-3, extra_zdd=extra)
            slow = it.step(gm, 0.2, state, 2e-3, extra_zdd=extra)
            assert np.all(fast.ok) and np.all(slow.ok)
            assert rel(fast.q, slow.q) < 1e-12
            assert rel(fast.qd, slow.qd) < 1e-10
            assert rel(fast.qdd, slow.qdd) < 1e-9
        one = it.step(m, 0.2, MBState(q[3], qd[3], qdd[3]), 2e-3)  # single equals its row of a batch
        batch = it.step(m, 0.2, MBState(q, qd, qdd), 2e-3)
        assert rel(one.q, batch.q[3]) < 1e-13 and rel(one.qd, batch.qd[3]) < 1e-11


def test_chunked_batches_equal_whole_batches(mechs, monkeypatch):
    m = mechs["fourbar_pf"]
    q, qd = states(m, 50, seed=11)
    state = MBState(q, qd)
    whole = get_integrator("rk4").step(m, 0.0, state, 1e-3)
    monkeypatch.setattr(fastpath, "chunk_size", lambda N: 16)
    chunked = get_integrator("rk4").step(m, 0.0, state, 1e-3)
    for a, b in ((whole.q, chunked.q), (whole.qd, chunked.qd), (whole.qdd, chunked.qdd), (whole.ok, chunked.ok)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "slider_crank", "pendulum", "loaded", "redundant"])
def test_ali3p_equals_the_textbook_step_to_rounding(mechs, name):
    m = mechs[name]
    gm = ref.generic(m)
    q, qd = states(m, 2, seed=12)
    it = get_integrator("ali3p")
    for k in range(2):
        s = MBState(q[k], qd[k], ref.initial_accelerations(gm, 0.1, q[k], qd[k]))
        for h in (1e-3, 1e-2):
            a = it.step(m, 0.1, s, h)
            b = ref.ali3p_step(gm, 0.1, s, h)
            assert a.ok and b.ok
            # The projections solve with A = M + c Phi_q^T Phi_q (L D L^T on the generated
            # kernels, LU in the textbook step): two solvers agree to eps cond(A) relative
            # (up to 1e-8 for a stiff penalty at h = 10 ms); the accelerations' right-hand
            # side cancels (4/h^2) q1 terms, which costs up to ~100x more.
            J = m.phi_q(b.q)
            alpha = 1e9 * max(np.max(np.abs(np.diag(m.M))), 1e-12) / max(m.length_scale, 1e-12) ** 2
            kappa = np.finfo(float).eps * np.linalg.cond(m.M + 0.25 * h * h * alpha * J.T @ J)
            assert rel(a.q, b.q) < ULPS
            assert rel(a.qd, b.qd) < max(1e-12, 2 * kappa) and rel(a.qdd, b.qdd) < max(1e-10, 200 * kappa)


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "triad"])
def test_ali3p_projections_reach_the_exact_velocities(mechs, name):
    """After the step, qd is the M-orthogonal projection of qd* = (2/h) q1 - (2/h) q0 - qd0
    onto Phi_q qd = 0, i.e. the solution of [[M, Phi_q^T], [Phi_q, 0]] [qd; mu] = [M qd*; 0]
    (exact rational arithmetic here): the fast step is as accurate as cond(A) allows."""
    from fractions import Fraction

    m = mechs[name]
    q, qd = states(m, 1, seed=23)
    h = 1e-2  # three projections converge fully (contraction ~ |M| / (c |Phi_q|^2))
    s = MBState(q[0], qd[0], ref.initial_accelerations(ref.generic(m), 0.1, q[0], qd[0]))
    a = get_integrator("ali3p").step(m, 0.1, s, h)
    qd_star = (2.0 / h) * a.q - ((2.0 / h) * s.q + s.qd)
    J, n = m.phi_q(a.q), m.n
    K = np.block([[m.M, J.T], [J, np.zeros((J.shape[0], J.shape[0]))]])
    rhs = [sum(Fraction(m.M[i, j]) * Fraction(qd_star[j]) for j in range(n)) for i in range(n)] + [0] * J.shape[0]
    exact = np.array([float(v) for v in _exact_solve(K.tolist(), rhs)[:n]])
    alpha = 1e9 * max(np.max(np.abs(np.diag(m.M))), 1e-12) / max(m.length_scale, 1e-12) ** 2
    kappa = np.finfo(float).eps * np.linalg.cond(m.M + 0.25 * h * h * alpha * J.T @ J)
    assert rel(a.qd, exact) < 2 * kappa


def _exact_solve(A, b):
    """x with A x = b in exact rational arithmetic (Gaussian elimination on Fractions)."""
    from fractions import Fraction

    n = len(b)
    a = [[Fraction(x) for x in row] + [Fraction(y)] for row, y in zip(A, b)]
    for c in range(n):
        p = next(r for r in range(c, n) if a[r][c] != 0)
        a[c], a[p] = a[p], a[c]
        for r in range(c + 1, n):
            f = a[r][c] / a[c][c]
            if f:
                a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    x = [Fraction(0)] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][j] * x[j] for j in range(r + 1, n))) / a[r][r]
    return x


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf - inf in the failed state's arithmetic
@pytest.mark.parametrize("N", [3, 30])
def test_failed_states_are_flagged_not_spread(mechs, N):
    m = mechs["fourbar"]
    q, qd = states(m, N, seed=13)
    q[1] = np.nan
    z = q[:, m.independent].copy()
    z[1] = 0.3
    out, ok = kinematics.solve_position(m, z, q)
    assert not ok[1] and ok[[0, 2]].all()
    q[1] = m.q0
    qd[2] = np.inf
    s = get_integrator("rk4").step(m, 0.0, MBState(q, qd), 1e-3)
    assert not s.ok[2] and s.ok[[0, 1]].all()
    assert np.all(np.isfinite(s.q[[0, 1]]))


def test_empty_batches(mechs):
    m = mechs["fivebar"]
    q, qd = np.zeros((0, m.n)), np.zeros((0, m.n))
    assert kinematics.solve_position(m, np.zeros((0, m.dof)), q)[0].shape == (0, m.n)
    assert kinematics.velocity(m, q, np.zeros((0, m.dof))).shape == (0, m.n)
    assert kinematics.r_matrix(m, q).shape == (0, m.n, m.dof)
    assert dynamics.forward(m, 0.0, q, qd)[1].shape == (0, m.n)
    assert dynamics.evaluate(m, 0.0, q, qd).R.shape == (0, m.n, m.dof)
    assert get_integrator("rk4").step(m, 0.0, MBState(q, qd), 1e-3).q.shape == (0, m.n)


def test_replacing_a_model_attribute_regenerates_the_kernels(mechs):
    import copy

    m = mechs["fourbar"]
    q, qd = states(m, 1, seed=14)
    m2 = copy.copy(m)
    assert m2._fast() is m._fast()  # copies share the compiled code
    m2.M = 2.0 * m.M  # doubles inertia: accelerations from gravity are halved
    K = m._fast()
    assert m2._fast() is not K and m._fast() is K  # only the changed copy regenerates
    zdd = dynamics.forward(m, 0.0, q[0], np.zeros(m.n))[0]
    zdd2 = dynamics.forward(m2, 0.0, q[0], np.zeros(m.n))[0]
    assert zdd2[0] == pytest.approx(0.5 * zdd[0], rel=1e-12)
    with pytest.raises(ValueError):
        m.M[0, 0] = 1.0  # the mass matrix is read-only (embedded in the kernels)
    deep = copy.deepcopy(m)
    assert deep._fast() is m._fast() and not deep.M.flags.writeable
    back = pickle.loads(pickle.dumps(m))
    assert back._fast() is not None
    np.testing.assert_array_equal(dynamics.forward(back, 0.0, q[0], qd[0])[1], dynamics.forward(m, 0.0, q[0], qd[0])[1])


@pytest.mark.parametrize("name", ["fourbar", "fivebar", "loaded"])
def test_ali3p_warm_multipliers_agree_with_cold_steps(mechs, name):
    """Starting lambda* from the previous step (MBState.aux) changes the result only
    within the Newton tolerance; constraints still hold to rounding."""
    m = mechs[name]
    q, qd = states(m, 1, seed=21)
    it = get_integrator("ali3p")
    warm = cold = MBState(q[0], qd[0], ref.initial_accelerations(ref.generic(m), 0.0, q[0], qd[0]))
    for k in range(100):
        warm = it.step(m, 1e-3 * k, warm, 1e-3)
        c = it.step(m, 1e-3 * k, cold, 1e-3)
        cold = MBState(c.q, c.qd, c.qdd, c.ok)  # aux dropped: lambda* from zero
        assert warm.ok and cold.ok and warm.aux is not None
    scale = max(1.0, m.length_scale)
    assert np.max(np.abs(warm.q - cold.q)) < 1e-9 * scale
    assert np.max(np.abs(warm.qd - cold.qd)) < 1e-7 * scale
    assert np.max(np.abs(m.phi(warm.q))) < 1e-9 * scale**2
    assert np.max(np.abs(m.phi_q(warm.q) @ warm.qd)) < 1e-8 * scale
