"""Synthetic recordings with known parameters for the identification tests and benchmark.

Cases (``CASES``), each a true mechanism document, its sensors and the parameters to
identify with their true values:

- ``pendulum``: paper 001 sec. 4.2/4.5 (config/mechanisms/pendulum_paper001.yaml): an
  arm on a viscous hinge released from near upright, a 4096-count encoder read at
  1000 Hz (quantization only); identifies the inertia about the hinge and the viscous
  coefficient (the paper's J and b) from several releases sharing one parameter set.
- ``fourbar_gyro``: paper 003 FourBars1 (config/mechanisms/fourbar.yaml) released from
  near pi/3, viscous damping at the crank pivot, a gyroscope on the coupler (1 deg/s,
  200 Hz); identifies gravity, the coupler and rocker masses and the crank damping.
- ``fivebar_gyro``: paper 003 FiveBars1 with gyroscopes on both couplers (1 deg/s,
  200 Hz); identifies gravity and the two coupler masses;
- ``motor_pendulum``, ``motor_slider_crank``: motor-driven, with friction, a tilted stand
  and the motor's control signal recorded (:mod:`.synthetic_motors`, paper 001's
  parameters).

:func:`setup` gives a run's true and starting documents and the true values.

The truth is integrated by the engine's RK4 at a 1 ms step for all releases of a run at
once (one batch; ~6e-5 rad from the drift-free ALI3-P after 10 s of the pendulum, far
below the 1.5e-3 rad encoder step), and readings are sampled from it with seeded noise
streams exactly as ``mbde simulate`` does (one stream per sensor and release).
"""
from __future__ import annotations

import copy
import math
import zlib
from dataclasses import dataclass

import numpy as np

from mbde_core.config.paths import config_path
from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.engine import dynamics, kinematics
from mbde_core.engine.integrators import MBState, get_integrator
from mbde_core.identification.keypath import apply_values
from mbde_core.identification.model import ParameterizedMechanism
from mbde_core.identification.synthetic_motors import MOTOR_CASES
from mbde_core.model.loader import spec_from_node
from mbde_core.model.mechanism import Mechanism
from mbde_core.sensors.config import load_sensors
from mbde_core.types import Measurement

GYRO = "deg2rad(1)"
CASES = {
    "pendulum": {
        "mechanism": "pendulum_paper001.yaml",
        "loads": [],
        "sensors": [{"name": "encoder", "type": "encoder", "body": "arm", "rate": 1000,
                     "counts_per_revolution": 4096, "noise": {"sigma": 0}}],
        "params": "bodies.arm.inertia,joints.O.damping",
        "release": ("theta", math.pi / 2, 0.02, 0.15),  # (coordinate, centre, min, max offset)
        "releases": 5,
        "duration": 5.0,
    },
    "fourbar_gyro": {
        "mechanism": "fourbar.yaml",
        "loads": [{"name": "crank_pivot", "type": "joint_damping", "body": "crank", "c": 3.0}],
        "sensors": [{"name": "gyro_coupler", "type": "gyroscope", "body": "coupler", "rate": 200, "noise": {"sigma": GYRO}}],
        "params": "gravity,bodies.coupler.inertia,bodies.rocker.mass,joints.A.damping",
        "release": ("theta", math.pi / 3, 0.0, 0.2),
        "releases": 1,
        "duration": 10.0,
    },
    "fivebar_gyro": {
        "mechanism": "fivebar.yaml",
        "loads": [],
        "sensors": [{"name": "gyro_coupler1", "type": "gyroscope", "body": "coupler1", "rate": 200, "noise": {"sigma": GYRO}},
                    {"name": "gyro_coupler2", "type": "gyroscope", "body": "coupler2", "rate": 200, "noise": {"sigma": GYRO}}],
        "params": "gravity,bodies.coupler1.mass,bodies.coupler2.mass",
        "release": ("theta1", 0.0, 0.0, 0.1),
        "releases": 1,
        "duration": 10.0,
    },
}
CASES.update(MOTOR_CASES)


@dataclass
class Motion:
    """One simulated release: the true q (K, n) and z, zd (K, g) at t (K,) on the 1 ms
    grid, and the noisy readings (time-ordered Measurements)."""

    t: np.ndarray
    q: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    measurements: list


def case_document(case: str) -> dict:
    """The mechanism YAML document of a case (with its loads and sensors)."""
    spec = CASES[case]
    doc = copy.deepcopy(read_yaml(config_path("mechanisms", spec["mechanism"])).value)
    doc.update(copy.deepcopy(spec.get("document", {})))
    if spec["loads"]:
        doc["loads"] = list(doc.get("loads") or []) + copy.deepcopy(spec["loads"])
    doc["sensors"] = copy.deepcopy(spec["sensors"])
    return doc


def case_mechanism(case: str, doc: dict | None = None):
    """(Mechanism, SensorSet) of a case's (or a given) document."""
    doc = case_document(case) if doc is None else doc
    mech = Mechanism(spec_from_node(Node(doc, f"<{case}>", "")))
    return mech, load_sensors(Node(doc["sensors"], f"<{case}>", "sensors"), mech)


def release_states(case: str, mech, rng: np.random.Generator, count: int | None = None) -> np.ndarray:
    """Initial independent coordinates (R, g) of ``count`` releases at rest near the case's pose."""
    coord, centre, lo, hi = CASES[case]["release"]
    count = CASES[case]["releases"] if count is None else count
    z0 = np.tile(mech.q0[mech.independent], (count, 1))
    col = mech.independent_names.index(coord)
    z0[:, col] = centre + rng.choice([-1.0, 1.0], count) * rng.uniform(lo, hi, count)
    return z0


def simulate(mech, sensors, z0: np.ndarray, duration: float, seed: int, step: float = 1e-3,
             acceleration_psd: float = 0.0, correlation_time: float = 0.0) -> list[Motion]:
    """Integrate releases at rest from z0 (R, g) for ``duration`` s and sample the sensors.

    acceleration_psd q_a [unit^2/s^3]: unmodelled disturbances as white acceleration
    noise of the independent coordinates (paper 000 eq. 11), drawn N(0, q_a / step) and
    held over each step (stream: SeedSequence(seed, spawn_key=(0,))); 0 = the model is
    exact. correlation_time tau > 0: the disturbance is coloured instead, an
    Ornstein-Uhlenbeck acceleration of the same density at low frequencies (stationary
    variance q_a / (2 tau)): a slowly varying unmodelled force, which leaves correlated
    residuals. Known-input sensors read the true input forces (the generalized_force
    loads, e.g. a motor). Each sensor is read every round(period / step) steps; its noise
    stream of release r is seeded by SeedSequence(seed, spawn_key=(crc32(name), r)).
    """
    R = z0.shape[0]
    q = kinematics.solve_position_continuation(mech, z0)
    qd = np.zeros_like(q)
    integ = get_integrator("rk4")
    K = int(round(duration / step))
    shape = (R, K + 1, mech.n)
    Q, QD, QDD = np.empty(shape), np.empty(shape), np.empty(shape)

    state = MBState(q, qd, dynamics.evaluate(mech, 0.0, q, qd).qdd)
    noise = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    sigma_v = math.sqrt(acceleration_psd / step)
    t = step * np.arange(K + 1)
    decay = math.exp(-step / correlation_time) if correlation_time > 0 else 0.0
    ou = np.zeros((R, mech.dof))
    if decay:
        sigma_v = math.sqrt(acceleration_psd / (2.0 * correlation_time))  # stationary std of the OU force
        ou = sigma_v * noise.standard_normal((R, mech.dof))
    for k in range(K + 1):
        Q[:, k], QD[:, k], QDD[:, k] = state.q, state.qd, state.qdd
        if k < K:
            if decay:
                ou = decay * ou + math.sqrt(1.0 - decay * decay) * sigma_v * noise.standard_normal((R, mech.dof))
                v = ou.copy()
            else:
                v = sigma_v * noise.standard_normal((R, mech.dof)) if sigma_v > 0 else None
            state = integ.step(mech, k * step, state, step, extra_zdd=v)
            if not np.all(state.ok):
                raise ValueError("the truth integration failed")
    out = []
    drives = [(ld.coordinate, ld.value[0]) for ld in mech.spec.loads if ld.kind == "generalized_force"]
    for r in range(R):
        meas = []
        for s in getattr(sensors, "ordered", sensors):
            every = max(int(round(s.period / step)), 1)
            idx = np.arange(0, K + 1, every)
            rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(zlib.crc32(s.name.encode()), r)))
            sampler = s.noise.sampler(rng)
            if getattr(s, "is_input", False):  # a known input reads the true input forces (effort)
                effort = np.zeros((idx.size, mech.n))
                for col, fn in drives:
                    effort[:, col] += [fn(float(tk)) for tk in t[idx]]
                vals = s.reading(effort)
            else:
                vals = s.h(Q[r, idx], QD[r, idx], QDD[r, idx])
            for tk, v in zip(t[idx], vals):
                noisy = sampler.apply(float(tk), v)
                if noisy is not None:
                    meas.append(Measurement(float(tk), s.name, noisy))
        meas.sort(key=lambda m: m.stamp)
        iz = mech.independent
        out.append(Motion(t, Q[r], Q[r][:, iz], QD[r][:, iz], meas))
    return out



def setup(case: str, rng: np.random.Generator, offset: float = 0.2, extra_errors: bool = False):
    """(true mechanism, true sensors, starting document, true values (P,), labels) of one
    run of a case: the true values are the document's (with the case's ``truth``
    overrides, e.g. a tilt of the stand); every parameter starts ``offset`` off (random
    sign; a parameter whose true value is 0, the tilt, starts at 0, the file's); the
    loads of ``truth_only`` (the motor, which the known input stands for) leave the
    starting model; extra_errors: the case's ``model_errors`` (percent changes of bodies'
    masses the identification does not estimate) go into the starting model too."""
    spec = CASES[case]
    base_mech, _ = case_mechanism(case)
    pm = ParameterizedMechanism(base_mech, spec["params"])
    truth = pm.p0.copy()
    for label, value in spec.get("truth", {}).items():
        truth[pm.names.index(label)] = float(value)
    true_doc = apply_values(pm.doc, pm.params, truth, pm.base_gravity)
    start = np.where(pm.p0 == 0, 0.0, truth * (1 + offset * rng.choice([-1.0, 1.0], pm.P)))
    start_doc = apply_values(pm.doc, pm.params, start, pm.base_gravity)
    drop = set(spec.get("truth_only", ()))
    start_doc["loads"] = [ld for ld in start_doc.get("loads") or [] if ld.get("name") not in drop]
    if extra_errors:
        for body, percent in spec.get("model_errors", {}).items():
            for b in start_doc["planar_bodies"]:
                if b.get("name") == body:
                    f = 1 + percent / 100.0  # the body's mass and inertia (an I0 expression of mass follows)
                    b["mass"] = float(b["mass"]) * f
                    if isinstance(b.get("I0"), (int, float)):
                        b["I0"] = float(b["I0"]) * f
    mech, sensors = case_mechanism(case, true_doc)
    return mech, sensors, start_doc, truth, pm.names
