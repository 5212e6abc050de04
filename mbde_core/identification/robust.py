"""Parameter covariance robust to correlated residuals, and what to warn about.

The covariance (T^T T)^-1 of paper 001 eq. 3.31 holds when the whitened residuals are
independent N(0, 1). Real recordings break that: a model error the parameters cannot
absorb (a slowly varying unmodelled force, the integration scheme's error) leaves
residuals that are correlated over many steps, and (T^T T)^-1 is then too small (issue
41: a mass at 17 sigma from the truth). The estimate p solves the estimating equations
T^T r = 0 (the projected gradient), so its sandwich covariance is

    Cov(p) = B Omega B,   B = (T^T T)^-1,   Omega = Var(sum_i s_i),

with s_i = T_i^T r_i the score of time step i (the rows of step i, whitened).
Heteroskedasticity- and autocorrelation-consistent estimators of Omega sum products of
the scores over lags (Newey & West 1987); here adjacent steps' scores nearly cancel (the
states absorb each step's misfit: the per-step scores of a white-noise fit have ~2 % of
the variance T^T T predicts, and their lagged products put it back only partially), so
Omega is estimated by batch means (the long-run variance over contiguous blocks;
Conway & Schmeiser; the fixed-b view of Kiefer & Vogelsang 2005): every recording is cut
into at most BLOCKS blocks, S_b the sum of the scores of block b, c_b = B S_b its share of
the estimate's error, and Cov(p) ~ sum_b c_b c_b^T over all K blocks.

Block length (the bandwidth) from the residuals' autocorrelation: batch means leave out
the covariance of adjacent blocks, for an AR(1)-like series with integrated
autocorrelation time tau (steps) a share ~ tau / (2 L) of the variance with blocks of L
steps. A recording is therefore cut into blocks of at least BLOCK_TAU tau steps (a bias
below 1 / (2 BLOCK_TAU)), tau the largest integrated autocorrelation time of its eom
residuals (:func:`~mbde_core.trajectory.noise.integrated_time`: where an unmodelled force
shows), at least two blocks. Fewer blocks mean fewer degrees of freedom, which the
Student-t quantile below pays for. Measured on `mbde bench identify`'s disturbed motor
pendulum (an Ornstein-Uhlenbeck acceleration of 0.2 s correlation time, 5 s at 1 kHz:
tau 20-490 steps, ten blocks were 2.5 correlation times long): gravity tilt covered by
85 -> 92.5 % of 40 runs, damping 87.5 -> 90 %, the case 91.2 -> 94.4 %; the exact cases
keep 100 %.

With independent residuals Omega ~ T^T T; the reported covariance is the larger of the two (per parameter), so
correlated residuals can only widen the intervals.

Few blocks, and parameters informed in only some of them (a motor gain seen in two short
torque pulses), make that sum small and noisy; two small-sample corrections, per parameter
j, treat the blocks as clusters (CR2 and the degrees of freedom of Bell & McCaffrey 2002;
Imbens & Kolesar 2016). Under the working model Var(S_b) = sigma^2 I_b (I_b = sum over the
block's steps of T_i^T T_i, blocks independent; sum_b I_b = T^T T = B^-1), the residual
scores are those of the fit, S^_b = S_b - I_b B sum_c S_c, so with u = B e_j and
m_b = I_b u the estimated shares c^_bj = e_j^T B S^_b have covariance sigma^2 G,

    G_bb' = delta_bb' u^T I_b u - 2 m_b^T B m_b' + m_b^T B (T^T T) B m_b',

while Var(p_j) = sigma^2 u^T (T^T T) u. Hence

    Var^(p_j) = f_j sum_b c^_bj^2,    f_j = u^T (T^T T) u / tr G       (unbiased; CR2-like),
    nu_j = (tr G)^2 / tr(G^2)                                        (Satterthwaite),

and the std is widened by t_{0.975, nu_j} / 1.96 so that +-1.96 std is a 95 % interval.
Equal blocks and a parameter informed evenly give f = K / (K - 1), nu = K - 1 (the textbook
batch means); a parameter informed in two of ten blocks has nu ~ 1-3, so its interval is
wider by a Student-t quantile, where the textbook 9 degrees of freedom were too optimistic.
A parameter informed in a single block (tr G ~ 0) has no block-to-block spread to estimate
from: it keeps the model's covariance.

Warnings (:func:`warnings_of`): residuals that are not white (a lag-1 autocorrelation
above WHITE_LAG1, or more than WHITE_SHARE of the lags outside the 95 % band), a
parameter weakly identified (relative standard deviation above WEAK_RELATIVE, or a
variance inflation factor 1 / (1 - R^2) above WEAK_VIF: most of its effect is another
parameter's too), a robust covariance much wider than the model's.
"""
from __future__ import annotations

import numpy as np

from mbde_core.trajectory.noise import integrated_time

BLOCKS = 10  # contiguous blocks per recording of the batch-means Omega, at most
BLOCK_TAU = 6.0  # blocks at least this many integrated autocorrelation times of the eom residuals
WHITE_LAG1 = 0.2
WHITE_SHARE = 0.3
WEAK_RELATIVE = 0.1
WEAK_VIF = 100.0
WIDER = 3.0


def scores(proj, rows, N: int, P: int) -> np.ndarray:
    """(N, P) s_i = sum over the rows of step i of T_row^T r_row (projected Jacobian blocks
    of :func:`~mbde_core.identification.projection.project`)."""
    S = np.zeros((N, P))
    for rb, T in zip(rows, proj.T_blocks):
        if rb.r.size == 0 or T.size == 0:
            continue
        np.add.at(S, np.asarray(rb.idx), np.einsum("kdp,kd->kp", T, rb.r))
    return S


def step_information(proj, rows, N: int, P: int) -> np.ndarray:
    """(N, P, P) I_i = sum over the rows of step i of T_row^T T_row (the information of step i)."""
    I = np.zeros((N, P, P))
    for rb, T in zip(rows, proj.T_blocks):
        if rb.r.size == 0 or T.size == 0:
            continue
        np.add.at(I, np.asarray(rb.idx), np.einsum("kdp,kdq->kpq", T, T))
    return I


def small_sample(bread: np.ndarray, infos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bias factor f (P,), degrees of freedom nu (P,)) of the batch-means variance of each
    parameter from the blocks' information I_b (K, P, P) (module docstring: CR2 / Bell and
    McCaffrey)."""
    B = bread
    I = infos.sum(axis=0)
    P = B.shape[0]
    f, nu = np.ones(P), np.full(P, np.inf)
    BIB = B @ I @ B
    for j in range(P):
        u = B[:, j]
        if not np.any(u):
            continue
        m = infos @ u  # (K, P) m_b = I_b u
        w = m @ u  # (K,) u^T I_b u
        M = m @ B @ m.T
        G = np.diag(w) - 2.0 * M + m @ BIB @ m.T
        tr, tr2 = float(np.trace(G)), float(np.sum(G * G))
        if tr <= 1e-12 * max(float(u @ I @ u), 1e-300) or tr2 <= 0:
            f[j], nu[j] = np.inf, 1.0
            continue
        f[j] = float(u @ I @ u) / tr
        nu[j] = tr * tr / tr2
    return f, nu


def eom_residuals(rows, N: int) -> np.ndarray | None:
    """(N, g) whitened eom residuals by step (None without eom rows)."""
    eom = [rb for rb in rows if rb.name == "eom" and rb.r.size]
    if not eom:
        return None
    r = np.zeros((N, eom[0].r.shape[1]))
    for rb in eom:
        r[np.asarray(rb.idx)] = rb.r
    return r


def block_count(n_steps: int, eom) -> int:
    """Blocks of a recording of n_steps steps with eom residuals eom (n_steps, g) or None:
    at most BLOCKS, each at least BLOCK_TAU integrated autocorrelation times long, at least
    two (module docstring)."""
    most = max(min(BLOCKS, n_steps // 2), 1)
    if eom is None or eom.shape[0] < 8:
        return most
    tau = float(np.max(integrated_time(eom)))
    return int(min(most, max(n_steps // max(BLOCK_TAU * tau, 1.0), 2)))


def hac_covariance(proj, rows, offsets, bread: np.ndarray) -> tuple[np.ndarray, list]:
    """(B Omega B (P, P) scaled per parameter by the small-sample factors, block length in
    steps per recording) for the recordings at ``offsets`` (R+1,) (module docstring)."""
    import scipy.stats

    P = bread.shape[0]
    N = int(offsets[-1])
    S = scores(proj, rows, N, P)
    Ii = step_information(proj, rows, N, P)
    eom = eom_residuals(rows, N)
    sums, infos, lengths = [], [], []
    for a, b in zip(offsets[:-1], offsets[1:]):
        n = block_count(int(b - a), None if eom is None else eom[a:b])
        edges = np.linspace(a, b, n + 1).astype(int)
        sums += [S[lo:hi].sum(axis=0) for lo, hi in zip(edges[:-1], edges[1:])]
        infos += [Ii[lo:hi].sum(axis=0) for lo, hi in zip(edges[:-1], edges[1:])]
        lengths.append(int((b - a) // n))
    K = len(sums)
    if K < 2:
        return np.full((P, P), 0.0), lengths
    C = bread @ (np.array(sums).T @ np.array(sums)) @ bread  # sum_b c_b c_b^T, c_b = B S_b
    f, nu = small_sample(bread, np.array(infos))
    t = scipy.stats.t.ppf(0.975, np.clip(nu, 1.0, None)) / 1.959963984540054
    d = np.sqrt(np.where(np.isfinite(f), f, 0.0)) * t  # informed in one block only: the model's
    C = C * np.outer(d, d)
    return 0.5 * (C + C.T), lengths


def warnings_of(labels, p, std, std_model, cov, whiteness: dict) -> list[str]:
    """Lines to print and store (see the module docstring)."""
    out = []
    for rec, per in whiteness.items():
        for sensor, w in per.items():
            if not w:
                continue
            lag1 = w.get("lag1_autocorrelation")
            if (lag1 is not None and abs(lag1) > WHITE_LAG1) or w.get("fraction_outside_95", 0.0) > WHITE_SHARE:
                out.append(f"residuals of {sensor} in {rec} are not white (lag-1 autocorrelation "
                           f"{'?' if lag1 is None else f'{lag1:.2f}'}, {100 * w.get('fraction_outside_95', 0):.0f} % of "
                           f"{w.get('lags')} lags outside the 95 % band): the model misses something; the intervals "
                           "use the residuals' correlation (HAC covariance)")
    ok = np.isfinite(std)
    if ok.any():
        C = cov[np.ix_(ok, ok)]
        s = np.sqrt(np.clip(np.diag(C), 1e-300, None))
        R = C / np.outer(s, s)
        try:
            vif = np.diag(np.linalg.inv(R))
        except np.linalg.LinAlgError:
            vif = np.full(int(ok.sum()), np.inf)
        for j, k in enumerate(np.flatnonzero(ok)):
            rel = std[k] / abs(p[k]) if p[k] != 0 else np.inf
            if rel > WEAK_RELATIVE or vif[j] > WEAK_VIF:
                out.append(f"{labels[k]} is weakly identified: {p[k]:.6g} +- {std[k]:.3g} ({100 * rel:.1f} %"
                           + (f", variance inflation {vif[j]:.0f}: correlated with the others" if vif[j] > WEAK_VIF else "")
                           + ")")
            if std_model[k] > 0 and std[k] > WIDER * std_model[k]:
                out.append(f"{labels[k]}: the residuals' correlation widens its interval {std[k] / std_model[k]:.1f} x "
                           "over the model covariance")
    return out
