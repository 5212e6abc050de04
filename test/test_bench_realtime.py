"""`mbde bench realtime` end to end on a tiny matrix (speeds are reported, never asserted)."""
import json

from conftest import run_mbde


def test_bench_realtime_tiny(tmp_path):
    out = tmp_path / "rt"
    proc = run_mbde("bench", "realtime", "--scenarios", "fourbar_gyro", "--estimators", "ukf,errorekf,adekf",
                    "--duration", "0.3", "--warmup", "0.05", "--threads-scenario", "none", "--acquisition-seeds", "0",
                    "--out", out)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((out / "realtime.json").read_text())
    rows = {r["estimator"]: r for r in doc["rows"]}
    assert set(rows) == {"ukf", "errorekf", "adekf"}
    assert "skipped" in rows["adekf"] and "accelerations" in rows["adekf"]["skipped"]  # refused as replay refuses it
    for name in ("ukf", "errorekf"):
        r = rows[name]
        assert r["step_ms"] == 5.0 and r["sensor_period_ms"] == 5.0 and r["duration_s"] == 0.3  # the scenario's 5 ms grid
        assert r["steps"] == 61 and r["cpu_s"] > 0 and r["ratio"] == r["cpu_s"] / r["duration_s"]
        assert r["pass"] == (r["ratio"] <= 0.25)
    md = (out / "realtime.md").read_text()
    assert "| fourbar_gyro | ukf | 5 | 5 |" in md and "n/a: adekf needs a sensor that reads accelerations" in md
    assert doc["machine"]["cpu"] and doc["machine"]["load_start"] and "CPU " in md.splitlines()[0]
    assert not list(tmp_path.glob("**/.realtime*")) and "threads" not in doc  # bags in a temporary folder, removed


def test_bench_realtime_pf_threads_and_unknown_scenario(tmp_path):
    proc = run_mbde("bench", "realtime", "--scenarios", "pf_sim", "--estimators", "errorekf", "--duration", "0.1",
                    "--warmup", "0", "--threads-scenario", "pf_sim", "--threads-duration", "0.1", "--acquisition-seeds", "0",
                    "--out", tmp_path / "rt")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "rt" / "realtime.json").read_text())
    runs = doc["threads"]["runs"]
    assert set(runs) == {"1", "2"} and all(r["cpu_s"] > 0 and r["steps"] == runs["1"]["steps"] for r in runs.values())
    assert "PF thread scaling (pf_sim" in proc.stdout and "speed-up wall(1) / wall(2)" in proc.stdout
    bad = run_mbde("bench", "realtime", "--scenarios", "nosuch", "--out", tmp_path / "bad")
    assert bad.returncode == 2 and "no shipped scenario 'nosuch'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "bad").exists()


def test_bench_realtime_tables_name_the_failures_and_the_acquisition_rate():
    from mbde_bench.realtime import tables

    doc = {"machine": {"cpu": "X", "cores": 2, "blas_threads": "1", "load_start": "1", "load_end": "2"},
           "duration_s": 1.0, "warmup_s": 0.1, "acquisition_seeds": 20, "acquisition_duration_s": 2.0, "acquisition": None,
           "rows": [{"scenario": "s", "estimator": "ukf", "step_ms": 1.0, "sensor_period_ms": 1.0, "cpu_per_step_us": 500.0,
                     "ratio": 0.5, "pass": False}]}
    text = tables(doc)
    assert "| s | ukf | 1 | 1 | 500 | 0.500 | FAIL |" in text and "over it s/ukf 0.50" in text
    assert "PF acquisition" not in text  # no acquisition runs: no section
    doc["acquisition"] = {"s": {"acquired": "19/20", "t_acq_median": 0.3, "t_acq_max": 1.4}}
    assert "| s | 19/20 | 0.30 | 1.40 |" in tables(doc)
