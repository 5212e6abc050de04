"""One rule for every output of the mbde commands (mbde_core.cli.outputs): an existing
output is replaced only with --force, --force never deletes a folder of something else,
and nothing is written into the source tree by default."""
import os

import pytest

from conftest import REPO, mech_path, run_mbde
from mbde_core.cli.outputs import bag_like, check_output_file, prepare_output_dir, results_like
from mbde_core.errors import DataError


def test_output_file_rule(tmp_path):
    f = tmp_path / "a.csv"
    check_output_file(f, False)  # absent: fine
    f.write_text("x")
    with pytest.raises(DataError, match="exists \\(use --force to replace it\\)"):
        check_output_file(f, False)
    check_output_file(f, True)
    with pytest.raises(DataError, match="is a directory"):
        check_output_file(tmp_path, True)
    with pytest.raises(DataError, match="does not exist"):
        check_output_file(tmp_path / "no" / "a.csv", True)


def test_output_dir_rule(tmp_path):
    d = tmp_path / "rep"
    prepare_output_dir(d, False, "replay", results_like("metrics.json"))
    assert d.is_dir()
    (d / "metrics.json").write_text("{}")
    with pytest.raises(DataError, match="exists \\(use --force"):
        prepare_output_dir(d, False, "replay", results_like("metrics.json"))
    prepare_output_dir(d, True, "replay", results_like("metrics.json"))
    assert d.is_dir() and not os.listdir(d)
    home = tmp_path / "home"
    (home / "src").mkdir(parents=True)
    (home / "src" / "keep.py").write_text("precious")
    for kind, like in (("replay", results_like("metrics.json")), ("bag", bag_like)):
        with pytest.raises(DataError, match=f"does not hold an earlier {kind}; not replacing it"):
            prepare_output_dir(home, True, kind, like)
    assert (home / "src" / "keep.py").read_text() == "precious"


def test_learn_map_writes_into_the_current_directory_and_never_replaces_silently(tmp_path):
    (tmp_path / "pendulum.map.npz").write_text("an earlier map")
    proc = run_mbde("learn-map", mech_path("pendulum"), cwd=tmp_path)
    assert proc.returncode == 2 and f"--out: pendulum.map.npz exists (use --force" in proc.stderr
    assert (tmp_path / "pendulum.map.npz").read_text() == "an earlier map"
    assert not os.path.exists(os.path.join(REPO, "config", "mechanisms", "pendulum.map.npz"))


def test_bench_refuses_a_non_empty_out_without_force(tmp_path):
    (tmp_path / "old.csv").write_text("x")
    proc = run_mbde("bench", "speed", "--out", tmp_path, "--duration", "0.1", "--estimators", "dekf")
    assert proc.returncode == 2 and "exists and is not empty (use --force" in proc.stderr
