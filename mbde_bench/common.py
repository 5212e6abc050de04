"""Shared pieces of the benchmarks: one ground truth per scenario, many measurement sets.

The paper-003 matrix varies the sensor period, the gravity error of the estimator's model
and the noise seed, none of which changes the true motion: the truth is simulated once
per scenario (drift-free ALI3-P at the scenario's fine step) and the readings of every
variant are sampled from it with seeded noise streams.
"""
from __future__ import annotations

import concurrent.futures
import csv
import multiprocessing
import os
import resource
import zlib

import numpy as np

from mbde_core.config.paths import config_path  # noqa: F401  (the benches' one resolver)
from mbde_core.estimators.configure import load
from mbde_core.replay.inputs import load_inputs
from mbde_core.scenario import load_scenario
from mbde_core.simulator import run
from mbde_core.simulator.bag import write_simulation_bag
from mbde_core.types import Measurement



def paper003_config(name: str) -> dict:
    """Options of ``name`` from config/estimators/paper003.yaml (paper 003's explicit tuning
    and forward-Euler transition) if it has a section, else the estimator's defaults. The
    benchmarks whose README tables were measured with those numbers (speed, faults, vi)
    keep them; `mbde bench transfer` compares them with the default rule. Plain values
    (validated), to edit and pass to ``make_estimator``."""
    return load(config_path("estimators", "paper003.yaml"), [name])[name].as_dict()



def simulate_scenario_bag(path: str, duration: float, folder: str):
    """(scenario name, ReplayInputs) of the scenario at ``path`` simulated for at most
    ``duration`` s into the bag ``folder``/<name> (replaced if it exists), read back as
    ``mbde replay`` reads it (the fault and transfer benchmarks)."""
    import shutil

    sc = load_scenario(path)
    sc = sc.with_overrides(duration=min(duration, sc.duration))
    bag = os.path.join(folder, sc.name)
    if os.path.isdir(bag):
        shutil.rmtree(bag)
    write_simulation_bag(sc, bag)
    return sc.name, load_inputs(bag)


class TruthRecord:
    """Ground truth of a scenario on its ground-truth grid: t (K,), q/qd/qdd (K, n), z/zd/zdd."""

    def __init__(self, scenario, duration: float):
        sc = scenario.with_overrides(duration=duration)
        res = run(sc)
        self.scenario = sc
        self.t, self.q, self.qd, self.qdd = res.t, res.q, res.qd, res.qdd
        self.z, self.zd, self.zdd = res.z, res.zd, res.zdd
        self.effort = res.effort  # (K, n) the true generalized input forces (a motor's torque)
        self.wall_time = res.wall_time

    def index_at(self, times: np.ndarray) -> np.ndarray:
        idx = np.searchsorted(self.t, times - 1e-9)
        if np.any(np.abs(self.t[np.clip(idx, 0, len(self.t) - 1)] - times) > 1e-9):
            raise ValueError("requested times are not on the ground-truth grid")
        return idx

    def measurements(self, sensors, period: float, seed: int, start: float = 0.0) -> list[Measurement]:
        """Readings of every sensor every ``period`` s with seeded noise (one stream per sensor)."""
        n = int(np.floor((self.t[-1] - start) / period + 1e-9)) + 1
        times = start + period * np.arange(n)
        idx = self.index_at(times)
        out = []
        for s in sensors:
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(s.name.encode()),)))
            sampler = s.noise.sampler(rng)
            vals = s.h(self.q[idx], self.qd[idx], self.qdd[idx])
            for t, v in zip(times, vals):
                noisy = sampler.apply(float(t), v)
                if noisy is not None:
                    out.append(Measurement(float(t), s.name, noisy))
        out.sort(key=lambda m: m.stamp)
        return out

    def at(self, times: np.ndarray):
        idx = self.index_at(times)
        return self.z[idx], self.zd[idx], self.zdd[idx]


def write_csv(path: str, rows, keys) -> None:
    """rows (dicts) into the CSV file ``path``, columns ``keys`` (other keys left out)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def peak_mb() -> float:
    """This process's peak resident memory [MB]."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def in_fresh_process(fn, args):
    """fn(args) in a new process (spawn): its peak memory is its own."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ex:
        return ex.submit(fn, args).result()
