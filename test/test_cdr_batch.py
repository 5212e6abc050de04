"""Precompiled CDR layouts (mbde_core.rosio.cdr_batch) against rosbags' serializer."""
from __future__ import annotations

import numpy as np
import pytest

from mbde_core.replay.encode import EstimateEncoder, PartWriter, read_part
from mbde_core.rosio import convert as cv
from mbde_core.rosio.cdr_batch import Layout, LayoutError, stack_rows
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.rosio.sensor_io import estimate_messages
from mbde_core.types import MechanismSnapshot

F = RosbagsFactory()
STORE = F.typestore


def _field(msg, path):
    for part in path.split("."):
        msg = getattr(msg, part)
    return np.asarray(msg)


def _snap(rng, t, n=5, g=1, cov=True, probs=0, inputs=()):
    k = len(inputs)
    return MechanismSnapshot(stamp=t, q=rng.standard_normal(n), qd=rng.standard_normal(n), qdd=rng.standard_normal(n),
                             z=rng.standard_normal(g), zd=rng.standard_normal(g), zdd=rng.standard_normal(g),
                             cov=rng.standard_normal((2 * g, 2 * g)) if cov else None, branch=int(rng.integers(-1, 3)),
                             branch_probabilities=rng.random(probs) if probs else None, input_names=list(inputs),
                             inputs=rng.standard_normal(k) if k else None, input_cov=np.eye(k) if k else None)


@pytest.mark.parametrize("shape", [dict(), dict(cov=False), dict(probs=2), dict(inputs=("theta",), g=2)])
def test_decode_and_encode_equal_rosbags(shape):
    rng = np.random.default_rng(7)
    names, inames = ["a", "bb", "ccc", "d", "theta"], ["theta", "d"][: shape.get("g", 1)]
    msgs = [cv.mechanism_state_msg(F, _snap(rng, 1.5 + 0.005 * i, **shape), names, inames, "world") for i in range(6)]
    datas = [STORE.serialize_cdr(m, cv.MECHANISM_STATE) for m in msgs]
    layout = Layout(STORE, cv.MECHANISM_STATE, datas[0])
    rows = stack_rows([bytes(d) for d in datas])
    assert layout.matches(rows).all()
    dec = layout.decode(rows)
    for i, m in enumerate(msgs):
        for path, v in dec.items():
            assert np.array_equal(_field(m, path), v[i])
    assert np.array_equal(layout.encode(dec, len(msgs)), rows)  # bit-identical bytes


def test_other_shapes_do_not_match_and_big_endian_is_refused():
    imu = cv.imu_msg(F, 2.0, gyro_z=0.5, frame_id="gyro")
    other = cv.imu_msg(F, 2.0, gyro_z=0.5, frame_id="gyrX")  # same length, other frame id
    a, b = STORE.serialize_cdr(imu, cv.IMU), STORE.serialize_cdr(other, cv.IMU)
    layout = Layout(STORE, cv.IMU, a)
    assert layout.matches(stack_rows([bytes(a), bytes(b)])).tolist() == [True, False]
    with pytest.raises(LayoutError):
        Layout(STORE, cv.IMU, b"\x00\x00" + bytes(a)[2:])


def test_estimate_encoder_equals_per_message_path_across_shape_changes():
    from mbde_core.model.mechanism import load_mechanism
    from mbde_core.config.paths import config_path

    mech = load_mechanism(config_path("mechanisms", "fourbar.yaml"))
    rng = np.random.default_rng(3)
    snaps = [_snap(rng, 0.005 * i, n=mech.n, g=mech.dof) for i in range(4)]
    snaps += [_snap(rng, 0.02 + 0.005 * i, n=mech.n, g=mech.dof, cov=False, inputs=("theta",)) for i in range(3)]
    snaps.append(_snap(rng, 1e5 + 1 / 3, n=mech.n, g=mech.dof))
    enc = EstimateEncoder(mech)
    ns, states, joints = enc.encode(snaps)
    for s, t, a, b in zip(snaps, ns, states, joints):
        state, joint = estimate_messages(F, s, mech)
        assert a == bytes(STORE.serialize_cdr(state, cv.MECHANISM_STATE))
        assert b == bytes(STORE.serialize_cdr(joint, cv.JOINT_STATE))
        assert t == state.header.stamp.sec * 10**9 + state.header.stamp.nanosec
    assert len(enc.layouts) == 2


def test_part_file_round_trip(tmp_path):
    w = PartWriter(str(tmp_path / "p"))
    recs = [(5, 0, 0, b"abc"), (5, 1, 2, b""), (2**62, 0, 1, bytes(range(256)))]
    for r in recs:
        w.write(*r)
    w.close()
    assert list(read_part(str(tmp_path / "p"))) == recs


@pytest.mark.parametrize("scen", ["fourbar_imu", "adekf_slider_crank", "fourbar_encoder"])
def test_simulation_bag_equals_per_message_builders(scen, tmp_path):
    """mbde simulate's batched writing gives the bytes of the per-message builders, in event order."""
    from mbde_core.config.paths import config_path
    from mbde_core.rosio.bag import BagReader
    from mbde_core.scenario import load_scenario
    from mbde_core.simulator.bag import sensor_message_builder, write_simulation_bag
    from mbde_core.simulator.core import TruthSnapshot, simulate

    sc = load_scenario(config_path("scenarios", f"{scen}.yaml"), ["duration=0.2"])
    write_simulation_bag(sc, tmp_path / "b")
    truth = sc.truth_mechanism()
    cn, inn = list(truth.coordinate_names), list(truth.independent_names)
    build = {s.name: (s.topic, sensor_message_builder(s, F), s.msg_type) for s in sc.all_sensors}
    want = []
    for ev in simulate(sc):
        if isinstance(ev, TruthSnapshot):
            want.append(("/mbde/ground_truth", STORE.serialize_cdr(cv.mechanism_state_msg(F, ev, cn, inn, sc.frame_id),
                                                                  cv.MECHANISM_STATE)))
            want.append(("/mbde/ground_truth/joint_states", STORE.serialize_cdr(
                cv.joint_state_msg(F, ev.stamp, cn, ev.q, ev.qd, ev.effort, sc.frame_id), cv.JOINT_STATE)))
        else:
            topic, make, typename = build[ev.sensor]
            want.append((topic, STORE.serialize_cdr(make(ev.stamp, ev.value), typename)))
    with BagReader(tmp_path / "b") as r:
        got = [(t, bytes(d)) for t, _, _, d in r.raw_messages() if t != "/mbde/description"]
    assert got == [(t, bytes(d)) for t, d in want]


@pytest.mark.parametrize("scen", ["fourbar_imu", "adekf_slider_crank"])
def test_tf_batches_equal_per_message_path(scen):
    """The replay's /tf bytes (batched, viewables.EstimateView) equal tf_message + rosbags."""
    from types import SimpleNamespace

    from mbde_core.config.paths import config_path
    from mbde_core.engine import kinematics
    from mbde_core.replay.viewables import EstimateView
    from mbde_core.rosio.tf import TF_MESSAGE, tf_message
    from mbde_core.scenario import load_scenario

    sc = load_scenario(config_path("scenarios", f"{scen}.yaml"), [])
    mech = sc.estimator_mechanism()
    rng = np.random.default_rng(5)
    z = mech.q0[mech.independent] + rng.uniform(-3, 3, (40, mech.dof))
    q, ok = kinematics.solve_position(mech, z, np.broadcast_to(mech.q0, (40, mech.n)).copy())
    source = SimpleNamespace(scenario=sc, sensors=sc.estimator_sensors())
    view = EstimateView("est", mech, source, EstimateEncoder(mech))
    recs = [SimpleNamespace(estimate=SimpleNamespace(stamp=1e5 + 0.005 * k + 1 / 3, q=q[k])) for k in range(40)]
    got = view._tf(recs[:7]) + view._tf(recs[7:])
    for r, data in zip(recs, got):
        msg = tf_message(view.factory, view.frames.moving(r.estimate.q), r.estimate.stamp)
        assert data == bytes(STORE.serialize_cdr(msg, TF_MESSAGE))


def test_particle_set_encoder_equals_per_message_path():
    from mbde_core.replay.encode import ParticleSetEncoder
    from mbde_core.types import ParticleCloud

    rng = np.random.default_rng(8)
    enc = ParticleSetEncoder(F, ["theta", "s"])
    for k, N in enumerate([5, 5, 5, 3, 3, 5]):
        w = rng.uniform(size=N)
        cloud = ParticleCloud(1e5 + 0.01 * k + 1 / 3, rng.normal(size=(N, 2)), rng.normal(size=(N, 2)),
                              rng.integers(0, 2, N), w / w.sum(), float(rng.uniform(1, N)), int(rng.integers(1, N + 1)))
        want = STORE.serialize_cdr(cv.particle_set_msg(F, cloud, ["theta", "s"], "world"), cv.PARTICLE_SET)
        assert enc.encode(cloud) == bytes(want)
    assert len(enc.layouts) == 2
