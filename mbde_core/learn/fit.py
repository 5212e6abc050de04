"""Training of :class:`mbde_core.learn.mlp.TanhMLP` on jet targets: L-BFGS (:func:`lbfgs`)
from ``restarts`` seeded Glorot initialisations, the best kept, within a time limit
(:func:`fit`).
"""
from __future__ import annotations

import time
import warnings
from collections import deque
from dataclasses import dataclass

import numpy as np
import scipy.optimize

from mbde_core.learn.mlp import TanhMLP


@dataclass
class FitReport:
    loss: float
    iterations: int
    seconds: float
    restarts: int
    losses: list


def lbfgs(fun, x0: np.ndarray, *, max_iterations: int, memory: int = 20, gtol: float = 1e-14,
          deadline: float | None = None) -> tuple[np.ndarray, float, int]:
    """Minimise fun(x) -> (f, grad) by L-BFGS (two-loop recursion, Nocedal & Wright alg. 7.4)
    with scipy's strong-Wolfe line search (``scipy.optimize.line_search``).

    Written out in numpy (vector operations only) instead of calling scipy's L-BFGS-B:
    the same method, and with one BLAS thread (as ``mbde`` sets it) the same speed and
    accuracy (``mbde bench adekf --quick``: 8000 iterations of the slider-crank map in
    31.6 s here, 31.2 s by L-BFGS-B; held-out errors within 2x of each other, the
    ADE-KF's torque RMSE with either map the same to 3 digits). But L-BFGS-B's
    compact-matrix updates run on BLAS threads, which oversubscribe a loaded machine
    wherever one thread is not set (the nodes, library callers): with two, 61.5 s CPU
    instead of 11.9 s for the same fit on a loaded 2-core machine, and the fit's time
    limit then cuts it short. Deterministic. Stops after ``max_iterations``, when
    max |grad| < gtol, when the line search fails twice in a row, or at ``deadline``
    (time.perf_counter() value). Returns (x, f, iterations).
    """
    cache: dict = {}

    def fg(x):
        key = x.tobytes()
        if key not in cache:
            cache.clear()
            cache[key] = fun(x)
        return cache[key]

    x = np.array(x0, dtype=float)
    f, g = fg(x)
    hist: deque = deque(maxlen=memory)
    f_prev = None
    fails = 0
    it = 0
    for it in range(1, int(max_iterations) + 1):
        q = -g
        alphas = []
        for s_, y_, rho in reversed(hist):
            a = rho * float(s_ @ q)
            q = q - a * y_
            alphas.append(a)
        if hist:
            s_, y_, _ = hist[-1]
            q = q * (float(s_ @ y_) / float(y_ @ y_))
        else:
            q = q / max(float(np.linalg.norm(g)), 1e-300)
        for (s_, y_, rho), a in zip(hist, reversed(alphas)):
            b = rho * float(y_ @ q)
            q = q + (a - b) * s_
        d = q
        if not float(g @ d) < 0:
            hist.clear()
            d = -g / max(float(np.linalg.norm(g)), 1e-300)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            alpha, *_ = scipy.optimize.line_search(lambda v: fg(v)[0], lambda v: fg(v)[1], x, d, gfk=g,
                                                   old_fval=f, old_old_fval=f_prev, c1=1e-4, c2=0.9, maxiter=30)
        if alpha is None:
            fails += 1
            hist.clear()
            if fails >= 2:
                break
            continue
        fails = 0
        x_new = x + alpha * d
        f_new, g_new = fg(x_new)
        s_, y_ = x_new - x, g_new - g
        sy = float(s_ @ y_)
        if sy > 1e-300:
            hist.append((s_, y_, 1.0 / sy))
        f_prev, x, f, g = f, x_new, f_new, g_new
        if float(np.max(np.abs(g))) < gtol or (deadline is not None and time.perf_counter() > deadline):
            break
    return x, float(f), it


def fit(sizes, phi_jet, targets, order_weights, *, seed: int = 0, restarts: int = 2,
        max_iterations: int = 3000, time_limit: float = 40.0) -> tuple[TanhMLP, FitReport]:
    """Train a TanhMLP on jet targets with :func:`lbfgs`; the best of ``restarts`` seeded starts.

    sizes: [p, hidden..., o]; phi_jet: feature jet (orders 0..K); targets: output jet
    targets (orders 0..K) in the network's (normalised) units; order_weights: (K+1,)
    relative weights of the orders (each order's error is normalised by its target's
    mean square). time_limit [s] bounds the whole fit (the best so far is returned).
    """
    K = len(targets) - 1
    w = np.zeros(K + 1)
    for k in range(K + 1):
        ms = float(np.mean(targets[k] ** 2)) or 1.0
        w[k] = float(order_weights[k]) / (ms * targets[k].size)
    t_start = time.perf_counter()
    ss = np.random.SeedSequence(seed)
    best, best_loss, losses, iters = None, np.inf, [], 0
    n = max(1, int(restarts))
    for r, child in enumerate(ss.spawn(n)):
        net0 = TanhMLP.initial(list(sizes), np.random.default_rng(child))
        remaining = time_limit - (time.perf_counter() - t_start)
        if r > 0 and remaining < 0.05 * time_limit:
            break
        deadline = time.perf_counter() + max(remaining, 0.5) / (n - r)

        def fun(theta, net0=net0):
            return net0.with_vector(theta).loss_and_gradient(phi_jet, targets, w)

        x, fx, nit = lbfgs(fun, net0.vector(), max_iterations=max_iterations, deadline=deadline)
        losses.append(fx)
        iters += nit
        if fx < best_loss:
            best_loss, best = fx, net0.with_vector(x)
    return best, FitReport(best_loss, iters, time.perf_counter() - t_start, len(losses), losses)
