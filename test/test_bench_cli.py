"""The benchmark commands run end to end on a tiny matrix (numbers are reported, not asserted)."""
import json

from conftest import run_mbde


def test_bench_help_lists_benchmarks():
    proc = run_mbde("bench", "--help")
    assert proc.returncode == 0
    for name in ("accuracy", "speed", "smoother"):
        assert name in proc.stdout


def test_bench_accuracy_tiny(tmp_path):
    proc = run_mbde("bench", "accuracy", "--out", tmp_path, "--runs", "1", "--periods", "1,15", "--gravity-errors", "1",
                    "--cases", "fourbar_gyro", "--duration", "0.6", "--estimators", "dekf,cekf", "--jobs", "1",
                    "--scaling", "1,2")
    assert proc.returncode == 0, proc.stderr
    assert "speed-up 1 -> 2 workers" in proc.stdout and proc.stdout.count("%  yes") == 2  # identical results
    assert "estimated wall time of 100 runs per cell" in proc.stdout
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    cells = {(c["estimator"], c["period_steps"]): c for c in doc["cells"]}
    assert set(cells) == {("dekf", 1), ("dekf", 15), ("cekf", 1), ("cekf", 15)}
    assert cells[("dekf", 1)]["rmse_z"] < 0.05
    assert (tmp_path / "accuracy.csv").read_text().count("\n") == 5
    assert (tmp_path / "rmse_fourbar_gyro.png").stat().st_size > 1000
    assert "fourbar_gyro, gravity error 1 m/s^2" in proc.stdout


def test_bench_speed_tiny(tmp_path):
    proc = run_mbde("bench", "speed", "--duration", "0.4", "--estimators", "dekf,ukf", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "filterpy-ukf" in proc.stdout and "FilterPy UKF / our UKF" in proc.stdout
    doc = json.loads((tmp_path / "speed.json").read_text())
    assert doc["fourbar_gyro"]["ukf"]["mean_us"] > 0


def test_bench_vi_tiny(tmp_path):
    proc = run_mbde("bench", "vi", "--out", tmp_path, "--only", "oscillator,kalman,pendulum,crane,ekf", "--runs", "1",
                    "--particles", "50", "--duration", "1", "--ekf-periods", "0.05", "--ekf-duration", "0.5")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "results.json").read_text())
    assert set(doc) == {"oscillator", "kalman", "pendulum", "crane", "ekf"}
    osc = {(r["scheme"], r["t"]): r for r in doc["oscillator"]}
    assert osc[("midpoint", 60.0)]["area_noise_free"] == osc[("midpoint", 0.0)]["area_noise_free"]
    assert osc[("euler", 60.0)]["area_noise_free"] > 10 * osc[("euler", 0.0)]["area_noise_free"]
    assert {r["filter"] for r in doc["crane"]} == {"vipf midpoint", "pf rk4", "pf euler"}
    for name in ("oscillator.png", "kalman.png", "crane.png", "ekf.png"):
        assert (tmp_path / name).stat().st_size > 1000
    assert "Planar crane" in proc.stdout and "VI-EKF vs errorEKF" in proc.stdout


def test_bench_replay_streaming_tiny(tmp_path):
    proc = run_mbde("bench", "replay", "--out", tmp_path, "--only", "streaming", "--durations", "1")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "replay_bench.json").read_text())
    rows = doc["streaming"]["rows"]
    assert [r["duration_s"] for r in rows] == [1.0]
    assert all(r["replay_rss_mb"] > 10 and r["simulate_s"] > 0 for r in rows)
    assert "Long bags" in proc.stdout and "peak RSS" in proc.stdout
    timings = tmp_path / "t.json"
    proc = run_mbde("replay", tmp_path / "bag1", "--estimators", "dekf", "--out", tmp_path / "r", "--timings", timings)
    assert proc.returncode == 0, proc.stderr
    t = json.loads(timings.read_text())["bags"][0]
    assert {"load", "tasks", "write", "metrics", "report", "plots_wait"} <= set(t["phases"])
    assert set(t["estimators"]) == {"dekf"} and t["estimators"]["dekf"]["cpu"] > 0
    assert (tmp_path / "r" / "dekf.png").stat().st_size > 1000  # drawn by the plot worker


def test_bench_accuracy_smoother_column(tmp_path):
    proc = run_mbde("bench", "accuracy", "--out", tmp_path, "--runs", "1", "--periods", "1", "--gravity-errors", "1",
                    "--cases", "fourbar_gyro", "--duration", "0.6", "--estimators", "dekf,smoother", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    cells = {c["estimator"]: c for c in json.loads((tmp_path / "accuracy.json").read_text())["cells"]}
    assert cells["smoother"]["failed"] == 0 and cells["smoother"]["rmse_z"] < cells["dekf"]["rmse_z"]
    assert cells["smoother"]["nees"] > 0 and cells["dekf"]["nees"] > 0
    assert "mean nees" in proc.stdout


def test_bench_smoother_tiny(tmp_path):
    proc = run_mbde("bench", "smoother", "--tables", "1,3,5", "--cases", "fourbar_gyro", "--lengths", "1",
                    "--trf-lengths", "", "--seam-length", "2",
                    "--window", "1", "--overlap", "0.3", "--nees-runs", "2", "--nees-length", "0.5", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "smoother_bench.json").read_text())
    assert doc["consistency"][0]["dof"] == 2 and doc["consistency"][0]["mean_nees"] > 0
    assert doc["speed"][0]["steps"] == 201 and doc["speed"][0]["iterations"] >= 1
    assert doc["seams"][0]["windows"] == 2 and doc["seams"][0]["max_seam_z"] < 1.0


def test_bench_identify_tiny(tmp_path):
    """One seeded four-bar run (10 s at 200 Hz, 4 parameters 20 % off), no replay loop."""
    proc = run_mbde("bench", "identify", "--runs", "1", "--cases", "fourbar_gyro", "--no-loop", "--jobs", "1", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "fourbar_gyro" in proc.stdout and "coverage" in proc.stdout
    (run,) = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    assert not run["failed"] and len(run["z"]) == 4 and run["iterations"] >= 1
    doc = json.loads((tmp_path / "identify.json").read_text())
    assert doc["coverage"]["fourbar_gyro"]["runs"] == 1


def test_bench_motors_tiny(tmp_path):
    proc = run_mbde("bench", "motors", "--scenarios", "speedstep", "--estimators", "ukf", "--duration", "0.3",
                    "--seeds", "1", "--jobs", "1", "--out", tmp_path / "m", "--results", tmp_path / "docs")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "docs" / "motors.md").read_text()
    assert "### speedstep" in page  # the page demotes the bench's own headings
    assert "| ukf |" in page and "measured: tracking RMSE z" in page and "on track after [s]" in page
    assert "unknown: tracking RMSE z" in page and not (tmp_path / "m" / "bags").exists()
