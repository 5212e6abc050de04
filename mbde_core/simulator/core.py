"""Ground-truth simulator: integrates a scenario's true system and samples its sensors.

The truth is integrated on the fixed grid t_k = start + k h (exact integer nanoseconds,
k = 0..n_steps) with the scenario's integrator (default ``ali3p``, the drift-free index-3
augmented Lagrangian formulation with projections: Phi(q), Phi_q qd and the acceleration
constraints hold to rounding at every step). Each sensor s with period m_s steps is
sampled at every k with k mod m_s == 0 on the true state (q, qd, qdd)(t_k): the
noise-free reading h_s is passed through the sensor's noise sampler
(:class:`mbde_core.sensors.base.NoiseSampler`: white noise, bias, random-walk bias,
quantization, dropout) fed by its own numpy Generator, seeded by
SeedSequence(seed, spawn_key=(crc32(sensor name),)): streams are independent,
reproducible, and unchanged when other sensors are added or removed.

Accelerations: the recorded qdd(t_k) (snapshots and sensor readings) is the exact
forward dynamics at the integrated (q, qd)(t_k), by the Lagrange-multiplier formulation
[[M, Phi_q^T], [Phi_q, 0]] [qdd; lambda] = [Q; -(Phi_q)' qd] (paper 003 eq. 1), so the
acceleration constraints hold to rounding (the integrator's own qdd satisfies them only
to its Newton tolerance, ~1e-7 relative for ALI3-P).

Inputs: the speed controller (if any) computes its torque u_k from the state at t_k and
holds it on [t_k, t_k + h) (zero-order hold); the integrator restarts every step from
the accelerations with the new torque, and each snapshot's qdd is consistent with the
input recorded in it (the right limit at t_k).

:func:`simulate` is a generator: events come in time order (at one instant the
ground-truth snapshot first, then the measurements in sensor order) and nothing is
accumulated, so memory stays bounded for long runs.
"""
from __future__ import annotations

import math
import time
import zlib
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from mbde_core.engine import dynamics, fastpath
from mbde_core.engine.branches import BranchTool
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.errors import MbdeError
from mbde_core.rosio.stamps import ns_to_sec
from mbde_core.scenario.controller import PIController
from mbde_core.scenario.scenario import Scenario
from mbde_core.types import MechanismSnapshot, Measurement


class SimulationError(MbdeError):
    """The ground-truth integration failed (one line; exit status 2)."""


@dataclass
class TruthSnapshot(MechanismSnapshot):
    """A ground-truth sample: MechanismSnapshot (q, qd, qdd, z, zd, zdd, branch, true
    inputs ``input_names``/``inputs`` (k,)) plus ``effort`` (n,): the generalized input
    force on each coordinate (speed controller and ``generalized_force``/``motor`` loads on
    coordinates; 0 elsewhere), ``step`` k and ``phi_max`` = max |Phi(q)|."""

    effort: np.ndarray | None = None
    step: int = 0
    phi_max: float = 0.0


def noise_rng(seed: int, sensor_name: str) -> np.random.Generator:
    """The noise Generator of one sensor: SeedSequence(seed, spawn_key=(crc32(name),))."""
    key = zlib.crc32(sensor_name.encode("utf-8"))
    return np.random.default_rng(np.random.SeedSequence(int(seed), spawn_key=(key,)))


class _Inputs:
    """True inputs of the truth model: drive loads on coordinates, plus the controller."""

    def __init__(self, mech):
        self.n = mech.n
        self.drives = [(ld.name, ld.coordinate, ld.value[0]) for ld in mech.spec.loads
                       if ld.kind == "generalized_force"]
        self.names = [name for name, _, _ in self.drives]

    def evaluate(self, t: float):
        values = np.array([fn(t) for _, _, fn in self.drives], dtype=float)
        effort = np.zeros(self.n)
        for (_, col, _), v in zip(self.drives, values):
            effort[col] += v
        return values, effort


def simulate(scenario: Scenario, progress: Callable[[int, int], None] | None = None,
             ) -> Iterator[TruthSnapshot | Measurement]:
    """Yield the scenario's ground truth and measurements in time order (see module doc).

    Ground-truth snapshots come every ``scenario.ground_truth_every`` steps (always at
    k = 0). progress(k, n_steps) is called after every sampled step if given. Raises
    SimulationError if the integrator fails to converge. The composition of
    :func:`truth_states` (the integration) and :func:`sample_events` (snapshots and
    readings), which :func:`mbde_core.simulator.pipeline.pipelined_events` runs in two
    processes with the same results.
    """
    return sample_events(scenario, truth_states(scenario), progress)


def sampling_every(scenario: Scenario) -> int:
    """The step spacing of the instants at which anything is sampled (gcd of the
    ground-truth and sensor periods, in steps)."""
    return math.gcd(scenario.ground_truth_every, *(scenario.sensor_every[s.name] for s in scenario.all_sensors))


def truth_states(scenario: Scenario) -> Iterator[tuple]:
    """Integrate the truth model; yield (k, tau, q, qd, qdd, values, effort) at every
    sampled step k.

    tau is the scenario time [s]; q, qd, qdd (n,) the true state with the exact
    accelerations (:func:`_qdd`) and the controller's torque held from t_k; values (k,)
    and effort (n,) the true inputs (drive loads and the controller's torque). Only the
    steps of :func:`sampling_every` are yielded.
    Raises SimulationError if the integrator fails to converge.
    """
    tm = scenario.truth_model()
    mech = tm.mechanism
    h = scenario.step
    integrator = get_integrator(scenario.integrator)
    controller = None
    held = None
    if tm.controller is not None:
        controller = PIController(tm.controller, h)
        held = tm.inputs[tm.controller.name]
    every = sampling_every(scenario)
    inputs = _Inputs(mech)
    gt_every = scenario.ground_truth_every

    def tau_of(k):  # scenario time [s] (loads, targets); the bag time is start + tau
        return k * scenario.step_ns / 1e9

    init = scenario.initial_state
    tau = 0.0
    q, qd = init.q.copy(), init.qd.copy()
    if controller is not None:
        held.value = controller.update(tau, qd[tm.controller.coordinate])
    state = MBState(q, qd, _qdd(mech, tau, q, qd))
    # between sampled steps the state may stay as lists (integrators with step_lists, no
    # controller): the same values without arrays made and unmade at every step
    chain = getattr(integrator, "step_lists", None) if controller is None else None
    lists = None  # (q, qd, qdd lists, ok, aux) of the last step when chained
    for k in range(scenario.n_steps + 1):
        if k > 0:
            tau_prev, tau = tau, tau_of(k)
            if chain is not None:
                x = lists if lists is not None else (state.q.tolist(), state.qd.tolist(), state.qdd.tolist(),
                                                      state.ok, state.aux)
                lists = chain(mech, tau_prev, x[0], x[1], x[2], x[4], h)
                if lists is None:  # not on the scalar kernels: the array step decides
                    state = integrator.step(mech, tau_prev, MBState(np.array(x[0]), np.array(x[1]), np.array(x[2]),
                                                                    x[3], x[4]), h)
                elif not lists[3] or not math.isfinite(sum(lists[0])):
                    state = MBState(np.array(lists[0]), np.array(lists[1]), np.array(lists[2]), lists[3], lists[4])
                    lists = None
                elif k % every:
                    continue  # nothing is sampled at this step
                else:
                    state = MBState(np.array(lists[0]), np.array(lists[1]), np.array(lists[2]), lists[3], lists[4])
            else:
                state = integrator.step(mech, tau_prev, state, h)
            if not state.ok or not math.isfinite(sum(state.q.tolist())):
                raise SimulationError(f"{scenario.file}: the {scenario.integrator} integrator failed at "
                                      f"t = {tau:.6g} s (step {k}); try a smaller 'step'")
            if controller is not None:
                held.value = controller.update(tau, state.qd[tm.controller.coordinate])
                state = MBState(state.q, state.qd, _qdd(mech, tau, state.q, state.qd))
        if k % every:  # nothing is sampled at this step
            continue
        q, qd = state.q, state.qd
        qdd = state.qdd if controller is not None or k == 0 else _qdd(mech, tau, q, qd)
        values, effort = inputs.evaluate(tau)  # the held inputs of the step from t_k (readings of known inputs)
        yield k, tau, q, qd, qdd, values, effort


def sample_events(scenario: Scenario, states, progress: Callable[[int, int], None] | None = None,
                  ) -> Iterator[TruthSnapshot | Measurement]:
    """Turn the sampled true states (k, tau, q, qd, qdd, values, effort) of
    :func:`truth_states` into ground-truth snapshots and noisy readings, in time order
    (module doc)."""
    mech = scenario.truth_mechanism()
    branches = BranchTool(mech)
    names = _Inputs(mech).names
    samplers = []
    for sensor in scenario.all_sensors:
        samplers.append((sensor, scenario.sensor_every[sensor.name], sensor.noise.sampler(noise_rng(scenario.seed, sensor.name))))
    iz = mech.independent
    gt_every = scenario.ground_truth_every
    n_steps = scenario.n_steps
    for k, tau, q, qd, qdd, values, effort in states:
        due = [(sensor, sampler) for sensor, every, sampler in samplers if k % every == 0]
        if k % gt_every and not due:
            if progress is not None:
                progress(k, n_steps)
            continue
        t = ns_to_sec(scenario.start_ns + k * scenario.step_ns)
        if k % gt_every == 0:
            yield TruthSnapshot(
                stamp=t, q=q.copy(), qd=qd.copy(), qdd=qdd.copy(),
                z=q[iz].copy(), zd=qd[iz].copy(), zdd=qdd[iz].copy(),
                branch=int(branches.label(q[None])[0]),
                input_names=list(names), inputs=values, effort=effort, step=k,
                phi_max=float(np.max(np.abs(mech.phi(q)))) if mech.m else 0.0,
            )
        for sensor, sampler in due:  # a known-input sensor reads the true input force (effort)
            value = sampler.apply(t, sensor.reading(effort) if getattr(sensor, "is_input", False) else sensor.h(q, qd, qdd))
            if value is not None:
                yield Measurement(t, sensor.name, value)
        if progress is not None:
            progress(k, n_steps)


def _qdd(mech, t, q, qd) -> np.ndarray:
    """Exact accelerations (n,) at (q, qd): the generated R-matrix dynamics on floats
    (``dynamics_t``: R^T M R zdd = R^T (Q - M R'zd), qdd = R zdd + R'zd) when the
    mechanism has kernels and no drivers, else the Lagrange-multiplier (index-1) forward
    dynamics. Both solve the same equations exactly: they agree to rounding (~1e-14
    relative), the kernel in ~3 us instead of ~20 us."""
    K = fastpath.kernels(mech)
    if K is not None and not getattr(mech, "drivers", None):
        try:
            xs = q.tolist()
            S = K.scalar
            tr = S.trig(xs)
            qdd = S.dynamics_t(S.jac(xs, tr), tr, xs, qd.tolist(), K.time_values(t), None)[1]
            if math.isfinite(sum(qdd)):
                return np.array(qdd)
        except fastpath.SCALAR_ERRORS:
            pass  # singular or non-finite: the generic code decides
    return dynamics.forward_lagrange(mech, t, q, qd)[0]


@dataclass
class SimulationResult:
    """Everything of a (short) run in memory: ground truth arrays and measurements.

    t (K,), q/qd/qdd (K, n), z/zd/zdd (K, g), branch (K,), inputs (K, k), effort (K, n),
    phi_max (K,); measurements {sensor name: (stamps (M,), values (M, d))}.
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    zdd: np.ndarray
    branch: np.ndarray
    input_names: list
    inputs: np.ndarray
    effort: np.ndarray
    phi_max: np.ndarray
    measurements: dict
    wall_time: float


def run(scenario: Scenario) -> SimulationResult:
    """Run a scenario into memory (for tests, benchmarks and short runs)."""
    t0 = time.perf_counter()
    snaps, meas = [], {s.name: ([], []) for s in scenario.all_sensors}
    for ev in simulate(scenario):
        if isinstance(ev, TruthSnapshot):
            snaps.append(ev)
        else:
            meas[ev.sensor][0].append(ev.stamp)
            meas[ev.sensor][1].append(ev.value)
    dims = {s.name: s.dim for s in scenario.all_sensors}
    stack = lambda attr: np.array([getattr(s, attr) for s in snaps])  # noqa: E731
    return SimulationResult(
        t=stack("stamp"), q=stack("q"), qd=stack("qd"), qdd=stack("qdd"), z=stack("z"), zd=stack("zd"),
        zdd=stack("zdd"), branch=stack("branch"), input_names=list(snaps[0].input_names),
        inputs=np.array([s.inputs for s in snaps]).reshape(len(snaps), -1), effort=stack("effort"),
        phi_max=stack("phi_max"),
        measurements={n: (np.array(ts), np.array(vs).reshape(len(vs), dims[n])) for n, (ts, vs) in meas.items()},
        wall_time=time.perf_counter() - t0,
    )
