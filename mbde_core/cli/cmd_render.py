"""mbde render BAG... --out anim.gif: the RViz picture of bags, drawn with matplotlib."""
from __future__ import annotations

from mbde_core.cli.argtypes import float_range, int_range, nonnegative, positive, seed_type
from mbde_core.cli.outputs import Output
from mbde_core.errors import DataError
from mbde_core.estimators.configure import load
from mbde_core.estimators.registry import ESTIMATOR_NAMES, names as estimator_names, traits
from mbde_core.replay.inputs import load_inputs
from mbde_core.replay.runner import run_estimator
from mbde_core.simulator.progress import ProgressBar
from mbde_core.viz.render import check_output, load_tracks, render, tracks_from_runs

HELP = "animate bags (truth, estimates, PF hypotheses, 95 % ellipses) into a GIF or PNG, no RViz needed"
DESCRIPTION = """Draw what the RViz view of the mbde nodes shows, with the same marker builder
(mbde_core.viz.markers), into an animated GIF or a single PNG frame:

  - the ground truth (/mbde/ground_truth) as dark grey bars;
  - every estimate found in the bags (/mbde/<estimator>/state: the estimates bag of
    `mbde replay`, or a bag recorded from the live estimator nodes) in its own colour,
    with the 95 % confidence ellipses of the moving points;
  - particle filter hypotheses (/mbde/<estimator>/particles): the top-K particles as
    faint linkages, alpha proportional to weight, coloured by assembly branch;
  - a label per source with branch probabilities and the effective sample size.

Several bags are merged (e.g. a simulated bag and the estimates of its replay).
--estimators runs estimators on the first bag's readings on the spot (the replay stage).
The mechanisms come from the bags' /mbde/description or from --mechanism.

Examples:
  mbde simulate config/scenarios/pf_sim.yaml --out /tmp/sim
  mbde render /tmp/sim --estimators ukf,errorekf --out anim.gif
  mbde replay /tmp/sim --out /tmp/rep && mbde render /tmp/sim /tmp/rep/estimates --out frame.png --time 2"""


def add_arguments(p):
    p.add_argument("bags", nargs="+", metavar="BAG", help="ROS 2 bag directories (merged)")
    p.add_argument("--out", required=True, help="output file: .gif (animation) or .png (one frame)")
    p.add_argument("--estimators", default="", help="comma-separated estimators to run on the first bag's readings")
    p.add_argument("--config", help="estimator config YAML for --estimators (default options otherwise)")
    p.add_argument("--mechanism", help="mechanism YAML (bags without /mbde/description)")
    p.add_argument("--seed", type=seed_type, default=0, help="seed of stochastic estimators (default 0)")
    p.add_argument("--start", type=nonnegative, default=0.0, help="start of the window [s] after the first state")
    p.add_argument("--duration", type=positive, help="length of the window [s] (default: to the end)")
    p.add_argument("--time", type=nonnegative, help="time of the PNG frame [s] after the first state (default: the end)")
    p.add_argument("--fps", type=float_range(0.0, 100.0, lo_open=True), default=None,
                   help="frames per second of the GIF, in (0, 100] (default 15)")
    p.add_argument("--speed", type=positive, default=None, help="data seconds per video second (default 1)")
    p.add_argument("--top-k", type=int_range(0, 10000), default=30, help="particle hypotheses drawn (default 30)")
    p.add_argument("--size", default="6.4x4.8", help="figure size in inches WxH, each in (0, 100] (default 6.4x4.8)")
    p.add_argument("--dpi", type=int_range(1, 2400), default=100, help="dots per inch (default 100)")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde render` at --out")


def run(args) -> int:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    bad = [n for n in names if n not in estimator_names()]
    if bad:
        raise DataError(f"--estimators: unknown {', '.join(bad)} (choose from {', '.join(estimator_names())})")
    if args.config and not names:
        raise DataError("--config: applies to --estimators only (no estimators are run)")
    try:
        w, h = (float(v) for v in args.size.lower().split("x"))
        assert 0 < w <= 100 and 0 < h <= 100
    except (ValueError, AssertionError):
        raise DataError(f"--size {args.size!r}: expected WxH in inches, each in (0, 100], e.g. 6.4x4.8") from None
    ext = check_output(args.out)
    gif_only = [o for o, v in (("--fps", args.fps), ("--speed", args.speed)) if v is not None]
    if ext == ".png" and gif_only:
        raise DataError(f"{', '.join(gif_only)}: applies to a .gif --out only (a .png is one frame, see --time)")
    if ext == ".gif" and args.time is not None:
        raise DataError("--time: applies to a .png --out only (a .gif animates --start .. --start + --duration)")
    inputs = list(args.bags) + [args.config, args.mechanism]
    with Output(args.out, "render", force=args.force, inputs=inputs, kind="file") as out:
        truth_mech, est_mech, tracks = load_tracks(args.bags, args.mechanism)
        if names:  # the replay stage on the first bag's readings, estimated with its model
            specs = load(args.config, names)
            inputs = load_inputs(args.bags[0], args.mechanism)
            est_mech = inputs.mechanism
            tracks.update(tracks_from_runs([run_estimator(inputs, name, specs[name], seed=args.seed)
                                            for name in names]))
        bar = ProgressBar("render   ")
        try:
            info = render(truth_mech, est_mech, tracks, out.tmp, fps=15.0 if args.fps is None else args.fps,
                          speed=1.0 if args.speed is None else args.speed, start=args.start, duration=args.duration,
                          time=args.time, top_k=args.top_k, size=(w, h), dpi=args.dpi, progress=bar, style_of=_style)
        finally:
            bar.close()
        out.commit()
    print(f"wrote {args.out}: {info['frames']} frame(s), {', '.join(info['sources'])}")
    return 0


def _style(name: str):
    """An estimator's traits (its colour and label slot), None for another source."""
    try:
        return traits(name)
    except KeyError:
        return None
