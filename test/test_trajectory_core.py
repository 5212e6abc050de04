"""mbde_core.trajectory: Jacobians vs finite differences, normal equations vs dense linear
algebra, and the smoother on a linear-Gaussian model vs FilterPy's Rauch-Tung-Striebel
smoother (the least-squares solution of a linear-Gaussian chain is the RTS mean, and the
marginal covariances are the RTS covariances)."""
import numpy as np
import pytest
from filterpy.kalman import KalmanFilter

from conftest import mech_path
from mbde_core.config.yamlnode import parse_yaml
from mbde_core.engine import kinematics
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.trajectory import LMOptions, NormalEquations, RowBlock, levenberg_marquardt
from mbde_core.trajectory.factors import Integrator
from mbde_core.trajectory.model import MultibodyModel
from mbde_core.trajectory.problem import SmootherProblem
from mbde_core.trajectory.readings import Readings, SensorRows, bin_readings
from mbde_core.trajectory.solver import jacobian_matrix
from mbde_core.types import Measurement

DT = 0.005
RELAX = 0.1  # integrator relaxation of the linear test (keeps the RTS recursion better conditioned)


def _problem(name, sensors_yaml, N=5, seed=1):
    m = load_mechanism(mech_path(name))
    ss = load_sensors(parse_yaml(sensors_yaml), m)
    g = m.dof
    rng = np.random.default_rng(seed)
    z = m.q0[m.independent] + 0.1 * rng.standard_normal((N, g))
    X = np.hstack([z, rng.standard_normal((N, g)), rng.standard_normal((N, g))])
    q, ok = kinematics.solve_position(m, z, np.tile(m.q0, (N, 1)))
    assert ok.all()
    meas = [Measurement(i * DT, s.name, rng.standard_normal(s.dim)) for i in range(N) for s in ss]
    pb = SmootherProblem(MultibodyModel(m, ss), bin_readings(meas, ss, DT), np.full(g, 3.0), np.zeros(2 * g),
                         np.eye(2 * g), q_guess=q.copy())
    return pb, X


CASES = {
    "fourbar": ("fourbar", "- {name: gyro, type: gyroscope, body: coupler, rate: 200, noise: {sigma: 0.01}}\n"
                           "- {name: enc, type: encoder, body: crank, rate: 200, noise: {sigma: 0.01}}\n"
                           "- {name: acc, type: accelerometer, body: coupler, axes: [0, pi/2], offset: [0.5, 0.1], rate: 200, noise: {sigma: 0.1}}"),
    "fivebar": ("fivebar", "- {name: gyro, type: gyroscope, body: 1, rate: 200, noise: {sigma: 0.01}}\n"
                           "- {name: acc, type: accelerometer, body: 2, axes: [0.3], rate: 200, noise: {sigma: 0.1}}"),
    "slider_crank": ("slider_crank", "- {name: enc, type: encoder, body: 0, rate: 200, noise: {sigma: 0.01}}\n"
                                     "- {name: acc, type: accelerometer, body: 1, axes: [0, 1], rate: 200, noise: {sigma: 0.1}}"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_jacobian_matches_finite_differences(case):
    pb, X = _problem(*CASES[case])
    N, b = pb.N, pb.b
    rows = pb.evaluate(X)
    pb.accept(X)
    _, J = jacobian_matrix(rows, N, b)
    J = J.toarray()
    x = X.reshape(-1)
    Jfd = np.zeros_like(J)
    for k in range(x.size):
        e = 1e-6 * max(1.0, abs(x[k]))
        res = []
        for s in (1, -1):
            xs = x.copy()
            xs[k] += s * e
            res.append(jacobian_matrix(pb.evaluate(xs.reshape(N, b)), N, b)[0])
        Jfd[:, k] = (res[0] - res[1]) / (2 * e)
    start = 0
    for rb in rows:
        sl = slice(start, start + rb.r.size)
        start += rb.r.size
        scale = np.abs(Jfd[sl]).max()
        # central differences: ~1e-9 relative; the integrator rows (weights ~1e7, linear) only see rounding
        tol = 1e-6 * scale if rb.name == "integrator" else 1e-7 * max(scale, 1.0)
        assert np.abs(J[sl] - Jfd[sl]).max() <= tol, (rb.name, np.abs(J[sl] - Jfd[sl]).max(), scale)


@pytest.mark.parametrize("case", ["fourbar", "fivebar"])
def test_generic_engine_path_matches_complex_step(case):
    pb, X = _problem(*CASES[case])
    model = pb.model
    a = model._evaluate_kernels(__import__("mbde_core.engine.fastpath", fromlist=["kernels"]).kernels(model.mech), pb.t, X, pb.q_guess)
    b = model._evaluate_generic(pb.t, X, pb.q_guess)
    for field in ("q", "qd", "qdd", "f"):
        np.testing.assert_allclose(getattr(a, field), getattr(b, field), rtol=1e-10, atol=1e-10)
    for field in ("F", "Tq", "Tqd", "Tqdd"):
        A, B = getattr(a, field), getattr(b, field)
        np.testing.assert_allclose(A, B, atol=1e-6 * max(1.0, np.abs(A).max()))


def test_normal_equations_with_parameters_match_dense_algebra():
    rng = np.random.default_rng(4)
    N, b, P = 9, 3, 2
    rows = []
    for name, d, nxt in (("a", 4, False), ("b", 2, True), ("c", 3, False)):
        idx = np.arange(N - 1 if nxt else N)
        K = idx.size
        rows.append(RowBlock(name, idx, rng.standard_normal((K, d)), rng.standard_normal((K, d, b)),
                             rng.standard_normal((K, d, b)) if nxt else None, rng.standard_normal((K, d, P))))
    rows.append(RowBlock("rep", np.array([2, 2, 5]), rng.standard_normal((3, 1)), rng.standard_normal((3, 1, b))))
    r, J = jacobian_matrix(rows, N, b, P)
    J = J.toarray()
    ne = NormalEquations(rows, N, b, P)
    A = J.T @ J
    g = J.T @ r
    dX, dp = ne.factor(0.0).step()
    np.testing.assert_allclose(np.concatenate([dX.reshape(-1), dp]), -np.linalg.solve(A, g), rtol=1e-9, atol=1e-12)
    mu = 0.3
    dX, dp = ne.factor(mu).step()
    Ad = A + mu * np.diag(np.diag(A))
    np.testing.assert_allclose(np.concatenate([dX.reshape(-1), dp]), -np.linalg.solve(Ad, g), rtol=1e-9, atol=1e-12)
    Sigma = np.linalg.inv(A)
    M = ne.marginals()
    for i in range(N):
        np.testing.assert_allclose(M[i], Sigma[i * b:(i + 1) * b, i * b:(i + 1) * b], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ne.parameter_covariance(), Sigma[N * b:, N * b:], rtol=1e-9, atol=1e-12)
    v = rng.standard_normal(N * b + P)
    assert ne.quad(v[:N * b].reshape(N, b), v[N * b:]) == pytest.approx(v @ A @ v, rel=1e-12)


# -- linear-Gaussian chain vs FilterPy's RTS smoother ----------------------------------------------


class LinearModel:
    """f = Fz z + Fzd zd (a damped oscillator per coordinate); linear sensors of x (1-D)."""

    def __init__(self, g, Fx, sensors):
        self.g = g
        self.angular = np.zeros(g, dtype=bool)
        self.Fx = Fx  # (g, 2g)
        self.H = sensors  # name -> (1, 3g)

    def evaluate(self, t, X, q_guess, E=None, U=None):
        class Ev:
            pass

        ev = Ev()
        ev.G = None
        N = X.shape[0]
        ev.f = X[:, :2 * self.g] @ self.Fx.T
        ev.F = np.broadcast_to(self.Fx, (N,) + self.Fx.shape)
        ev.ok = np.ones(N, dtype=bool)
        ev.q = None
        ev.X = X
        return ev

    def observe(self, name, ev, idx):
        H = self.H[name]
        return ev.X[idx] @ H.T, np.broadcast_to(H, (len(idx),) + H.shape)

    def innovation(self, name, measured, predicted):
        return predicted - measured


@pytest.mark.parametrize("g,scheme", [(1, "linear_acceleration"), (2, "trapezoidal"), (1, "euler")])
def test_linear_gaussian_smoother_equals_rts(g, scheme):
    rng = np.random.default_rng(7 + g)
    N, dt, sa = 120, 0.01, 2.0
    omega, zeta = 2 * np.pi * 1.3, 0.05
    Fx = np.hstack([-omega**2 * np.eye(g), -2 * zeta * omega * np.eye(g)])
    if g == 2:
        Fx[0, 1] = Fx[1, 0] = 3.0  # coupled oscillators
    b = 3 * g
    sensors, rows_of = {}, {}
    for k in range(g):
        for kind, col, sig, every in (("pos", k, 0.02, 3), ("vel", g + k, 0.1, 4), ("acc", 2 * g + k, 0.5, 7)):
            H = np.zeros((1, b))
            H[0, col] = 1.0
            name = f"{kind}{k}"
            sensors[name] = H
            rows_of[name] = (sig, every)
    model = LinearModel(g, Fx, sensors)
    # one reading per step at most (FilterPy's updates are 1-D), sensors in turn
    names = list(sensors)
    sched = {i: names[i % len(names)] for i in range(N) if i % 2 == 0}
    truth = np.sin(np.outer(np.arange(N) * dt, np.arange(1, b + 1)))
    srows, zs, Hs, Rs = [], [None] * N, [None] * N, [None] * N
    for name in names:
        idx = np.array(sorted(i for i, n in sched.items() if n == name), dtype=np.intp)
        sig = rows_of[name][0]
        vals = truth[idx] @ sensors[name].T + sig * rng.standard_normal((idx.size, 1))
        srows.append(SensorRows(name, idx, vals, np.array([[1.0 / sig]])))
        for i, v in zip(idx, vals):
            zs[i], Hs[i], Rs[i] = v, sensors[name], np.array([[sig**2]])
    readings = Readings(0.0, dt, N, srows)
    m0 = 0.1 * rng.standard_normal(2 * g)
    P0 = np.diag(np.concatenate([np.full(g, 0.3), np.full(g, 1.5)]) ** 2)
    S0 = np.linalg.inv(np.linalg.cholesky(P0))
    pb = SmootherProblem(model, readings, np.full(g, sa), m0, S0, scheme, RELAX)
    X0 = rng.standard_normal((N, b))
    res = levenberg_marquardt(pb, X0, options=LMOptions(max_iterations=200, tolerance=1e-26, ftol=0.0))
    # the equivalent linear state-space model of the factors (see mbde_core.trajectory.factors)
    integ = Integrator(g, dt, scheme, np.full(g, sa), RELAX)
    E = np.hstack([-Fx / sa, np.eye(g) / sa])  # eom rows: E s
    M = np.vstack([integ.B, E])
    Minv = np.linalg.inv(M)
    F = -Minv @ np.vstack([integ.A, np.zeros((g, b))])
    Q = Minv @ Minv.T
    M0 = np.vstack([np.hstack([S0, np.zeros((2 * g, g))]), E])
    M0inv = np.linalg.inv(M0)
    kf = KalmanFilter(dim_x=b, dim_z=1)
    kf.x = M0inv @ np.concatenate([S0 @ m0, np.zeros(g)])
    kf.P = M0inv @ M0inv.T
    Xf, Pf = np.zeros((N, b)), np.zeros((N, b, b))
    for i in range(N):
        if zs[i] is not None:
            kf.update(zs[i], R=Rs[i], H=Hs[i])
        Xf[i], Pf[i] = kf.x, kf.P
        kf.predict(F=F, Q=Q)
    Xs, Ps, _, _ = kf.rts_smoother(Xf, Pf, Fs=[F] * N, Qs=[Q] * N)
    scale = np.abs(Xs).max(axis=0)
    assert np.max(np.abs(res.X - Xs) / scale) < 1e-8, np.max(np.abs(res.X - Xs) / scale)
    # covariances: the information matrix's condition number (~1e9: near-hard integrator
    # rows) limits any two computations of its inverse (RTS, banded, dense) to ~1e-8
    marg = res.normal.marginals()
    assert np.max(np.abs(marg - Ps) / np.abs(Ps).max(axis=0)) < 1e-7


def test_window_with_marginalised_past_equals_batch_of_the_same_readings():
    """Window 1 of the windowed smoother (mbde_core.trajectory.windowed): its prior is the
    marginal of window 0's rows before its start; for a linear-Gaussian model its
    solution equals the batch smoother of every reading before its end (to rounding)."""
    from mbde_core.trajectory.windowed import _marginal_prior

    rng = np.random.default_rng(3)
    g, N, dt, sa = 1, 200, 0.01, 2.0
    Fx = np.array([[-(2 * np.pi) ** 2, -0.3]])
    H = {"pos": np.array([[1.0, 0, 0]]), "vel": np.array([[0, 1.0, 0]])}
    model = LinearModel(g, Fx, H)
    srows = [SensorRows("pos", np.arange(0, N, 3), 0.5 + 0.02 * rng.standard_normal((len(range(0, N, 3)), 1)), np.array([[50.0]])),
             SensorRows("vel", np.arange(1, N, 4), 0.1 * rng.standard_normal((len(range(1, N, 4)), 1)), np.array([[10.0]]))]
    readings = Readings(0.0, dt, N, srows)
    m0, S0 = np.zeros(2), np.diag([1 / 0.3, 1 / 1.5])
    opts = LMOptions(max_iterations=100, tolerance=1e-26, ftol=0.0)

    def solve(rd, mean, sqrt_info, first_eom=True):
        pb = SmootherProblem(model, rd, np.full(g, sa), mean, sqrt_info, "linear_acceleration", RELAX, first_eom=first_eom)
        return levenberg_marquardt(pb, np.zeros((rd.N, 3 * g)), options=opts)

    lo1, hi0, hi1 = 80, 130, 170
    w0 = solve(readings.window(0, hi0), m0, S0)
    mean, U = _marginal_prior(w0.rows, lo1, w0.X)
    w1 = solve(readings.window(lo1, hi1), mean, U, first_eom=False)
    batch = solve(readings.window(0, hi1), m0, S0)
    ref = batch.X[lo1:hi1]
    assert np.max(np.abs(w1.X - ref) / np.abs(ref).max(axis=0)) < 1e-8
    Pw, Pb = w1.normal.marginals(), batch.normal.marginals()[lo1:hi1]
    assert np.max(np.abs(Pw - Pb) / np.abs(Pb).max(axis=0)) < 1e-7
