"""Every shell, YAML and Python block of the guides in docs/ runs (test/docblocks.py): the
YAML files are written, the `mbde` commands run on them, the ROS lines are checked against
the launch files and the parameter schema, the Python examples execute."""
import glob
import os

import pytest

from conftest import REPO
from docblocks import blocks, run_page

PAGES = sorted(glob.glob(os.path.join(REPO, "docs", "**", "*.md"), recursive=True))
PAGES = [p for p in PAGES if "/_build/" not in p and "/results/" not in p]
# pages whose blocks may be marked {.no-run}, and how many: ROS workspace and cluster set-up
# lines that need a ROS installation or other machines
NO_RUN_ALLOWED = {"guides/live.md": 3, "guides/many-runs.md": 1}


@pytest.mark.parametrize("path", PAGES, ids=lambda p: os.path.relpath(p, os.path.join(REPO, "docs")))
def test_page_blocks_run(path, tmp_path):
    rel = os.path.relpath(path, os.path.join(REPO, "docs"))
    text = open(path, encoding="utf-8").read()
    norun = sum(b.norun for b in blocks(text))
    assert norun <= NO_RUN_ALLOWED.get(rel, 0), f"{rel}: {norun} blocks marked {{.no-run}}"
    run_page(text, tmp_path, rel)
