"""The README's tour runs as written (test/docblocks.py): its YAML blocks are written to
the files their first comment names, its `mbde ...` lines run in that folder, the live
launch line is checked against the launch file; the replays track the simulated truth
with consistent filters."""
import json
import os

from conftest import REPO
from docblocks import blocks, run_page

SECTION = "## A 10-minute tour: from your linkage to a replay and a live launch"


def tour() -> str:
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    assert SECTION in text
    return text.split(SECTION, 1)[1].split("\n## ", 1)[0]


def test_readme_tour_runs_as_written(tmp_path):
    text = tour()
    assert not any(b.norun for b in blocks(text)), "every block of the tour runs"
    counts = run_page(text, tmp_path, "README.md tour")
    assert counts["yaml"] == 3 and counts["mbde"] >= 5 and counts["ros2"] == 1
    assert (tmp_path / "my_tables" / "ukf.csv").is_file()  # mbde export
    for out, names in (("my_replay", ("ukf", "errorekf")), ("robot_replay", ("ukf",))):
        doc = json.loads((tmp_path / out / "metrics.json").read_text())
        for name in names:
            m = doc["estimators"][name]["metrics"]
            assert m["rmse"]["z"][0] < 0.01  # rad: the crank angle
            # consistent: the transfer bench's acceptance band [0.3, 3] x 2g (g = 1 DOF)
            assert 0.6 < m["nees"]["mean"] < 6
        assert (tmp_path / out / "estimates" / "metadata.yaml").is_file()


def test_readme_size_and_make_targets():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    assert len(text.splitlines()) <= 400
    assert "stop " not in text.lower().replace("stops it", "")  # no development history
    for target in ("demo", "test", "live", "docs"):
        assert f"make {target}" in text
