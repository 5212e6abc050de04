"""Results pages: a benchmark's tables as Markdown in docs/results/<name>.md, headed by the
machine, the date and the commit that produced them (the README links them; measurement
logs never go into the README)."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def machine() -> str:
    """CPU model, cores, OS and Python (and the load average: the machine may be shared)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    load = f", load average {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else ""
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}, Python {platform.python_version()}{load}"


def commit() -> str:
    """The repository's commit (short hash, ``-dirty`` with uncommitted changes), or 'unknown'."""
    try:
        head = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head + ("-dirty" if dirty else "")) or "unknown"


def results_path(name: str) -> str | None:
    """docs/results/<name>.md of the source tree (None when mbde runs from an installed package)."""
    docs = os.path.join(REPO, "docs")
    return os.path.join(docs, "results", f"{name}.md") if os.path.isdir(docs) else None


def write_page(name: str, title: str, command: str, body: str, path: str | None = None) -> str | None:
    """Write the page (machine, date, commit, the command, then ``body``); returns its path."""
    path = path or results_path(name)
    if path is None:
        return None
    os.makedirs(os.path.dirname(path), exist_ok=True)
    head = (f"# {title}\n\n"
            f"- machine: {machine()}\n"
            f"- date: {datetime.datetime.now().astimezone().strftime('%Y-%m-%d %H:%M %Z')}\n"
            f"- commit: {commit()}\n"
            f"- command: `{command}`\n\n")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(head + body.rstrip() + "\n")
    return path


def table(header: list[str], rows: list[list]) -> str:
    """A Markdown table."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out) + "\n"
