"""The mbde command line of the engine issue: help texts, info, inverse-dynamics."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import MSC_DIR, REPO, mech_path, run_mbde


def test_top_level_help_lists_commands():
    proc = run_mbde("--help")
    assert proc.returncode == 0
    for cmd in ("info", "inverse-dynamics"):
        assert cmd in proc.stdout


@pytest.mark.parametrize("cmd", ["info", "inverse-dynamics"])
def test_subcommand_help(cmd):
    proc = run_mbde(cmd, "--help")
    assert proc.returncode == 0
    assert f"mbde {cmd}" in proc.stdout and len(proc.stdout.splitlines()) > 5


def test_console_script_installed():
    exe = shutil.which("mbde", path=os.path.dirname(sys.executable)) or shutil.which("mbde")
    assert exe, "the `mbde` console script is not installed"
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("mbde ")


def test_unknown_command_exit_2():
    proc = run_mbde("frobnicate")
    assert proc.returncode == 2 and "unknown command" in proc.stderr


def test_info_fourbar():
    proc = run_mbde("info", mech_path("fourbar"))
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "degrees of freedom: 1" in out
    assert "independent coordinates z: theta" in out
    assert "assembly branches at the initial z: 2" in out


def test_inverse_dynamics_cli_matches_msc(tmp_path):
    out = tmp_path / "t.csv"
    proc = run_mbde(
        "inverse-dynamics", os.path.join(MSC_DIR, "fourbars1-with-rel-angle.yaml"),
        "--trajectory", os.path.join(MSC_DIR, "fourbars1-with-rel-angle-trajectory.txt"),
        "--coordinate", "4", "--out", out,
    )
    assert proc.returncode == 0, proc.stderr
    data = np.loadtxt(out, delimiter=",", skiprows=1)
    msc = np.loadtxt(os.path.join(MSC_DIR, "InverseDynamics_4bars_MSC.tab"), comments="%")
    assert data.shape == (2000, 2)
    assert np.max(np.abs(data[:, 1] + msc[:, 1])) < 0.05
    with open(out) as fh:
        assert fh.readline().strip() == "t,force"


def test_inverse_dynamics_by_name_and_errors(tmp_path):
    traj = tmp_path / "traj.txt"
    traj.write_text("# t theta\n" + "\n".join(f"{0.01 * k} {0.5 + 0.1 * np.sin(0.01 * k)}" for k in range(50)))
    proc = run_mbde("inverse-dynamics", mech_path("fourbar"), "--trajectory", traj, "--coordinate", "theta", "--out", tmp_path / "o.csv")
    assert proc.returncode == 0, proc.stderr
    bad = run_mbde("inverse-dynamics", mech_path("fourbar"), "--trajectory", traj, "--coordinate", "phi", "--out", tmp_path / "o.csv")
    assert bad.returncode == 2 and "unknown coordinate 'phi'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    missing = run_mbde("inverse-dynamics", mech_path("fourbar"), "--trajectory", tmp_path / "none.txt", "--coordinate", "4", "--out", tmp_path / "o.csv")
    assert missing.returncode == 2 and "file not found" in missing.stderr
    garbage = tmp_path / "g.txt"
    garbage.write_text("0 1\n0.1 x\n")
    proc = run_mbde("inverse-dynamics", mech_path("fourbar"), "--trajectory", garbage, "--coordinate", "4", "--out", tmp_path / "o.csv")
    assert proc.returncode == 2 and "line 2" in proc.stderr


def _fivebar_motion(t):
    """A smooth prescribed motion of the five-bar's two cranks: theta (K, 2), its first and
    second time derivatives (analytic)."""
    a, w, phase = np.array([0.35, 0.25]), np.array([2 * np.pi, 3.0]), np.array([0.0, 1.0])
    base = np.array([0.0, np.pi])
    arg = np.outer(t, w) + phase
    return base + a * np.sin(arg), a * w * np.cos(arg), -a * w**2 * np.sin(arg)


def test_inverse_dynamics_two_coordinates_on_the_fivebar(tmp_path, mechanisms):
    """`--coordinate theta1,theta2` on a 2-DOF mechanism: one trajectory column per
    coordinate, one force column per coordinate, equal to the engine's inverse dynamics
    at the exact (analytic) motion, and the forces reproduce the motion in forward dynamics."""
    from mbde_core.engine import dynamics, kinematics

    mech = mechanisms["fivebar"]
    t = np.arange(0, 1.0 + 1e-9, 0.001)
    th, thd, thdd = _fivebar_motion(t)
    traj = tmp_path / "traj.txt"
    np.savetxt(traj, np.column_stack([t, th]), header="t theta1 theta2", fmt="%.15g")
    out = tmp_path / "tau.csv"
    proc = run_mbde("inverse-dynamics", mech_path("fivebar"), "--trajectory", traj, "--coordinate", "theta1,theta2",
                    "--out", out)
    assert proc.returncode == 0, proc.stderr
    with open(out) as fh:
        assert fh.readline().strip() == "t,force_theta1,force_theta2"
    data = np.loadtxt(out, delimiter=",", skiprows=1)
    assert data.shape == (t.size, 3)
    driven = [mech.coordinate_index("theta1"), mech.coordinate_index("theta2")]
    q = mech.q0.copy()
    ref = np.zeros((t.size, 2))
    for k in range(t.size):
        q, qd, qdd, ok = kinematics.full_state(mech, q, th[k], thd[k], thdd[k])
        assert ok
        ref[k] = dynamics.inverse(mech, t[k], q, qd, qdd, driven)
        if k % 100 == 0:  # the forces drive the prescribed accelerations [rad/s^2]
            Q = np.zeros(mech.n)
            Q[driven] = data[k, 1:]
            zdd, _ = dynamics.forward(mech, t[k], q, qd, extra_Q=Q)
            assert np.max(np.abs(zdd - thdd[k])) < 1e-3 * np.max(np.abs(thdd))
    span = np.ptp(ref, axis=0)
    assert np.all(span > 1.0)  # N m: a real load, not a trivial one
    err = np.max(np.abs(data[:, 1:] - ref), axis=0)  # N m (differentiation of the samples)
    assert np.all(err < 1e-4 * span), (err, span)
    # the same coordinates by index, in the other order: columns follow --coordinate
    swapped = tmp_path / "swapped.txt"
    np.savetxt(swapped, np.column_stack([t, th[:, ::-1]]), fmt="%.15g")
    out2 = tmp_path / "tau2.csv"
    proc = run_mbde("inverse-dynamics", mech_path("fivebar"), "--trajectory", swapped, "--coordinate",
                    f"{driven[1]},{driven[0]}", "--out", out2)
    assert proc.returncode == 0, proc.stderr
    np.testing.assert_allclose(np.loadtxt(out2, delimiter=",", skiprows=1)[:, 1:], data[:, :0:-1], rtol=0, atol=1e-6 * span.max())


def test_inverse_dynamics_coordinate_count_and_overwrite_rules(tmp_path):
    traj = tmp_path / "traj.txt"
    traj.write_text("\n".join(f"{0.01 * k} {0.1 * np.sin(0.01 * k)} {np.pi}" for k in range(20)))
    one = run_mbde("inverse-dynamics", mech_path("fivebar"), "--trajectory", traj, "--coordinate", "theta1",
                   "--out", tmp_path / "o.csv")
    assert one.returncode == 2 and "2 degree(s) of freedom: give 2 coordinate(s), got 1" in one.stderr
    short = tmp_path / "short.txt"
    short.write_text("0 1\n0.1 1\n")
    bad = run_mbde("inverse-dynamics", mech_path("fivebar"), "--trajectory", short, "--coordinate", "theta1,theta2",
                   "--out", tmp_path / "o.csv")
    assert bad.returncode == 2 and "line 1: expected 3 numbers `t value1 value2`" in bad.stderr
    out = tmp_path / "exists.csv"
    out.write_text("keep me\n")
    proc = run_mbde("inverse-dynamics", mech_path("fivebar"), "--trajectory", traj, "--coordinate", "theta1,theta2",
                    "--out", out)
    assert proc.returncode == 2 and "exists (use --force" in proc.stderr and out.read_text() == "keep me\n"
    proc = run_mbde("inverse-dynamics", mech_path("fivebar"), "--trajectory", traj, "--coordinate", "theta1,theta2",
                    "--out", out, "--force")  # --force replaces only an earlier output of the command
    assert proc.returncode == 2 and "not replacing it" in proc.stderr and out.read_text() == "keep me\n"
    mine = tmp_path / "mine.csv"
    for force in ([], ["--force"]):
        proc = run_mbde("inverse-dynamics", mech_path("fivebar"), "--trajectory", traj, "--coordinate", "theta1,theta2",
                        "--out", mine, *force)
        assert proc.returncode == 0, proc.stderr
        assert mine.read_text().startswith("t,force_theta1,force_theta2\n")
