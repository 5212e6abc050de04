"""Marker builder (mbde_core.viz.markers) and `mbde render` (matplotlib, no ROS)."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import run_mbde
from mbde_core.engine import kinematics
from mbde_core.engine.branches import BranchTool
from mbde_core.rosio.factory import RosbagsFactory
from mbde_core.types import MechanismSnapshot, ParticleCloud
from mbde_core.estimators.registry import traits
from mbde_core.viz.marker_msgs import marker_array, shapes_from_marker_array
from mbde_core.viz.markers import CHI2_2_95, MechanismDrawer, estimate_shapes, label_text, truth_shapes


def snapshot(mech, q, cov=None, probs=None):
    z = q[mech.independent]
    return MechanismSnapshot(0.0, q, np.zeros(mech.n), np.zeros(mech.n), z, np.zeros(mech.dof), np.zeros(mech.dof),
                             cov=cov, branch=0 if probs is not None else -1, branch_probabilities=probs)


def test_linkage_and_static_geometry(mechanisms):
    mech = mechanisms["fourbar"]
    d = MechanismDrawer(mech)
    ukf = traits("ukf")  # an estimator's colour is its traits'
    bars, joints = d.linkage(mech.q0, "ukf", color=ukf.color)
    assert bars.kind == "lines" and bars.ns == "ukf/bars" and len(bars.xy) == 6  # 3 bars
    P = mech.points(mech.q0)
    assert np.allclose(bars.xy.reshape(3, 2, 2)[0], P[[0, 1]])  # crank A-P1
    assert len(joints.xy) == 2 and joints.color == ukf.color
    ground = {s.ns: s for s in d.ground()}
    assert len(ground["model/pivots"].xy) == 2
    names = [s.text for s in d.ground() if s.ns == "model/names"]
    assert names == ["A", "B"]
    slider = MechanismDrawer(mechanisms["slider_crank"])
    track = [s for s in slider.ground() if s.ns == "model/ground"][0]
    assert len(track.xy) % 2 == 0 and len(track.xy) > 2


def test_ellipses_are_the_propagated_95_percent_covariance(mechanisms):
    """Sigma_p = R_p P R_p^T (checked against finite differences of the position problem),
    and every ellipse vertex lies on the chi2(2, 0.95) contour of Sigma_p."""
    mech = mechanisms["fourbar"]
    d = MechanismDrawer(mech)
    q = mech.q0
    P = np.array([[0.004]])
    S = d.point_covariances(q, P)
    h = 1e-6
    z = q[mech.independent]
    qp, _ = kinematics.solve_position(mech, z + h, q)
    qm, _ = kinematics.solve_position(mech, z - h, q)
    dpdz = (mech.points(qp) - mech.points(qm))[mech.moving_points] / (2 * h)  # (M, 2)
    assert np.allclose(S, np.einsum("mi,mj->mij", dpdz, dpdz) * 0.004, rtol=1e-5, atol=1e-12)
    # one DOF: a degenerate ellipse, the segment +/- sqrt(5.991 var) along dp/dz
    shape = d.ellipses(q, P, "ukf")
    segs = shape.xy.reshape(len(mech.moving_points), -1, 2)
    half = np.abs(segs - mech.points(q)[mech.moving_points][:, None]).max(axis=1)
    assert np.allclose(half, np.sqrt(CHI2_2_95 * 0.004) * np.abs(dpdz), rtol=1e-3)
    # two DOF (five-bar): every vertex on the chi2(2, 0.95) contour of a full-rank Sigma_p
    five = mechanisms["fivebar"]
    d5 = MechanismDrawer(five)
    P5 = np.array([[0.004, 0.001], [0.001, 0.002]])
    shape = d5.ellipses(five.q0, P5, "ukf")
    pts = five.points(five.q0)[five.moving_points]
    segs = shape.xy.reshape(len(pts), -1, 2)
    full = 0
    for p, s, ring in zip(pts, d5.point_covariances(five.q0, P5), segs):
        if np.linalg.cond(s) > 1e8:  # a point moved by one crank only
            continue
        full += 1
        r = ring - p
        m = np.einsum("ki,ij,kj->k", r, np.linalg.inv(s), r)
        assert np.allclose(m, CHI2_2_95, rtol=1e-6)
    assert full >= 1


def test_particle_hypotheses_by_branch_and_weight(mechanisms):
    mech = mechanisms["fourbar_pf"]
    d = MechanismDrawer(mech)
    rng = np.random.default_rng(1)
    N = 200
    z = mech.q0[mech.independent] + 0.05 * rng.standard_normal((N, 1))
    branch = (rng.random(N) < 0.3).astype(int)
    w = rng.random(N)
    w /= w.sum()
    cloud = ParticleCloud(0.0, z, np.zeros_like(z), branch, w, 1 / np.sum(w**2), N)
    snap = snapshot(mech, mech.q0, cov=np.diag([0.01, 0.1]), probs=np.array([0.7, 0.3]))
    shapes = {s.ns: s for s in estimate_shapes(d, "pf", snap, cloud, top_k=25)}
    hyp = shapes["pf/hypotheses"]
    E = len(d.geo.edges)
    assert len(hyp.xy) == 25 * E * 2 and hyp.colors.shape == (25 * E * 2, 4)
    top = np.argsort(-w, kind="stable")[:25]
    alphas = hyp.colors[:: 2 * E, 3]
    assert np.allclose(alphas, np.maximum(0.04, 0.6 * w[top] / w[top].max()))
    # each drawn linkage is an assembly of its particle's z on its branch
    qs = []
    for k in range(25):
        seg = hyp.xy[k * 2 * E:(k + 1) * 2 * E]
        q = np.zeros(mech.n)
        P = np.full((mech.n_points, 2), np.nan)
        for (i, j), (a, b) in zip(d.geo.edges, seg.reshape(E, 2, 2)):
            P[i], P[j] = a, b
        q[: 2 * len(mech.moving_points)] = P[mech.moving_points].ravel()
        q[mech.rel_columns] = z[top[k]]
        qs.append(q)
    qs = np.array(qs)
    assert np.allclose(qs[:, mech.independent], z[top], atol=1e-9)
    assert np.max(np.abs(mech.phi(qs))) < 1e-8
    assert np.array_equal(BranchTool(mech).label(qs), branch[top])
    colors = {tuple(np.round(c[:3], 3)) for c in hyp.colors}
    assert len(colors) == 2  # two branches, two colours
    assert "branch 0: 70.0 %  1: 30.0 %" in shapes["pf/label"].text and "ESS" in shapes["pf/label"].text


def test_marker_array_round_trip_and_cdr(mechanisms):
    from mbde_core.rosio.typestore import get_typestore

    mech = mechanisms["fourbar"]
    d = MechanismDrawer(mech)
    snap = snapshot(mech, mech.q0, cov=np.diag([1e-3, 1e-2]))
    shapes = truth_shapes(d, snap) + estimate_shapes(d, "ukf", snap) + d.ground()
    f = RosbagsFactory()
    arr = marker_array(f, shapes, "world", 12.5)
    assert len(arr.markers) == len(shapes)
    for m in arr.markers:
        assert m.header.frame_id == "world" and m.pose.orientation.w == 1.0
        assert (m.header.stamp.sec, m.header.stamp.nanosec) == (12, 500_000_000)
    back = shapes_from_marker_array(arr)
    assert [(s.ns, s.id, s.kind) for s in back] == [(s.ns, s.id, s.kind) for s in shapes]
    for a, b in zip(back, shapes):
        assert np.allclose(a.xy, b.xy) and a.text == b.text
    ts = get_typestore()
    data = ts.serialize_cdr(arr, "visualization_msgs/msg/MarkerArray")
    assert len(ts.deserialize_cdr(data, "visualization_msgs/msg/MarkerArray").markers) == len(shapes)
    # an empty part (no covariance) is a DELETE of its id, so RViz drops a stale one
    kf = estimate_shapes(d, "ukf", snapshot(mech, mech.q0))
    empty = [m for m in marker_array(f, kf, "world", 0.0).markers if m.ns == "ukf/ellipses"]
    assert empty[0].action == 2
    assert label_text("truth", snapshot(mech, mech.q0, probs=None)) == "truth"


@pytest.fixture(scope="module")
def sim_bag(tmp_path_factory):
    out = tmp_path_factory.mktemp("render") / "bag"
    proc = run_mbde("simulate", "config/scenarios/fourbar_gyro.yaml", "--out", out, "--set", "duration=0.6")
    assert proc.returncode == 0, proc.stderr
    return out


def test_render_gif_and_png(sim_bag, tmp_path):
    from PIL import Image

    gif = tmp_path / "anim.gif"
    proc = run_mbde("render", sim_bag, "--estimators", "ukf,errorekf", "--out", gif, "--fps", "10")
    assert proc.returncode == 0, proc.stderr
    assert "7 frame(s), truth, errorekf, ukf" in proc.stdout
    with Image.open(gif) as im:
        assert im.n_frames == 7 and im.size == (640, 480)
    # the estimates bag of mbde replay, merged with the simulated bag: same picture sources
    rep = tmp_path / "rep"
    assert run_mbde("replay", sim_bag, "--estimators", "ukf", "--out", rep, "--no-plots").returncode == 0
    png = tmp_path / "frame.png"
    proc = run_mbde("render", sim_bag, rep / "estimates", "--out", png, "--time", "0.3", "--size", "4x3")
    assert proc.returncode == 0, proc.stderr
    assert "1 frame(s), truth, ukf" in proc.stdout
    with Image.open(png) as im:
        assert im.size == (400, 300)
        colors = {c for _, c in im.convert("RGB").getcolors(maxcolors=1 << 20)}
    assert (255, 127, 12) in colors or any(abs(c[0] - 255) < 3 and abs(c[1] - 128) < 4 and c[2] < 20
                                           for c in colors)  # the ukf orange is drawn


def test_render_errors(sim_bag, tmp_path):
    proc = run_mbde("render", sim_bag, "--out", tmp_path / "x.mp4")
    assert proc.returncode == 2 and "write a .gif" in proc.stderr and "Traceback" not in proc.stderr
    proc = run_mbde("render", sim_bag, "--out", tmp_path / "x.gif", "--estimators", "kalman")
    assert proc.returncode == 2 and "unknown kalman" in proc.stderr
    (tmp_path / "exists.png").write_text("x")
    proc = run_mbde("render", sim_bag, "--out", tmp_path / "exists.png")
    assert proc.returncode == 2 and "--force" in proc.stderr
    proc = run_mbde("render", tmp_path / "nobag", "--out", tmp_path / "y.png")
    assert proc.returncode == 2 and "no such bag" in proc.stderr
