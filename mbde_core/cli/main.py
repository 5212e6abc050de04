"""The ``mbde`` command line: a thin dispatcher over one module per subcommand.

Subcommand modules are imported lazily (``mbde --help`` stays instant); each module
defines ``HELP`` (one line), ``add_arguments(parser)`` and ``run(args) -> int``.
User errors (:class:`mbde_core.errors.MbdeError`) are printed as one line on stderr and
exit with status 2, never with a traceback; so are usage errors (bare ``mbde`` included)
and numeric arguments that are not finite. Ctrl-C and SIGTERM stop a command, its worker
processes and its unfinished outputs (:mod:`mbde_core.runs.stop`, :mod:`mbde_core.cli.outputs`)
with one line and exit status 130 / 143.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

from mbde_core import __version__
from mbde_core.cli.outputs import abandoned, as_given
from mbde_core.errors import MbdeError
from mbde_core.runs import stop

# One BLAS thread per process unless the user sets otherwise (before numpy is imported):
# mbde parallelises by worker processes (mbde_core/runs) and numba threads, and on the
# filters' small matrices OpenBLAS's own threads only oversubscribe the cores when two
# workers each start them (`mbde bench accuracy --runs 2 --scaling 1,2`, idle 2-core
# machine: speed-up 1.70x with OpenBLAS's default threads, 2.00x with one; one worker
# 126.6 vs 128.8 s, i.e. the extra threads bought nothing there).
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line (as every other mbde error) with
    exit status 2: ``mbde CMD: error: what is wrong (see `mbde CMD --help`)``."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


# (name, module, one-line help). Order = order shown by `mbde --help`.
COMMANDS: list[tuple[str, str, str]] = [
    ("info", "mbde_core.cli.cmd_info", "describe a mechanism YAML: points, bodies, coordinates, DOF, branches"),
    ("inverse-dynamics", "mbde_core.cli.cmd_inverse_dynamics", "driver force/torque needed to follow a prescribed coordinate trajectory"),
    ("simulate", "mbde_core.cli.cmd_simulate", "simulate a scenario (ground truth + noisy sensors) into a ROS 2 bag"),
    ("replay", "mbde_core.cli.cmd_replay", "run estimators on a ROS 2 bag; metrics.json, estimates bag, report, plots"),
    ("export", "mbde_core.cli.cmd_export", "an estimates bag as per-estimator tables (time, state, standard deviations, diagnostics): CSV or Parquet"),
    ("tune", "mbde_core.cli.cmd_tune", "fit the estimators' plant noise (and sensor sigmas) to a bag's readings; kept only if it predicts held-out readings better"),
    ("smooth", "mbde_core.cli.cmd_smooth", "smooth a bag's whole run (paper 003 batch smoother): the best reference without ground truth"),
    ("identify", "mbde_core.cli.cmd_identify", "identify mechanism parameters (masses, inertias, gravity, damping) from bags; calibrated mechanism YAML"),
    ("live", "mbde_core.cli.cmd_live", "run the live loop (model, simulator, drivers, estimators) as rclpy processes"),
    ("render", "mbde_core.cli.cmd_render", "animate bags (truth, estimates, PF hypotheses, ellipses) into a GIF/PNG, no RViz needed"),
    ("learn-map", "mbde_core.cli.cmd_learn_map", "train the ADE-KF's learned minimal-coordinate map (tanh MLP) of a mechanism"),
    ("adekf-observability", "mbde_core.cli.cmd_adekf_observability", "PBH observability test of the ADE-KF (states + inputs) for a set of sensors"),
    ("bag-info", "mbde_core.cli.cmd_bag_info", "list a ROS 2 bag's topics, types, message counts, rates and duration"),
]


# Commands of other installed packages: the ``mbde.commands`` entry-point group, name =
# module (e.g. ``bench = mbde_bench.cli``, whose HELP is its one-line help). The core never
# imports those packages by name.
PLUGIN_GROUP = "mbde.commands"


def _commands() -> list[tuple[str, str, str]]:
    """COMMANDS, then the plugins' commands (their modules imported for their HELP)."""
    from importlib.metadata import entry_points

    out = list(COMMANDS)
    names = {c[0] for c in out}
    for ep in sorted(entry_points(group=PLUGIN_GROUP), key=lambda e: e.name):
        if ep.name in names:
            continue
        try:
            helptext = getattr(importlib.import_module(ep.value), "HELP", ep.name)
        except ImportError:  # a plugin whose package is not importable here
            continue
        out.append((ep.name, ep.value, helptext))
        names.add(ep.name)
    return out


def _top_parser(commands) -> argparse.ArgumentParser:
    lines = "\n".join(f"  {name:<22} {helptext}" for name, _, helptext in commands)
    p = OneLineParser(
        prog="mbde",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="mbde: multibody-dynamics-based state estimation for planar mechanisms.",
        epilog=f"commands:\n{lines}\n\nRun `mbde COMMAND --help` for the options of a command.",
    )
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("command", nargs="?", help="one of the commands below")
    return p


def main(argv: list[str] | None = None) -> int:
    handlers = stop.install()  # first: an interrupt while the command's modules load is clean too
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except KeyboardInterrupt as exc:  # SIGINT, or SIGTERM (stop.Terminated), before the command ran
        stop.ignore()
        return stop.exit_status(exc)
    finally:
        stop.restore(handlers)


def _main(argv: list[str]) -> int:
    table = {name: (module, helptext) for name, module, helptext in COMMANDS}
    if argv and argv[0] not in table:
        table = {name: (module, helptext) for name, module, helptext in _commands()}
    if not argv or argv[0] not in table:
        parser = _top_parser(_commands())
        args, _ = parser.parse_known_args(argv)
        if args.version:
            print(f"mbde {__version__}")
            return 0
        if args.command is None:
            if argv:  # e.g. `mbde --help` handled by argparse; anything else is a usage error
                parser.print_help(sys.stderr)
                return 2
            print("mbde: error: a command is required (see `mbde --help`)", file=sys.stderr)
            return 2
        print(f"mbde: error: unknown command {args.command!r} (see `mbde --help`)", file=sys.stderr)
        return 2
    name = argv[0]
    module_name, helptext = table[name]
    module = importlib.import_module(module_name)
    parser = OneLineParser(
        prog=f"mbde {name}",
        description=getattr(module, "DESCRIPTION", helptext),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    _check_finite(parser, args)
    return _run(name, module, args)


def _run(name: str, module, args) -> int:
    try:
        status = int(module.run(args) or 0)
        stop.check()  # an interrupt whose exception was lost on the way: still an interrupt
        return status
    except MbdeError as err:
        print(f"mbde {name}: error: {as_given(str(err))}", file=sys.stderr)
        return err.exit_status
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (stop.Terminated)
        stop.ignore()
        stopped = stop.stop_children()

        what = "SIGTERM" if isinstance(exc, stop.Terminated) else "SIGINT"
        print(f"mbde {name}: stopped by {what}" + "".join(f"; {a}" for a in abandoned())
              + (f"; {stopped} worker process(es) ended" if stopped else ""), file=sys.stderr)
        return stop.exit_status(exc)
    except BrokenPipeError:
        return 0
    except OSError as err:  # the disk is full, a folder not writable...: one line; outputs were abandoned
        where = f" ({as_given(str(err.filename))})" if err.filename else ""
        print(f"mbde {name}: error: {err.strerror or err}{where}" + "".join(f"; {a}" for a in abandoned()),
              file=sys.stderr)
        return 1


def _check_finite(parser, args) -> None:
    """Usage error (exit 2) for a float argument that is NaN or infinite."""
    import math

    names, todo = {}, [parser]
    while todo:  # the options of the parser and of its sub-parsers (mbde bench NAME)
        for action in todo.pop()._actions:
            names.setdefault(action.dest, action.option_strings[-1] if action.option_strings else action.dest)
            todo += list((getattr(action, "choices", None) or {}).values()) if isinstance(
                action, argparse._SubParsersAction) else []
    for dest, value in vars(args).items():
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if isinstance(v, float) and not math.isfinite(v):
                parser.error(f"argument {names.get(dest, dest)}: not a finite number: {v}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
