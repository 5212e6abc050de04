"""Execution engine of mbde's many-run workloads (replay of many bags and estimators, the
benchmarks' Monte Carlo loops): serial, local processes or a Dask distributed cluster.
See :mod:`mbde_core.runs.engine`."""
from mbde_core.errors import DataError
from mbde_core.runs.engine import Outcome, default_jobs, failures, run_tasks

__all__ = ["Outcome", "add_arguments", "check_options", "default_jobs", "failures", "run_tasks", "options"]

MAX_JOBS = 1024


def _jobs(text: str) -> int:
    import argparse

    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if not 1 <= value <= MAX_JOBS:
        raise argparse.ArgumentTypeError(f"must be in [1, {MAX_JOBS}], got {value}")
    return value


def add_arguments(parser, what: str = "tasks") -> None:
    """The --jobs / --scheduler options shared by every command that runs many tasks."""
    parser.add_argument("--jobs", type=_jobs, default=None,
                        help=f"local worker processes for the {what} (default: CPU count; 1 = serial, in this process)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="run on a Dask distributed cluster instead of local processes "
                             "(optional extra: pip install 'mbde[cluster]')")


def check_options(args) -> None:
    """DataError for --jobs together with --scheduler (--jobs would be ignored)."""
    if getattr(args, "jobs", None) is not None and getattr(args, "scheduler", None):
        raise DataError("--jobs: local worker processes do not apply with --scheduler (the cluster's workers run "
                        "the tasks); give one of them")


def options(args) -> dict:
    """run_tasks keyword arguments (jobs, scheduler) from parsed --jobs/--scheduler."""
    return {"jobs": getattr(args, "jobs", None), "scheduler": getattr(args, "scheduler", None)}
