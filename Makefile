# mbde developer entry points. Both targets bootstrap .venv (standard-library venv)
# and `pip install -e '.[test]'` when setup.py changed since the last install.
# `make test` then runs test/ros in .venv-ros (real rclpy wheels and mbde_msgs, made
# by tools/ros_venv.sh): a venv of its own, since those wheels re-exec every Python.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
ROS_VENV  := .venv-ros
ROS_STAMP := $(ROS_VENV)/.installed

.PHONY: demo live test docs venv ros-venv clean

$(STAMP): setup.py setup.cfg
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

$(ROS_STAMP): tools/ros_venv.sh tools/ros_venv.constraints.txt setup.py setup.cfg $(shell find mbde_msgs tools/tf2_msgs -type f)
	PYTHON=$(PYTHON) bash tools/ros_venv.sh
	touch $(ROS_STAMP)

ros-venv: $(ROS_STAMP)

demo: $(STAMP)
	$(PY) -m mbde_core.demo

# The live loop as real rclpy processes (mbde live, the nodes of launch/sim_demo.launch.py);
# Ctrl-C stops it. Options: make live LIVE_ARGS="scenarios/fourbar_gyro.yaml --estimators ukf,errorekf"
LIVE_ARGS ?=
live: $(STAMP)
	$(MAKE) --no-print-directory ros-venv
	$(ROS_VENV)/bin/python -m mbde_core.cli live $(LIVE_ARGS)

test: $(STAMP)
	$(PY) -m pytest -q test --ignore=test/ros
	$(MAKE) --no-print-directory ros-venv
	$(ROS_VENV)/bin/python -m pytest -q test/ros

# The documentation site (Sphinx + MyST, docs/conf.py) into docs/_build/html; warnings are
# errors, as in test/test_docs.py.
docs: $(STAMP)
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html
	@echo "docs: open docs/_build/html/index.html"

clean:
	rm -rf $(VENV) build install log .pytest_cache docs/_build
