"""The documentation site builds with Sphinx + MyST with warnings as errors (as `make docs`):
a broken cross-reference, a missing page in a toctree or a generated reference that fails
to render fails the test."""
import os
import subprocess
import sys

import pytest

from conftest import REPO

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")


def test_docs_build_without_warnings(tmp_path):
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(tmp_path / "doctrees"), os.path.join(REPO, "docs"), str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (out / "index.html").is_file()
