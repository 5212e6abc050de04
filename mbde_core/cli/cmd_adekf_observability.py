"""mbde adekf-observability: PBH rank test of the ADE-KF model along a trajectory (paper 004 eqs. 57-58)."""
from __future__ import annotations

import json
import os

from mbde_core.cli.argtypes import float_range, int_range
from mbde_core.config.yamlnode import parse_yaml, read_yaml
from mbde_core.errors import DataError
from mbde_core.estimators.configure import load
from mbde_core.minimal import make_map
from mbde_core.minimal.augmented import AugmentedModel, parse_inputs
from mbde_core.minimal.observability import observability_along, steady_states
from mbde_core.model.mechanism import load_mechanism
from mbde_core.sensors.config import load_sensors

HELP = "PBH observability test of the ADE-KF (states + unknown inputs) for a set of sensors"
DESCRIPTION = """Evaluate the Popov-Belevitch-Hautus rank test of paper 004 (eqs. 57-58) for the
ADE-KF model x = [z, zd, a] of a mechanism with the given sensors and unknown inputs:
O(s) = [F* - s I; H] must have full column rank at every eigenvalue s of F* (and s = 0).
The test runs along a trajectory: the independent coordinates sweep one turn at the
constant rate --speed with the inputs that keep the rate constant.

Verdict: OBSERVABLE if the rank is full at every state, or everywhere but at isolated
states (e.g. the dead centres of a slider-crank, where the slider's accelerometer
momentarily sees neither the crank angle nor the torque); NOT OBSERVABLE if the rank is
deficient over a stretch of the trajectory (then the unobservable direction is printed).
Exit status 0 when observable, 1 when not, 2 on a bad input.

--sensors takes a YAML file with a `sensors:` list (a sensor file or a scenario) or a
list, or the YAML text itself, e.g.
  --sensors "[{name: acc, type: accelerometer, slider: slider, axes: [0], rate: 1000, noise: {sigma: 0.05}}]"
Inputs come from --config (the `adekf.inputs` of an estimator config) or default to a
generalized force on each independent coordinate."""


def add_arguments(p):
    p.add_argument("mechanism", help="mechanism YAML")
    p.add_argument("--sensors", required=True, help="sensor YAML file (or scenario), or inline YAML list")
    p.add_argument("--only", help="comma-separated sensor names to fuse (default: all)")
    p.add_argument("--config", help="estimator config YAML with an `adekf` section (inputs, map)")
    p.add_argument("--map", choices=("exact", "learned"), help="coordinate map (default: the config's, else exact)")
    p.add_argument("--speed", type=float_range(0.0, 1e6, lo_open=True), default=40.0,
                   help="rate of the independent coordinates [rad/s or m/s], > 0 (default 40)")
    p.add_argument("--samples", type=int_range(2, 100000), default=72, help="states along one turn (default 72)")
    p.add_argument("--rtol", type=float_range(0.0, 1.0, lo_open=True, hi_open=True), default=1e-8,
                   help="relative singular-value threshold of the rank, in (0, 1) (default 1e-8)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def _sensors(arg, mech):
    root = read_yaml(arg) if os.path.exists(arg) else parse_yaml(arg, "--sensors")
    if isinstance(root.value, dict):
        if "sensors" not in root.value:
            raise root.error("expected a `sensors:` list")
        return load_sensors(root.get("sensors"), mech)
    return load_sensors(root, mech)


def run(args) -> int:
    import numpy as np

    mech = load_mechanism(args.mechanism)
    sensors = _sensors(args.sensors, mech)
    names = [n.strip() for n in args.only.split(",")] if args.only else sensors.names
    bad = [n for n in names if n not in sensors]
    if bad or not names:
        raise DataError(f"--only: unknown sensor(s) {', '.join(bad) or '(none)'} (sensors: {', '.join(sensors.names)})")
    cfg = load(args.config, ["adekf"])["adekf"].as_dict()  # validated (no --config: the defaults)
    source = args.map or cfg["map"]
    if source == "learned" and cfg.get("map_file"):
        cmap = make_map(mech, "learned", file=cfg["map_file"])
    elif source == "learned":
        cmap = make_map(mech, "learned", options=dict(cfg["learn"]))
    else:
        cmap = make_map(mech, "exact")
    inputs = parse_inputs(mech, cfg.get("inputs") or [], args.config or "<defaults>")
    model = AugmentedModel(mech, sensors, cmap, inputs)
    X = steady_states(model, args.speed, args.samples)
    rep = observability_along(model, names, X, rtol=args.rtol)
    deficient = [k for k, r in enumerate(rep.results) if not r.observable]
    K = len(rep.results)
    isolated = all(((k + 1) % K not in deficient) and ((k - 1) % K not in deficient) for k in deficient)
    observable = not deficient or (isolated and len(deficient) < K)
    g = mech.dof
    w = rep.worst
    worst = rep.results[w]
    if args.json:
        doc = {"mechanism": mech.name, "sensors": names, "inputs": [s.name for s in inputs], "map": cmap.source,
               "states": rep.state_names, "n_x": model.nx, "samples": K, "speed": args.speed,
               "full_rank_states": K - len(deficient), "deficient_states": deficient, "observable": bool(observable),
               "min_margin": float(abs(worst.margin)), "worst_state": rep.states[w].tolist(),
               "unobservable_direction": np.real(worst.direction).tolist() if not worst.observable else None}
        print(json.dumps(doc, indent=1))
        return 0 if observable else 1
    print(f"{mech.name}: x = [{', '.join(rep.state_names)}] (n_x = {model.nx}), map {cmap.source}, "
          f"sensors {', '.join(names)}; {K} states at {args.speed:g}/s over one turn")
    print("   state  " + "  ".join(f"{n:>10}" for n in rep.state_names[:g]) + "   rank   margin     worst s")
    step = max(1, K // 12)
    for k in sorted(set(list(range(0, K, step)) + deficient[:6] + [w])):
        r = rep.results[k]
        z = "  ".join(f"{v:>10.4f}" for v in rep.states[k, :g])
        print(f"  {k:>6}  {z}   {r.rank}/{r.n}  {abs(r.margin):.2e}  {r.s_worst.real:+.3g}{r.s_worst.imag:+.3g}j"
              + ("   <- rank deficient" if not r.observable else ""))
    print(f"full rank at {K - len(deficient)}/{K} states; smallest margin {abs(worst.margin):.2e} (state {w})")
    if deficient:
        d = np.real(worst.direction)
        print("unobservable direction at state %d: " % w + ", ".join(f"{n} {v:+.3f}" for n, v in zip(rep.state_names, d)))
    if observable and deficient:
        print(f"OBSERVABLE along the trajectory (rank deficient only at isolated states {deficient}: "
              "the neighbouring states are observable)")
    elif observable:
        print("OBSERVABLE along the trajectory (PBH rank n_x at every state)")
    else:
        print("NOT OBSERVABLE: the PBH rank is deficient over a stretch of the trajectory")
    return 0 if observable else 1
