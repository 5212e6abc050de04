"""mbde learn-map: train the learned minimal-coordinate map of a mechanism (paper 004 sec. 5.2)."""
from __future__ import annotations

import os

from mbde_core.cli.argtypes import int_range, positive, seed_type
from mbde_core.cli.outputs import Output
from mbde_core.errors import DataError
from mbde_core.minimal.learned import TOLERANCES, train_map
from mbde_core.model.mechanism import load_mechanism

HELP = "train the ADE-KF's learned minimal-coordinate map (tanh MLP) of a mechanism; write .npz"
DESCRIPTION = """Train a small tanh MLP that maps the independent coordinates z of a mechanism to
its natural coordinates q = g_n(z) (paper 004 sec. 3.4 and 5.2), on configurations
sampled from the engine (position problem by continuation, one assembly branch), with
the engine's exact first and second derivatives in the loss, by L-BFGS from seeded
initialisations. Angle inputs enter as (sin, cos): the map is periodic in them.

Prints the held-out accuracy (seeded configurations off the training grid) of the value
and of the first, second and third derivatives against the exact map, and writes the
weights to --out (default: <mechanism>.map.npz in the current directory; an existing
file is replaced only with --force). Use it with
the ADE-KF estimator option `map: learned` and `map_file: FILE`."""


def add_arguments(p):
    p.add_argument("mechanism", help="mechanism YAML")
    p.add_argument("--out", help="output .npz (default: <mechanism file name>.map.npz in the current directory)")
    p.add_argument("--hidden", default="8,8", help="units of the tanh layers (default: %(default)s, the paper's)")
    p.add_argument("--samples", type=int_range(0, 100000), default=0,
                   help="grid points per independent coordinate (default 720 for 1 DOF, 40 otherwise)")
    p.add_argument("--orders", default="1,1,1,0", help="loss weights of the derivative orders 0..3 (default: %(default)s)")
    p.add_argument("--seed", type=seed_type, default=0, help="seed of the initialisations and the held-out set (default 0)")
    p.add_argument("--restarts", type=int_range(1, 1000), default=2, help="seeded restarts, the best is kept (default 2)")
    p.add_argument("--max-iterations", type=int_range(1, 10**7), default=4000,
                   help="L-BFGS iterations per restart (default 4000)")
    p.add_argument("--time-limit", type=positive, default=40.0, help="bound on the fit [s] (default 40)")
    p.add_argument("--domain", action="append", default=[], metavar="COORD=LO:HI",
                   help="training range of an independent coordinate (default: a full turn for angles, "
                        "+- one length scale otherwise); repeatable")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde learn-map` at --out")


def _list(text, kind, what):
    try:
        return [kind(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise DataError(f"{what}: expected comma-separated numbers, got {text!r}") from None


def run(args) -> int:
    import math

    mech = load_mechanism(args.mechanism)
    out_path = args.out or os.path.splitext(os.path.basename(args.mechanism))[0] + ".map.npz"
    domain = {}
    for item in args.domain:
        try:
            name, rng = item.split("=", 1)
            lo, hi = (float(v) for v in rng.split(":"))
        except ValueError:
            raise DataError(f"--domain: expected COORD=LO:HI, got {item!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise DataError(f"--domain {item}: expected finite LO < HI")
        if name.strip() not in mech.independent_names:
            raise DataError(f"--domain {item}: {name.strip()!r} is not an independent coordinate of {mech.name} "
                            f"({', '.join(mech.independent_names)})")
        domain[name.strip()] = [lo, hi]
    hidden = _list(args.hidden, int, "--hidden")
    if not hidden or min(hidden) < 1 or max(hidden) > 1000 or len(hidden) > 10:
        raise DataError("--hidden: give 1 to 10 unit counts in [1, 1000], e.g. 8,8")
    orders = _list(args.orders, float, "--orders")
    if not 1 <= len(orders) <= 4 or min(orders) < 0 or not all(map(math.isfinite, orders)) or not any(orders):
        raise DataError("--orders: 1 to 4 finite non-negative weights, not all zero")
    opts = {"hidden": hidden, "samples": args.samples, "order_weights": orders, "seed": args.seed,
            "restarts": args.restarts, "max_iterations": args.max_iterations, "time_limit": args.time_limit,
            "domain": domain}
    print(f"{mech.name}: {mech.n} coordinates, z = {', '.join(mech.independent_names)}")
    with Output(out_path, "learn-map", force=args.force, kind="file", inputs=[args.mechanism]) as out:
        lm, rep = train_map(mech, opts, verbose=print)
        lm.save(out.tmp)
        out.commit()
    acc = rep["accuracy"]
    print(f"fit: loss {rep['loss']:.3g} after {rep['iterations']} L-BFGS iterations, {rep['restarts']} restart(s), "
          f"{rep['fit_seconds']:.1f} s ({rep['total_seconds']:.1f} s in all)")
    print(f"held-out accuracy on {acc['held_out']} configurations (max |error| / max |exact|, over the dependent coordinates):")
    print("  order  quantity        rel. max err   rel. rms err   abs. max err   tolerance")
    labels = ["q = g_n(z)", "dq/dz", "d2q/dz2", "d3q/dz3"]
    for k in range(4):
        flag = "ok" if acc["rel_max"][k] <= TOLERANCES[k] else "ABOVE"
        print(f"  {k:>5}  {labels[k]:<14}  {acc['rel_max'][k]:>12.3e}   {acc['rel_rms'][k]:>12.3e}   "
              f"{acc['abs_max'][k]:>12.3e}   {TOLERANCES[k]:.0e} {flag}")
    print(f"wrote {out_path} ({lm.net.n_params} parameters)")
    return 0
