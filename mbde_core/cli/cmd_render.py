"""mbde render BAG... --out anim.gif: the RViz picture of bags, drawn with matplotlib."""
from __future__ import annotations

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
    p.add_argument("--seed", type=int, default=0, help="seed of stochastic estimators (default 0)")
    p.add_argument("--start", type=float, default=0.0, help="start of the window [s] after the first state")
    p.add_argument("--duration", type=float, help="length of the window [s] (default: to the end)")
    p.add_argument("--time", type=float, help="time of the PNG frame [s] after the first state (default: the end)")
    p.add_argument("--fps", type=float, default=15.0, help="frames per second of the GIF (default 15)")
    p.add_argument("--speed", type=float, default=1.0, help="data seconds per video second (default 1)")
    p.add_argument("--top-k", type=int, default=30, help="particle hypotheses drawn (default 30)")
    p.add_argument("--size", default="6.4x4.8", help="figure size in inches WxH (default 6.4x4.8)")
    p.add_argument("--dpi", type=int, default=100, help="dots per inch (default 100)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")


def run(args) -> int:
    from mbde_core.cli.outputs import check_output_file
    from mbde_core.errors import DataError
    from mbde_core.estimators.registry import names as estimator_names
    from mbde_core.simulator.progress import ProgressBar
    from mbde_core.viz.render import render

    names = [n.strip() for n in args.estimators.split(",") if n.strip()]
    bad = [n for n in names if n not in estimator_names()]
    if bad:
        raise DataError(f"--estimators: unknown {', '.join(bad)} (choose from {', '.join(estimator_names())})")
    try:
        w, h = (float(v) for v in args.size.lower().split("x"))
        assert w > 0 and h > 0
    except (ValueError, AssertionError):
        raise DataError(f"--size {args.size!r}: expected WxH in inches, e.g. 6.4x4.8") from None
    if not (args.fps > 0 and args.speed > 0 and args.dpi > 0 and args.top_k >= 0):
        raise DataError("--fps, --speed and --dpi must be > 0, --top-k >= 0")
    check_output_file(args.out, args.force, "--out")
    bar = ProgressBar("render   ")
    info = render(args.bags, args.out, mechanism_file=args.mechanism, estimators=names, config=args.config,
                  seed=args.seed, fps=args.fps, speed=args.speed, start=args.start, duration=args.duration,
                  time=args.time, top_k=args.top_k, size=(w, h), dpi=args.dpi, progress=bar, style_of=_style)
    bar.close()
    print(f"wrote {args.out}: {info['frames']} frame(s), {', '.join(info['sources'])}")
    return 0


def _style(name: str):
    """An estimator's traits (its colour and label slot), None for another source."""
    from mbde_core.estimators.registry import traits

    try:
        return traits(name)
    except KeyError:
        return None
