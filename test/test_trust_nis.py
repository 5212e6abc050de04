"""Table 1 of ``mbde bench trust``: the NIS / dof column (the readings' own test) from the runs' rows."""
from mbde_bench.trust_tables import calibration, table1


def _row(nees, nis, nis_dof, run):
    return {"case": "c", "model": "exact", "kind": "nominal", "run": run, "estimator": "ukf", "status": "ok",
            "nees": nees, "dof": 2, "nis": nis, "nis_dof": nis_dof, "flag": "", "coverage": 0.95}


def test_nis_per_dof_is_the_median_over_runs():
    rows = [_row(1.0, 0.2, 1.0, 0), _row(2.0, 1.2, 2.0, 1), _row(3.0, None, None, 2)]
    (s,) = calibration(rows)
    assert s["nees_per_dof"] == 1.0
    assert s["nis_per_dof"] == 0.4  # median of 0.2 and 0.6; a run without readings' NIS is left out
    assert "| 1.00 | 0.40 | 95.0 |" in table1([s])


def test_no_nis_prints_a_dash():
    (s,) = calibration([_row(1.0, None, None, 0)])
    assert s["nis_per_dof"] is None
    assert "| 0.50 | - | 95.0 |" in table1([s])
