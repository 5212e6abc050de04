"""One rule for every output of the mbde commands (mbde_core.cli.outputs.Output): nothing
the command did not create is deleted or overwritten; --force replaces only an earlier,
unchanged output of the same command (its manifest or sidecar); outputs appear complete
or not at all (staged in a hidden sibling, renamed into place); a second run into the
same output is refused while the first holds its lock; nothing is written into the
source tree by default."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, mech_path, run_mbde
from mbde_core.cli.outputs import MANIFEST, Output, check_not_input, sidecar
from mbde_core.errors import DataError
from mbde_core.rosio.bag_writer import INCOMPLETE_MARKER


def write_dir(path, command="replay", files=("metrics.json",), force=False, inputs=()):
    before = listing(path)
    with Output(path, command, force=force, inputs=inputs) as out:
        for f in files:
            with open(os.path.join(out.tmp, f), "w") as fh:
                fh.write(f)
        assert listing(path) == before  # nothing at --out until the commit
        out.commit()
    return out


def listing(path):
    return sorted(os.listdir(path)) if os.path.isdir(path) else None


def test_a_directory_output_is_staged_then_renamed_with_its_manifest_last(tmp_path):
    d = tmp_path / "rep"
    out = write_dir(d, files=("metrics.json", "report.md"))
    assert sorted(os.listdir(tmp_path)) == ["rep"]  # no staging folder, no lock left
    doc = json.loads((d / MANIFEST).read_text())
    assert doc["tool"] == "mbde" and doc["command"] == "replay" and doc["files"] == ["metrics.json", "report.md"]
    assert out.shown(os.path.join(out.tmp, "metrics.json")) == str(d / "metrics.json")
    with pytest.raises(DataError, match="exists \\(use --force to replace it\\)"):
        write_dir(d)
    write_dir(d, files=("summary.csv",), force=True)  # an earlier output of the command: replaced whole
    assert sorted(os.listdir(d)) == [MANIFEST, "summary.csv"]


def test_force_never_replaces_what_mbde_did_not_write(tmp_path):
    home = tmp_path / "home"
    (home / "src").mkdir(parents=True)
    (home / "src" / "keep.py").write_text("precious")
    with pytest.raises(DataError, match="carries no .mbde-output.json of an earlier mbde output; not replacing it"):
        write_dir(home, force=True)
    d = tmp_path / "rep"
    write_dir(d)
    (d / "notes.txt").write_text("mine")
    with pytest.raises(DataError, match=r"holds files mbde did not write \(notes.txt\)"):
        write_dir(d, force=True)
    os.remove(d / "notes.txt")
    with pytest.raises(DataError, match="holds the output of `mbde replay`, not of `mbde smooth`"):
        write_dir(d, "smooth", force=True)
    assert (home / "src" / "keep.py").read_text() == "precious" and (d / "metrics.json").exists()
    (tmp_path / "empty").mkdir()  # an empty folder (made for the output): nothing to lose, used
    write_dir(tmp_path / "empty")
    assert sorted(os.listdir(tmp_path / "empty")) == [MANIFEST, "metrics.json"]


def test_a_file_output_has_a_sidecar_and_is_replaced_only_unchanged(tmp_path):
    f = tmp_path / "tau.csv"
    for force in (False, True):
        with Output(f, "inverse-dynamics", force=force, kind="file") as out:
            assert os.path.dirname(out.tmp) != str(tmp_path) and os.path.basename(out.tmp) == "tau.csv"
            with open(out.tmp, "w") as fh:
                fh.write("t,force\n")
            out.commit()
    assert sorted(os.listdir(tmp_path)) == [os.path.basename(sidecar(str(f))), "tau.csv"]
    f.write_text("t,force\nedited by hand\n")
    with pytest.raises(DataError, match="was changed since mbde wrote it; not replacing it"):
        Output(f, "inverse-dynamics", force=True, kind="file").open()
    other = tmp_path / "a.csv"
    other.write_text("x")
    with pytest.raises(DataError, match="has no .a.csv.mbde-output.json marker"):
        Output(other, "inverse-dynamics", force=True, kind="file").open()
    with pytest.raises(DataError, match="is a directory"):
        Output(tmp_path, "render", force=True, kind="file").open()


def test_out_equal_to_inside_or_above_an_input_is_refused_before_anything_is_touched(tmp_path):
    bag = tmp_path / "x" / "bag"
    bag.mkdir(parents=True)
    (bag / "metadata.yaml").write_text("a bag")
    for out, why in ((bag, "is the input"), (bag / "rep", "is inside the input"), (tmp_path / "x", "holds the input"),
                     (tmp_path, "holds the input")):
        with pytest.raises(DataError, match=why):
            Output(out, "replay", force=True, inputs=[str(bag)]).open()
    assert sorted(os.listdir(tmp_path / "x")) == ["bag"] and os.listdir(bag) == ["metadata.yaml"]
    link = tmp_path / "link"
    link.symlink_to(bag)
    with pytest.raises(DataError, match="is the input"):  # through a symbolic link
        check_not_input(str(link), [str(bag)])


def test_out_holding_the_current_directory_is_refused(tmp_path, monkeypatch):
    here = tmp_path / "here"
    here.mkdir()  # empty: would otherwise be used
    monkeypatch.chdir(here)
    for out in (".", str(tmp_path)):
        with pytest.raises(DataError, match="holds the current directory"):
            Output(out, "replay", force=True).open()
    assert os.listdir(tmp_path) == ["here"]


def test_an_abandoned_output_leaves_the_earlier_one_and_the_missing_parents_are_removed(tmp_path):
    d = tmp_path / "rep"
    write_dir(d)
    with pytest.raises(KeyboardInterrupt):
        with Output(d, "replay", force=True) as out:
            (open(os.path.join(out.tmp, "half.json"), "w")).close()
            raise KeyboardInterrupt
    assert sorted(os.listdir(tmp_path)) == ["rep"] and sorted(os.listdir(d)) == [MANIFEST, "metrics.json"]
    deep = tmp_path / "a" / "b" / "c"
    with Output(deep, "replay"):
        assert (tmp_path / "a" / "b").is_dir()
    assert not (tmp_path / "a").exists()  # failed without a commit: the folders it made are gone too


def test_a_second_run_is_refused_while_the_first_holds_the_lock_and_stale_staging_is_cleaned(tmp_path):
    d = tmp_path / "rep"
    first = Output(d, "replay").open()
    with pytest.raises(DataError, match=f"is being written by another mbde run \\(pid {os.getpid()}\\)"):
        Output(d, "replay", force=True).open()
    first.abort()
    # a staging folder of a killed run (its pid is gone), marked incomplete: removed by the next run
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".rep.part-{int(dead.stdout)}"
    (stale / "rep").mkdir(parents=True)
    (stale / INCOMPLETE_MARKER).write_text("{}")
    mine = tmp_path / ".rep.part-1"  # no marker: not ours, kept
    mine.mkdir()
    write_dir(d)
    assert sorted(os.listdir(tmp_path)) == [".rep.part-1", "rep"]


def test_learn_map_writes_into_the_current_directory_and_never_replaces_silently(tmp_path):
    (tmp_path / "pendulum.map.npz").write_text("an earlier map")
    proc = run_mbde("learn-map", mech_path("pendulum"), cwd=tmp_path)
    assert proc.returncode == 2 and "--out: pendulum.map.npz exists (use --force" in proc.stderr
    proc = run_mbde("learn-map", mech_path("pendulum"), "--force", cwd=tmp_path)
    assert proc.returncode == 2 and "has no .pendulum.map.npz.mbde-output.json marker" in proc.stderr
    assert (tmp_path / "pendulum.map.npz").read_text() == "an earlier map"
    assert not os.path.exists(os.path.join(REPO, "config", "mechanisms", "pendulum.map.npz"))


def test_bench_refuses_a_non_empty_out_without_force(tmp_path):
    (tmp_path / "old.csv").write_text("x")
    proc = run_mbde("bench", "speed", "--out", tmp_path, "--duration", "0.1", "--estimators", "dekf")
    assert proc.returncode == 2 and "exists (use --force" in proc.stderr
    proc = run_mbde("bench", "speed", "--out", tmp_path, "--force", "--duration", "0.1", "--estimators", "dekf")
    assert proc.returncode == 2 and "not replacing it" in proc.stderr and (tmp_path / "old.csv").read_text() == "x"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_an_interrupt_whose_exception_was_lost_still_stops_the_commit(tmp_path):
    """A Ctrl-C that lands in a finalizer raises there, where Python prints "Exception
    ignored" and goes on: the signal is recorded and the output is not put in place."""
    import gc
    import signal

    from mbde_core.runs import stop

    class Finalized:
        def __del__(self):
            stop._on_signal(signal.SIGINT, None)  # what the handler does when SIGINT lands here

    handlers = stop.install()
    try:
        with Output(tmp_path / "rep", "replay") as out:
            Finalized()
            gc.collect()  # its KeyboardInterrupt is raised in __del__: lost
            assert stop.received() == signal.SIGINT
            with pytest.raises(KeyboardInterrupt):
                out.commit()
        assert not os.path.exists(tmp_path / "rep")
    finally:
        stop.restore(handlers)
