"""`mbde bench NAME --results DIR` writes DIR/NAME.md: the machine, date and commit at the
top, then the bench's tables as Markdown (mbde_bench/results.py)."""
import os

from conftest import run_mbde
from mbde_bench.results import text_to_markdown


def test_aligned_columns_become_markdown_tables():
    text = ("us per filter step\nobserver     four mean    median\nukf               536       520\n"
            "errorekf           82        80\n\nnote: a single line")
    md = text_to_markdown(text)
    assert "| observer | four mean | median |\n|---|---|---|\n| ukf | 536 | 520 |\n| errorekf | 82 | 80 |" in md
    assert "```text\nus per filter step\n```" in md and "note: a single line" in md


def test_bench_writes_its_results_page(tmp_path):
    proc = run_mbde("bench", "speed", "--duration", "0.1", "--estimators", "errorekf", "--no-filterpy",
                    "--results", tmp_path / "results")
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "results" / "speed.md").read_text()
    assert page.startswith("# `mbde bench speed`")
    for row in ("| command | `mbde bench speed --duration 0.1", "| machine | ", " cores (", "| date | 20",
                "| commit | `", "| load average | "):
        assert row in page, row
    assert "| errorekf |" in page  # the printed table, as a Markdown table


def test_every_bench_takes_results():
    for name in ("accuracy", "speed", "pf", "adekf", "identify", "replay", "vi", "smoother", "faults", "transfer"):
        proc = run_mbde("bench", name, "--help")
        assert proc.returncode == 0 and "--results DIR" in proc.stdout, name
    assert os.path.isfile(os.path.join(os.path.dirname(__file__), os.pardir, "mbde_bench", "results.py"))
