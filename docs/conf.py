"""Sphinx configuration of the mbde documentation site (`make docs`, test/test_docs.py).

Why Sphinx with MyST-Parser: it is the toolchain rosdoc2 uses to build the documentation
of ROS 2 packages (Sphinx, Markdown pages through MyST), so the same pages build on
docs.ros.org-style infrastructure and locally without ROS; both are well kept, on PyPI
(the `docs` extra of setup.py) and in Debian. The guides are plain Markdown that reads
well on GitHub too; the references are generated from the code at build time by the
local extension ``_ext/mbde_docs`` (mechanism and sensor YAML from the loaders' schemas,
estimator options, ROS nodes/topics/parameters, the CLI from argparse), so they cannot
drift from it.

Build: ``make docs`` (HTML into docs/_build/html) or
``python -m sphinx -W --keep-going -b html docs OUT``; warnings are errors in the tests.
"""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "_ext"))
sys.path.insert(0, os.path.dirname(HERE))  # the repository: mbde_core, mbde_bench

project = "mbde"
author = "mbde developers"
copyright = "mbde developers, BSD-3-Clause"
extensions = ["myst_parser", "mbde_docs"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "_ext", "README.md"]
root_doc = "index"
myst_enable_extensions = ["dollarmath", "colon_fence", "attrs_block"]
myst_heading_anchors = 3
html_theme = "alabaster"
html_title = "mbde"
html_theme_options = {"description": "Multibody-dynamics-based state estimation for planar linkages"}
suppress_warnings = []
