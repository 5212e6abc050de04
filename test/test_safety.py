"""Data safety, one test per row of the table of issue 40 (mbde_bench/safety_cases.py, the
cases `mbde bench safety` prints): outputs never delete or overwrite what a command did not
create, outputs appear whole or not at all, Ctrl-C and SIGTERM stop every command and its
worker processes cleanly (exit 130 / 143, one line), bad numbers and unusable bags are one
line with exit status 2 before anything runs. Each case runs ``mbde`` for real in a
process (session) of its own; the assertions are on exit statuses, messages, files and
processes left, never on timing."""
import pytest

from mbde_bench.safety_cases import CASES, Workspace


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return Workspace(str(tmp_path_factory.mktemp("safety")))


@pytest.mark.parametrize("name,case", CASES, ids=[fn.__name__ for _, fn in CASES])
def test_row(ws, name, case):
    now, ok = case(ws)
    print(f"\n{name}: {now}")
    assert ok, f"{name}: {now}"


def test_bench_safety_runs_a_row_and_writes_its_table(tmp_path):
    from conftest import run_mbde

    proc = run_mbde("bench", "safety", "--only", "15", "--out", tmp_path / "s")
    assert proc.returncode == 0, proc.stderr
    assert "1 of 1 rows as required" in proc.stdout
    assert "| 15 | bare mbde |" in (tmp_path / "s" / "safety.md").read_text()
