"""Results pages: a bench's tables as Markdown with the machine, date and commit at the top.

``mbde bench NAME --results DIR`` (every bench, wired in :mod:`mbde_bench.cli`) writes
``DIR/NAME.md``: a header naming the command, the machine (CPU model, cores, load average
at the start and the end), the date and the commit, then the bench's tables: the Markdown
files the bench wrote into ``--out`` (``<name>.md`` or ``tables.md``, or the module's
``RESULT_FILES``), else what it printed, with
every run of aligned columns turned into a Markdown table. The documentation site lists
the pages of ``docs/results/`` (docs/results/index.md).

:func:`write_results_page` is the helper for a bench that builds its tables itself.
"""
from __future__ import annotations

import contextlib
import datetime
import io
import os
import platform
import re
import subprocess
import sys

from mbde_core import __version__

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else platform's)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    try:
        return ", ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def commit() -> str:
    """``<hash>`` of the code measured (``+ local changes`` if the tree differs), or the version."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short=12", "HEAD"], capture_output=True,
                              text=True, timeout=10)
        if head.returncode == 0:
            dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return head.stdout.strip() + (" + local changes" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass

    return f"mbde {__version__} (not a git checkout)"


def header(name: str, command: str, load_start: str | None = None) -> str:
    now = datetime.datetime.now().astimezone()
    return "\n".join([
        f"# `mbde bench {name}`", "",
        "| | |", "|---|---|",
        f"| command | `{command}` |",
        f"| machine | {cpu_model()}, {os.cpu_count()} cores ({platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}) |",
        f"| load average | {load_start + ' at the start, ' if load_start else ''}{load_average()} at the end |",
        f"| date | {now:%Y-%m-%d %H:%M %Z} |",
        f"| commit | `{commit()}` |",
        "", "Written by the bench command; figures measured on another machine or under another load differ.", "",
    ])


def text_to_markdown(text: str) -> str:
    """Printed output as Markdown: runs of >= 2 lines that split into the same number (>= 3)
    of columns on 2+ spaces become tables (the first line the header); the rest stays text."""
    lines = text.rstrip().splitlines()
    out, plain, i = [], [], 0

    def cols(line):
        return [c for c in re.split(r"\s{2,}", line.strip()) if c] if line.strip() else []

    def flush():
        while plain and not plain[-1].strip():
            plain.pop()
        if any(p.strip() for p in plain):
            out.append("```text\n" + "\n".join(plain).strip("\n") + "\n```\n")
        plain.clear()

    while i < len(lines):
        n = len(cols(lines[i]))
        j = i
        while j < len(lines) and n >= 3 and len(cols(lines[j])) == n:
            j += 1
        if j - i >= 2:
            flush()
            rows = [cols(x) for x in lines[i:j]]
            body = ["| " + " | ".join(r) + " |" for r in rows]
            out.append("\n".join([body[0], "|" + "---|" * n] + body[1:]) + "\n")
            i = j
        else:
            plain.append(lines[i])
            i += 1
    flush()
    return "\n".join(out)


def write_results_page(name: str, tables: list[tuple[str, str]], out_dir: str, command: str | None = None,
                       load_start: str | None = None) -> str:
    """Write ``out_dir/<name>.md``: the header, then each (title, Markdown) of ``tables``.
    Returns the path."""
    command = command or "mbde bench " + name
    parts = [header(name, command, load_start)]
    for title, body in tables:
        if title:
            parts.append(f"## {title}\n")
        parts.append(body.rstrip() + "\n")
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{name}.md")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("\n".join(parts))
    return path


class Tee(io.TextIOBase):
    """A stdout that also keeps what was written."""

    def __init__(self, stream):
        self.stream, self.parts = stream, []

    def write(self, s):
        self.parts.append(s)
        return self.stream.write(s)

    def flush(self):
        self.stream.flush()

    def text(self) -> str:
        return "".join(self.parts)


@contextlib.contextmanager
def captured():
    """Capture what the bench prints (still printing it)."""
    tee = Tee(sys.stdout)
    with contextlib.redirect_stdout(tee):
        yield tee


def bench_page(name: str, module, args, printed: str, load_start: str) -> str:
    """The page of one bench run: its Markdown tables in --out if it wrote them, else its output."""
    tables = []
    out = getattr(args, "out", None)
    for fname in getattr(module, "RESULT_FILES", (f"{name}.md", "tables.md")):
        path = os.path.join(out, fname) if out else None
        if path and os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                tables.append(("", _demote_headings(fh.read())))
    if not tables:
        tables.append(("Output", text_to_markdown(printed)))
    command = "mbde " + " ".join(sys.argv[1:]) if sys.argv[1:2] == ["bench"] else f"mbde bench {name}"
    return write_results_page(name, tables, args.results, command, load_start)


def _demote_headings(text: str) -> str:
    """A bench's own Markdown under the page's title: '# x' -> '## x', '## x' -> '### x'."""
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.M)


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"
