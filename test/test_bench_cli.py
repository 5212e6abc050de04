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
                    "--cases", "fourbar_gyro", "--duration", "0.6", "--estimators", "dekf,cekf,smoother", "--jobs", "1")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "accuracy.json").read_text())
    cells = {(c["estimator"], c["period_steps"]): c for c in doc["cells"]}
    assert set(cells) == {(n, p) for n in ("dekf", "cekf", "smoother") for p in (1, 15)}
    assert cells[("dekf", 1)]["rmse_z"] < 0.05
    assert cells[("smoother", 1)]["rmse_z"] < cells[("dekf", 1)]["rmse_z"] and cells[("smoother", 1)]["nees"] > 0
    assert (tmp_path / "accuracy.csv").read_text().count("\n") == 7
    assert (tmp_path / "rmse_fourbar_gyro.png").stat().st_size > 1000
    assert "fourbar_gyro, gravity error 1 m/s^2" in proc.stdout


def test_bench_speed_tiny(tmp_path):
    proc = run_mbde("bench", "speed", "--duration", "0.4", "--estimators", "dekf,ukf", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "filterpy-ukf" in proc.stdout and "FilterPy UKF / our UKF" in proc.stdout
    doc = json.loads((tmp_path / "speed.json").read_text())
    assert doc["fourbar_gyro"]["ukf"]["mean_us"] > 0


def test_bench_smoother_tiny(tmp_path):
    proc = run_mbde("bench", "smoother", "--cases", "fourbar_gyro", "--lengths", "1", "--trf-lengths", "", "--seam-length", "2",
                    "--window", "1", "--overlap", "0.3", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "smoother_bench.json").read_text())
    assert doc["speed"][0]["steps"] == 201 and doc["speed"][0]["iterations"] >= 1
    assert doc["seams"][0]["windows"] == 2 and doc["seams"][0]["max_seam_z"] < 1.0
