"""mbde export ESTIMATES: an estimates bag as per-estimator tables (CSV or Parquet)."""
from __future__ import annotations

import os

from mbde_core.cli.outputs import Output
from mbde_core.replay.export import export_estimates, state_topics

HELP = "an estimates bag (mbde replay / smooth, or recorded live) as per-estimator tables: CSV or Parquet"
DESCRIPTION = """Read an estimates bag -- the estimates/ folder of `mbde replay` or `mbde smooth`,
or a recording of the live nodes' /<namespace>/<name>/state topics -- and write one table
per estimator into --out: <name>.csv (or .parquet): t [s], t_rel [s since the first state],
z_<c>, zd_<c>, zdd_<c> and their standard deviations sd_z_<c>, sd_zd_<c>, every natural
coordinate q_<k>, qd_<k>, the assembly branch and its probabilities p_branch<b>, estimated
inputs input_<i> with sd_input_<i>, and the particle filter's ess / unique_particles. With
a metrics.json next to the bag (a replay folder) also summary.csv: one row per estimator
with its RMSE, NEES, NIS, convergence, real-time factor and counters. The mbde_msgs types
are built in: nothing to register. In Python: mbde_core.replay.export.estimate_tables."""


def add_arguments(p):
    p.add_argument("bag", help="estimates bag directory (e.g. REPLAY/estimates)")
    p.add_argument("--out", required=True, help="output folder for the tables (must not exist, or be empty; see --force)")
    p.add_argument("--format", choices=("csv", "parquet"), default="csv",
                   help="table format (default %(default)s; parquet needs pyarrow: pip install 'mbde[parquet]')")
    p.add_argument("--estimators", help="comma-separated estimators to export (default: every one in the bag)")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde export` at --out")


def run(args) -> int:
    names = [n.strip() for n in args.estimators.split(",") if n.strip()] if args.estimators else None
    state_topics(args.bag)  # a bag without estimates: one line, before anything is written
    with Output(args.out, "export", force=args.force, inputs=[args.bag]) as out:
        paths = export_estimates(args.bag, out.tmp, args.format, names)
        out.commit()
    print(f"wrote {args.out}: " + ", ".join(os.path.basename(p) for p in paths))
    return 0
