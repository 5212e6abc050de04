"""The trust verdict in mbde_msgs/MechanismState (trust_level, trust_reason): the batch
encoder of replay's estimates bag writes the same bytes as rosbags' serializer of the
per-message builder, and a replay's estimates bag carries each step's verdict."""
from __future__ import annotations

import json

import numpy as np

from conftest import run_mbde
from mbde_core.estimators.stage.trust import DEGRADED, LOST, OK, Verdict
from mbde_core.replay.encode import EstimateEncoder
from mbde_core.rosio import convert as cv
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.sensor_io import estimate_messages
from mbde_core.types import MechanismSnapshot

F = RosbagsFactory()
STORE = F.typestore


def test_encoder_writes_the_verdict_as_rosbags_does():
    from mbde_core.config.paths import config_path
    from mbde_core.model.mechanism import load_mechanism

    mech = load_mechanism(config_path("mechanisms", "fourbar.yaml"))
    rng = np.random.default_rng(5)
    verdicts = [None, Verdict(OK, "consistent", 0.93), Verdict(DEGRADED, "nis", 4.2, 2.9),
                Verdict(LOST, "bias", 1.1, bias=("gyro_coupler", -9.25)), Verdict(OK, "start"), None]
    snaps = [MechanismSnapshot(0.005 * k, rng.standard_normal(mech.n), rng.standard_normal(mech.n), rng.standard_normal(mech.n),
                               rng.standard_normal(1), rng.standard_normal(1), rng.standard_normal(1), np.eye(2))
             for k in range(len(verdicts))]
    ns, states, _ = EstimateEncoder(mech).encode(snaps, verdicts)
    for s, v, data in zip(snaps, verdicts, states):
        state, _ = estimate_messages(F, s, mech, trust=v)
        assert data == bytes(STORE.serialize_cdr(state, cv.MECHANISM_STATE))
        msg = STORE.deserialize_cdr(data, cv.MECHANISM_STATE)
        assert msg.trust_level == (0 if v is None else v.level)
        assert msg.trust_reason == ("" if v is None else v.reason)
    assert STORE.deserialize_cdr(states[3], cv.MECHANISM_STATE).trust_reason.startswith("innovations biased: gyro_coupler")


def test_replay_estimates_bag_carries_the_verdict(tmp_path):
    from mbde_core.replay.export import estimate_tables
    from mbde_core.rosio.bag import BagReader

    assert run_mbde("simulate", "config/scenarios/fourbar_gyro.yaml", "--out", tmp_path / "bag",
                    "--set", "duration=1.5").returncode == 0
    proc = run_mbde("replay", tmp_path / "bag", "--estimators", "ukf", "--out", tmp_path / "r", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    bag = tmp_path / "r" / "estimates"
    with BagReader(bag) as reader:
        msgs = [m for _, _, m in reader.messages(["/mbde/ukf/state"])]
    levels = [m.trust_level for m in msgs]
    reasons = [m.trust_reason for m in msgs]
    assert set(levels) <= {0, 1, 2} and all(reasons)  # every step has its verdict's sentence
    assert reasons[-1].startswith("readings consistent with the estimate over the last 1 s")
    metrics = json.loads((tmp_path / "r" / "metrics.json").read_text())
    frac = metrics["estimators"]["ukf"]["metrics"]["trust"]["fraction"]
    assert np.mean(np.array(levels) == 0) == frac["OK"]
    assert np.array_equal(estimate_tables(bag, ["ukf"])["ukf"]["trust"], np.array(levels, float))


def test_a_state_recorded_before_the_trust_fields_reads_as_ok(tmp_path):
    """Bytes of the older MechanismState (without the two trust fields) plus what
    BagReader appends equal the current message with OK and no reason, whatever the
    length of the message before them (every alignment)."""
    from mbde_core.rosio.bag_reader import with_trust_fields
    from mbde_core.rosio.typestore import build_typestore, find_msg_dir

    for path in find_msg_dir().glob("*.msg"):
        text = path.read_text()
        if path.name == "MechanismState.msg":
            text = "\n".join(line for line in text.splitlines() if "TRUST" not in line and "trust_" not in line)
        (tmp_path / path.name).write_text(text)
    old = RosbagsFactory(build_typestore(tmp_path))
    rng = np.random.default_rng(1)
    for n in range(1, 9):
        snap = MechanismSnapshot(0.25 * n, rng.standard_normal(n), rng.standard_normal(n), rng.standard_normal(n),
                                 np.zeros(0), np.zeros(0), np.zeros(0), branch=n % 3,
                                 branch_probabilities=rng.random(n % 3) if n % 3 else None)
        names = [f"c{'x' * k}" for k in range(n)]
        before = old.typestore.serialize_cdr(cv.mechanism_state_msg(old, snap, names, [], "w" * n), cv.MECHANISM_STATE)
        now = STORE.serialize_cdr(cv.mechanism_state_msg(F, snap, names, [], "w" * n), cv.MECHANISM_STATE)
        assert len(before) < len(now) and with_trust_fields(before) == bytes(now)
