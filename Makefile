# mbde developer entry points. Both targets bootstrap .venv (standard-library venv)
# and `pip install -e '.[test]'` when setup.py changed since the last install.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv clean

$(STAMP): setup.py setup.cfg
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) -m mbde_core.demo

test: $(STAMP)
	$(PY) -m pytest -q test

clean:
	rm -rf $(VENV) build install log .pytest_cache
