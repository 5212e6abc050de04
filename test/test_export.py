"""mbde export: an estimates bag as per-estimator tables, no message types to register."""
import csv
import json
import os
import re

import numpy as np
import pytest

from conftest import REPO, run_mbde
from mbde_core.replay.export import estimate_tables


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    assert run_mbde("simulate", "config/scenarios/pf_sim.yaml", "--out", d / "bag", "--set", "duration=0.4").returncode == 0
    proc = run_mbde("replay", d / "bag", "--estimators", "ukf,errorekf,pf", "--out", d / "replay", "--no-plots")
    assert proc.returncode == 0, proc.stderr
    return d


def test_tables_hold_state_sigmas_branches_and_diagnostics(replay):
    tables = estimate_tables(replay / "replay" / "estimates")
    assert set(tables) == {"ukf", "errorekf", "pf"}
    for name, cols in tables.items():
        t = cols["t_rel"]
        assert t[0] == 0.0 and np.all(np.diff(t) > 0) and t[-1] == pytest.approx(0.4, abs=0.02)
        assert np.all(cols["sd_z_theta"] > 0) and np.all(np.isfinite(cols["z_theta"]))
        assert {"zd_theta", "zdd_theta", "sd_zd_theta", "q_P1.x", "qd_theta", "branch"} <= set(cols)
    pf = tables["pf"]
    assert pf["p_branch0"] + pf["p_branch1"] == pytest.approx(np.ones_like(pf["t"]))
    assert np.nanmax(pf["ess"]) > 0 and "unique_particles" in pf
    # the same numbers as the replay's metrics: its final estimate is the table's last row
    doc = json.loads((replay / "replay" / "metrics.json").read_text())
    assert doc["estimators"]["ukf"]["metrics"]["steps"] >= len(tables["ukf"]["t"]) > 0


def test_cli_writes_csv_and_summary(replay):
    out = replay / "tables"
    proc = run_mbde("export", replay / "replay" / "estimates", "--out", out)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(open(out / "ukf.csv")))
    assert len(rows) == len(estimate_tables(replay / "replay" / "estimates", ["ukf"])["ukf"]["t"])
    assert float(rows[0]["t_rel"]) == 0.0 and float(rows[-1]["sd_z_theta"]) > 0
    summary = {r["estimator"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    assert set(summary) == {"ukf", "errorekf", "pf"} and float(summary["ukf"]["fused"]) > 0
    # an existing export is replaced only with --force; a bag without estimates is one line, exit 2
    assert run_mbde("export", replay / "replay" / "estimates", "--out", out).returncode == 2
    assert run_mbde("export", replay / "replay" / "estimates", "--out", out, "--force").returncode == 0
    bad = run_mbde("export", replay / "bag", "--out", replay / "t2")
    assert bad.returncode == 2 and "no estimates" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_parquet(replay):
    pq = pytest.importorskip("pyarrow.parquet")
    out = replay / "parquet"
    assert run_mbde("export", replay / "replay" / "estimates", "--out", out, "--format", "parquet",
                    "--estimators", "ukf").returncode == 0
    table = pq.read_table(out / "ukf.parquet")
    assert table.num_rows > 0 and "sd_z_theta" in table.column_names


def _layout_panels(node):
    if isinstance(node, str):
        return [node]
    return _layout_panels(node["first"]) + _layout_panels(node["second"])


def test_foxglove_layout_names_what_replay_writes(replay):
    """config/foxglove/estimates.json opens an estimates bag at a glance: every panel of its
    layout is configured, and every topic and message field it names is in the bag that
    `mbde replay --estimators ukf,errorekf,pf` writes (and in mbde_msgs' definitions)."""
    from mbde_core.rosio.bag_reader import BagReader

    layout = json.load(open(os.path.join(REPO, "config", "foxglove", "estimates.json")))
    panels = _layout_panels(layout["layout"])
    assert sorted(panels) == sorted(layout["configById"])
    with BagReader(replay / "replay" / "estimates") as reader:
        types = {t: typ for t, typ, _ in reader.topics()}
    fields = {}
    for typ in ("MechanismState", "ParticleSet"):
        text = open(os.path.join(REPO, "mbde_msgs", "msg", typ + ".msg")).read()
        fields["mbde_msgs/msg/" + typ] = set(re.findall(r"^\S+\s+(\w+)", text, re.M))
    named = 0
    for pid, cfg in layout["configById"].items():
        topics = list(cfg.get("topics", {}))
        paths = [p["value"] for p in cfg.get("paths", [])] + ([cfg["topicPath"]] if "topicPath" in cfg else [])
        for path in paths:
            topic, _, field = path.partition(".")
            topics.append(topic)
            if field:
                assert re.match(r"\w+", field).group(0) in fields[types[topic]], f"{pid}: {path}"
        for topic in topics:
            assert topic in types, f"{pid}: {topic} is not in the estimates bag ({sorted(types)})"
            named += 1
    assert named >= 10
