"""One BLAS thread for the estimators in library use (mbde_core.estimators.blas_threads):
a program that imports mbde_core without OPENBLAS_NUM_THREADS gets BLAS on one thread from
the first stage step on; a user's own choice (the variable set) is left alone. Each case
runs in a fresh interpreter: the BLAS libraries read the variables when they load."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

threadpoolctl = pytest.importorskip("threadpoolctl")

SCRIPT = f"""
import json
import numpy as np, scipy.linalg
from threadpoolctl import threadpool_info
from mbde_core.scenario.scenario import load_scenario
from mbde_core.estimators import make_estimator
from mbde_core.estimators.configure import configure, defaults
from mbde_core.estimators.stage.core import EstimatorStage
from mbde_core.estimators.base import InitialState
from mbde_core.types import Measurement

before = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
sc = load_scenario("{REPO}/config/scenarios/fourbar_gyro.yaml")
mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
est = make_estimator("ukf", mech, sensors, configure("ukf", defaults("ukf"), mech, sensors, None))
init = InitialState(np.array([0.5]), np.array([0.0]), np.array([0.05]), np.array([0.1]))
stage = EstimatorStage.for_estimator(est, lambda t: init)
name = next(iter(sensors)).name
for k in range(4):
    stage.feed(Measurement(0.005 * k, name, np.zeros(next(iter(sensors)).dim)))
stage.flush()
after = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
print(json.dumps({{"before": before, "after": after}}))
"""


def _run(extra_env: dict) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")}
    env.update(extra_env, PYTHONPATH=REPO)
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_library_use_runs_blas_on_one_thread():
    res = _run({"OPENBLAS_NUM_THREADS": ""})  # unset (empty counts as unset for both)
    assert res["after"] and all(n == 1 for n in res["after"])  # threads


def test_a_users_blas_threads_are_left_alone():
    res = _run({"OPENBLAS_NUM_THREADS": "2"})
    assert res["after"] == res["before"]  # threads: the user's setting
