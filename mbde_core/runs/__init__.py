"""Execution engine of mbde's many-run workloads (replay of many bags and estimators, the
benchmarks' Monte Carlo loops): serial, local processes or a Dask distributed cluster.
See :mod:`mbde_core.runs.engine`."""
from mbde_core.runs.engine import Outcome, default_jobs, failures, run_tasks

__all__ = ["Outcome", "add_arguments", "default_jobs", "failures", "run_tasks", "options"]


def add_arguments(parser, what: str = "tasks") -> None:
    """The --jobs / --scheduler options shared by every command that runs many tasks."""
    parser.add_argument("--jobs", type=int, default=None,
                        help=f"local worker processes for the {what} (default: CPU count; 1 = serial, in this process)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="run on a Dask distributed cluster instead of local processes "
                             "(optional extra: pip install 'mbde[cluster]')")


def options(args) -> dict:
    """run_tasks keyword arguments (jobs, scheduler) from parsed --jobs/--scheduler."""
    return {"jobs": getattr(args, "jobs", None), "scheduler": getattr(args, "scheduler", None)}
