"""Core of the ``simulator`` node: :func:`mbde_core.simulator.simulate` paced by a clock.

:class:`PacedSimulation` pulls the ground truth of a scenario from the simulator's
generator (the one ``mbde simulate`` writes into bags, same integrator, same states) up
to a requested simulated time, restarting the scenario when it ends if asked (``loop``).
Stamps are integer nanoseconds: ``offset_ns + start_ns + k * step_ns`` where the offset
is 0 when the node publishes /clock (stamps = simulated time, identical to the bag's) and
the wall-clock time when the motion starts otherwise (set ``offset_ns`` before the first
``advance``). Without /clock, a looping simulation keeps its
time running (the next lap starts one step after the previous one ended).
"""
from __future__ import annotations

import copy
import math

from mbde_core.errors import ConfigError
from mbde_core.rosio import convert as cv
from mbde_core.rosio.stamps import ns_to_sec, sec_to_ns
from mbde_core.scenario.scenario import Scenario
from mbde_core.simulator.core import TruthSnapshot, simulate


def sensor_grid_steps(scenario) -> int:
    """Greatest common divisor of every sensor period (internal steps): the ground-truth
    period at which every reading instant has a ground-truth sample (10 ms if none)."""
    every = 0
    for n in scenario.sensor_every.values():
        every = math.gcd(every, int(n))
    if every == 0:
        every = max(1, round(0.01 / scenario.step))
    return every


def with_truth_period(scenario, rate: float = 0.0, duration: float = 0.0):
    """A copy of the scenario publishing ground truth at ``rate`` Hz (0 = the sensor grid),
    lasting ``duration`` s (0 = unchanged). ConfigError if the period is not a whole number
    of internal steps."""
    if rate > 0:
        k = 1.0 / (rate * scenario.step)
        every = int(round(k))
        if every < 1 or abs(k - every) > 1e-6 * k:
            raise ConfigError("<parameters>", "rate", f"{rate:g} Hz is not a whole number of internal steps of "
                              f"{scenario.step:g} s (e.g. {1.0 / (max(every, 1) * scenario.step):g} Hz)")
    else:
        every = sensor_grid_steps(scenario)
    doc = copy.deepcopy(scenario.raw)
    doc.pop("ground_truth_rate", None)
    doc["ground_truth_period"] = every * scenario.step_ns / 1e9
    if duration > 0:
        doc["duration"] = float(duration)
    out = Scenario(doc, file=scenario.file, base_dir=scenario.base_dir)
    assert out.ground_truth_every == every and sec_to_ns(out.step) == scenario.step_ns
    return out


class PacedSimulation:
    """Ground truth of a scenario pulled up to a simulated time (see module docstring).

    ``advance(tau)`` returns the TruthSnapshots with scenario time <= tau (seconds since the
    start of the current lap); each gets ``stamp_ns`` (int) and ``stamp`` [s] set.
    """

    def __init__(self, scenario, loop: bool = False, offset_ns: int = 0, clock: bool = True):
        self.scenario = scenario
        self.loop = loop
        self.offset_ns = int(offset_ns)
        self.lap = 0
        self.finished = False
        self._simulate = simulate
        self._truth_type = TruthSnapshot
        self._gen = simulate(scenario)
        self._held = None  # the first snapshot beyond the requested time
        self.lap_ns = (scenario.n_steps + 1) * scenario.step_ns  # time advance per lap without /clock
        self.restart_clock = clock  # with /clock: every lap restarts at the scenario start

    @property
    def duration(self) -> float:
        return self.scenario.n_steps * self.scenario.step

    def stamp_ns(self, step: int) -> int:
        lap_shift = 0 if self.restart_clock else self.lap * self.lap_ns
        return self.offset_ns + lap_shift + self.scenario.start_ns + step * self.scenario.step_ns

    def _next_truth(self):
        for ev in self._gen:
            if isinstance(ev, self._truth_type):
                return ev
        return None

    def advance(self, tau: float, max_events: int = 1_000_000) -> list:
        """Snapshots up to scenario time tau [s] of the current lap (see class doc).

        At the end of the scenario: with loop, a new lap starts (``lap`` increments; the
        caller sees it through the stamps), else ``finished`` becomes True.
        """
        out = []
        step_ns = self.scenario.step_ns
        while len(out) < max_events and not self.finished:
            ev = self._held if self._held is not None else self._next_truth()
            self._held = None
            if ev is None:
                if not self.loop:
                    self.finished = True
                    break
                self.lap += 1
                self._gen = self._simulate(self.scenario)
                break  # the new lap starts at tau = 0: the caller re-bases its clock
            if ev.step * step_ns / 1e9 > tau + 1e-12:
                self._held = ev
                break
            ev.stamp_ns = self.stamp_ns(ev.step)
            ev.stamp = ns_to_sec(ev.stamp_ns)
            out.append(ev)
        return out


def stamp_msg(factory, stamp_ns: int):
    """builtin_interfaces/Time of an integer nanosecond stamp (exact at any epoch)."""
    t = factory.time(0.0)
    t.sec, t.nanosec = divmod(int(stamp_ns), 1_000_000_000)
    return t


def truth_messages(factory, ev, coordinate_names, independent_names, frame_id: str):
    """(MechanismState, JointState) of a ground-truth sample, as ``mbde simulate`` writes
    them (JointState effort = the true generalized input per coordinate); header stamps
    exact from ``ev.stamp_ns``."""
    state = cv.mechanism_state_msg(factory, ev, coordinate_names, independent_names, frame_id)
    joints = cv.joint_state_msg(factory, ev.stamp, coordinate_names, ev.q, ev.qd, ev.effort, frame_id)
    if hasattr(ev, "stamp_ns"):
        state.header.stamp = stamp_msg(factory, ev.stamp_ns)
        joints.header.stamp = stamp_msg(factory, ev.stamp_ns)
    return state, joints
