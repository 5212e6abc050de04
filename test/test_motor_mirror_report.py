"""Issue 42 item 3: on the speed-step slider-crank started at rest at pi/2 (a rod gyroscope:
theta and pi - theta read the same) with the motor's torque unknown, ``mbde replay`` says,
before the run (stdout) and in its report, that the declared motor limit explains the
mirrored motion; with the torque measured it does not."""
from __future__ import annotations

import copy

import yaml
from conftest import run_mbde

from mbde_core.config.paths import config_path


def _replay(tmp_path, name: str, measured: bool) -> tuple[str, str]:
    doc = yaml.safe_load(open(config_path("bench", "motors", "slider_crank_speedstep_effort.yaml"), encoding="utf-8"))
    doc = copy.deepcopy(doc)
    doc["duration"] = 0.2
    if not measured:
        doc["sensors"] = [s for s in doc["sensors"] if s["type"] != "effort"]
    scenario = tmp_path / f"{name}.yaml"
    scenario.write_text(yaml.safe_dump(doc), encoding="utf-8")
    sim = run_mbde("simulate", scenario, "--out", tmp_path / f"{name}_bag")
    assert sim.returncode == 0, sim.stderr
    rep = run_mbde("replay", tmp_path / f"{name}_bag", "--estimators", "ukf", "--no-plots", "--out", tmp_path / name)
    assert rep.returncode == 0, rep.stderr
    return rep.stdout + rep.stderr, (tmp_path / name / "report.md").read_text(encoding="utf-8")


def test_the_mirror_warning_is_printed_first_and_kept_in_the_report(tmp_path):
    out, report = _replay(tmp_path, "unknown", measured=False)
    first = out.strip().splitlines()[0]
    assert first.startswith("warning:") and "mirror theta -> pi - theta" in first and "coin toss" in first
    assert "(suitability) ukf:" in report and "the unknown forces within the declared limits explain it" in report
    out, report = _replay(tmp_path, "measured", measured=True)
    assert "pi - theta" not in out and "pi - theta" not in report
