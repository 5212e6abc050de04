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
