"""Engine speed: ``python -m mbde_bench.engine_speed [--quick] [--max-particles N]``.

Prints the time per call of the engine's hot paths, through their public API only (so
the same script measures any version of the engine):

- single state, on ``fourbar`` and ``fivebar``: Phi, Phi_q, (Phi_q)' qd, the position
  problem from a predictor guess q + h qd, the velocity problem, the R matrix, forward
  dynamics, and one step of euler / rk4 / ali3p / midpoint (h = 1 ms) from a state that
  carries its accelerations (as in a simulation or filter loop, where the previous step
  gave them);
- small batches, the UKF's 5 sigma points of the four-bar: the position + velocity
  problems and the dynamics of 5 states, and one batched Euler step of fresh states
  (without accelerations);
- batched RK4 on ``fourbar_pf`` for N = 1e2 .. 1e5 particles (states carrying their
  accelerations, as a particle filter's), as ms per step and particle-steps/s.

Times are CPU time of this process (``time.process_time``), best of several repeats:
they measure the code, not how busy the machine is. Speed is proven here, never
asserted in unit tests.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from mbde_core.config.paths import config_path
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.model.mechanism import load_mechanism

HELP = "engine speed: us per kinematics/dynamics call and integrator step, batched RK4 particle-steps/s"


def mechanism(name: str):
    """A shipped mechanism by name (config/mechanisms/<name>.yaml)."""
    return load_mechanism(config_path("mechanisms", name + ".yaml"))


def best_time(fn, budget: float = 0.2, repeats: int = 5) -> float:
    """Best CPU time per call [s] of ``fn()`` over ``repeats`` rounds of ~budget/repeats s."""
    fn()  # warm up (lazy initialisation, caches)
    t0 = time.process_time()
    fn()
    one = max(time.process_time() - t0, 1e-6)
    loops = max(1, int(budget / repeats / one))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.process_time()
        for _ in range(loops):
            fn()
        best = min(best, (time.process_time() - t0) / loops)
    return best


def moving_states(mech, N: int, seed: int = 0, spread: float = 0.3):
    """N assembled states (q, qd) (N, n) near the initial configuration, random velocities."""
    rng = np.random.default_rng(seed)
    z = mech.q0[mech.independent] + rng.uniform(-spread, spread, (N, mech.dof))
    q, ok = kinematics.solve_position(mech, z, np.broadcast_to(mech.q0, (N, mech.n)))
    assert np.all(ok)
    qd = kinematics.velocity(mech, q, rng.uniform(-2.0, 2.0, (N, mech.dof)))
    return np.ascontiguousarray(q), np.ascontiguousarray(qd)


def single_state_rows(name: str, budget: float):
    mech = mechanism(name)
    q, qd = (a[0] for a in moving_states(mech, 1, seed=1))
    h = 1e-3
    guess = q + h * qd
    z1 = guess[mech.independent]
    rows = [
        ("phi", lambda: mech.phi(q)),
        ("phi_q", lambda: mech.phi_q(q)),
        ("phi_q_dot_qd", lambda: mech.phi_q_dot_qd(q, qd)),
        ("position problem", lambda: kinematics.solve_position(mech, z1, guess)),
        ("velocity problem", lambda: kinematics.velocity(mech, q, qd[mech.independent])),
        ("R matrix", lambda: kinematics.r_matrix(mech, q)),
        ("forward dynamics", lambda: dynamics.forward(mech, 0.0, q, qd)),
    ]
    state = MBState(q, qd, dynamics.forward(mech, 0.0, q, qd)[1])
    for integ in ("euler", "rk4", "ali3p", "midpoint"):
        it = get_integrator(integ)
        rows.append((f"{integ} step", lambda it=it: it.step(mech, 0.0, state, h)))
    return [(name, label, best_time(fn, budget)) for label, fn in rows]


def small_batch_rows(name: str, budget: float, N: int = 5):
    mech = mechanism(name)
    q, qd = moving_states(mech, N, seed=2)
    z, zd = q[:, mech.independent], qd[:, mech.independent]
    euler = get_integrator("euler")

    def assemble():
        qq, _ = kinematics.solve_position(mech, z, np.broadcast_to(q[0], q.shape))
        return kinematics.velocity(mech, qq, zd)

    rows = [
        (f"assemble, batch of {N}", assemble),
        (f"evaluate, batch of {N}", lambda: dynamics.evaluate(mech, 0.0, q, qd)),
        (f"euler step, batch of {N}", lambda: euler.step(mech, 0.0, MBState(q, qd), 1e-3)),
    ]
    return [(name, label, best_time(fn, budget)) for label, fn in rows]


def particle_rows(name: str, sizes, budget: float):
    mech = mechanism(name)
    rk4 = get_integrator("rk4")
    out = []
    for N in sizes:
        q, qd = moving_states(mech, N, seed=3)
        state = MBState(q, qd, dynamics.forward(mech, 0.0, q, qd)[1])
        t = best_time(lambda: rk4.step(mech, 0.0, state, 1e-3), budget, repeats=3)
        out.append((name, N, t, N / t))
    return out


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--quick", action="store_true", help="shorter timing budget (noisier)")
    ap.add_argument("--max-particles", type=int, default=100_000, help="largest particle batch (default 1e5)")


def run(args) -> int:
    budget = 0.1 if args.quick else 0.4
    print(f"{'mechanism':<12} {'operation':<28} {'us/call':>10}")
    print("-" * 52)
    for name in ("fourbar", "fivebar"):
        for mname, label, t in single_state_rows(name, budget):
            print(f"{mname:<12} {label:<28} {t * 1e6:>10.1f}")
    for mname, label, t in small_batch_rows("fourbar", budget):
        print(f"{mname:<12} {label:<28} {t * 1e6:>10.1f}")
    print()
    print(f"{'mechanism':<12} {'rk4 batch N':>12} {'ms/step':>10} {'particle-steps/s':>18}")
    print("-" * 55)
    sizes = [N for N in (100, 1_000, 10_000, 100_000) if N <= args.max_particles]
    for mname, N, t, rate in particle_rows("fourbar_pf", sizes, max(budget, 0.3)):
        print(f"{mname:<12} {N:>12d} {t * 1e3:>10.3f} {rate:>18.3g}")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m mbde_bench.engine_speed", description=HELP)
    add_arguments(ap)
    return run(ap.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
