"""The import contracts of .importlinter (DESIGN.md "Layers") hold: `make test` fails on an
upward import, an import cycle, the core importing the nodes, the benchmarks or rclpy."""
from __future__ import annotations

import os
import subprocess
import sys

from conftest import REPO

CONFIG = os.path.join(REPO, ".importlinter")
LINT = os.path.join(os.path.dirname(sys.executable), "lint-imports")


def lint(config: str) -> subprocess.CompletedProcess:
    """`lint-imports --config CONFIG` on this checkout (its packages first on the path)."""
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([LINT, "--config", config, "--no-cache"], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=600)


def test_contracts_kept():
    out = lint(CONFIG)
    assert out.returncode == 0, out.stdout[-6000:] + out.stderr[-2000:]
    assert "0 broken" in out.stdout


def test_a_broken_contract_fails(tmp_path):
    """The check is live: a contract the code breaks (cli imports errors) makes it fail."""
    with open(CONFIG) as f:
        text = f.read()
    text += ("\n[importlinter:contract:broken-on-purpose]\nname = broken on purpose\ntype = forbidden\n"
             "source_modules =\n    mbde_core.cli\nforbidden_modules =\n    mbde_core.errors\n")
    config = tmp_path / "importlinter.ini"
    config.write_text(text)
    out = lint(str(config))
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-2000:]
    assert "broken on purpose BROKEN" in out.stdout
