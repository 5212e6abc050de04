"""mbde smooth: the batch smoother of paper 003 sec. 3.4 on a ROS 2 bag (no ROS needed)."""
from __future__ import annotations

import os
import sys

from mbde_core.cli.argtypes import nonnegative
from mbde_core.cli.outputs import DEFAULT_STORAGE, Output
from mbde_core.errors import DataError
from mbde_core.replay.smoothing import smooth_bag
from mbde_core.replay.source import open_source
from mbde_core.trajectory.config import load_smoother_config

HELP = "smooth a bag's whole run (paper 003 batch smoother): trajectory bag, covariances, metrics, plots"
DESCRIPTION = """Solve the whole run of a ROS 2 bag as one sparse nonlinear least-squares problem over
every state x_i = [z_i, zd_i, zdd_i] on the filters' grid (paper 003 sec. 3.4, eq. 23:
initial-state, readings, equations-of-motion and integrator factors), starting from a
forward filter's estimates, with the assembly branch fixed. The result is the best
reference the readings allow when a bag has no ground truth.

Unknown motor torques are unknowns of the problem (inputs: auto, one per force-limited
coordinate: a scenario's speed controller, or rule.force_limits); a measured torque (an
`effort` sensor: JointState.effort, or a current times its gain) is a known input with its
noise. The plant noise is estimated from the residuals, and the run gets a goodness-of-fit
verdict: `converged` only when the fit is good (normalised cost near 1, every sensor's
readings at their declared noise, inputs within their limits), else `poor fit` with a
warning line saying why.

The model and the sensors come from the bag's /mbde/description (bags of `mbde simulate`,
with the scenario's model errors) or from --mechanism/--sensors. Options come from the
`smoother:` section of --config (see config/estimators/default.yaml).

With --window (or smoother.window > 0) the bag is streamed: readings and ground truth
are read chunk by chunk, each window is solved as soon as its readings are complete and
its steps are evaluated and written at once, so memory is bounded by the window, not by
the bag (`mbde bench smoother --cli-memory`). Without, the whole run is one problem in
memory.

Writes into OUT: estimates/ (a ROS 2 bag with /mbde/smoother/state and
/mbde/smoother/joint_states: the replay estimates' topics, with the marginal covariance
of [z, zd] of every step), metrics.json (RMSE, NEES with its chi-square band when the bag
has ground truth; final cost, iterations, wall time, readings used and skipped),
report.md and plots."""


def add_arguments(p):
    p.add_argument("bag", help="ROS 2 bag directory")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--config", help="estimator config YAML with a `smoother:` section (default: defaults)")
    p.add_argument("--mechanism", help="mechanism YAML (instead of the bag's description)")
    p.add_argument("--sensors", help="sensor YAML with a `sensors:` list (with --mechanism)")
    p.add_argument("--window", type=nonnegative, help="smooth in overlapping windows of this many seconds (long bags, "
                                                "bounded memory; default: the config's smoother.window, 0 = whole run)")
    p.add_argument("--overlap", type=nonnegative, help="margin [s] solved on each side of a window and dropped (default: config, 2 s)")
    p.add_argument("--storage", choices=("mcap", "sqlite3"), default=DEFAULT_STORAGE,
                   help="storage of the output bag (default %(default)s)")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde smooth` at --out")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args) -> int:
    if args.sensors and not args.mechanism:
        raise DataError("--sensors needs --mechanism")
    cfg, guess_cfg = load_smoother_config(args.config)
    for key in ("window", "overlap"):
        value = getattr(args, key)
        if value is not None:
            cfg[key] = float(value)
    if cfg["step"] != "auto" and 0 < cfg["window"] < 2 * cfg["step"]:
        raise DataError(f"--window: must be 0 (whole run) or at least two steps of {cfg['step']:g} s")
    if args.overlap is not None and not cfg["window"] > 0:
        raise DataError("--overlap: applies to windowed smoothing only; give --window (or smoother.window) > 0")
    source = open_source(args.bag, args.mechanism, args.sensors)
    if not any(source.expected.values()):
        raise DataError(f"{args.bag}: no readings of the model's sensors to smooth")
    inputs = [args.bag, args.config, args.mechanism, args.sensors]
    with Output(args.out, "smooth", force=args.force, inputs=inputs) as out:
        for note in source.notes:
            print(f"warning: {note}", file=sys.stderr)
        print(f"bag {args.bag}: {source.mechanism.name}, {source.duration:.3f} s, "
              + ", ".join(f"{k} {v} messages" for k, v in source.expected.items())
              + ("" if source.has_truth else "; no ground truth")
              + (f"; windows of {cfg['window']:g} s, streamed" if cfg["window"] > 0 else "; the whole run at once"))

        smooth_bag(source, cfg, guess_cfg, out.tmp, args.storage, plots=not args.no_plots)
        plots = sorted(f for f in os.listdir(out.tmp) if f.endswith(".png"))
        out.commit()
    print(f"wrote {args.out}: metrics.json, estimates/ ({args.storage}), report.md"
          + (f", {len(plots)} plots" if plots else ""))
    return 0
