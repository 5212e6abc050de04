"""mbde identify: joint state and parameter identification from bags (paper 001)."""
from __future__ import annotations

import os
import sys

from mbde_core.cli.outputs import Output
from mbde_core.config.yamlnode import Node, read_yaml
from mbde_core.engine.kinematics import solve_position_continuation
from mbde_core.errors import DataError
from mbde_core.estimators.base import InitialState
from mbde_core.estimators.options.rule import scenario_context
from mbde_core.identification.config import load_identification_config
from mbde_core.identification.identify import Recording, identify
from mbde_core.identification.model import ParameterizedMechanism
from mbde_core.identification.outputs import summary_table, write_outputs
from mbde_core.model.mechanism import load_mechanism
from mbde_core.replay.inputs import load_inputs
from mbde_core.sensors.config import load_sensors
from mbde_core.trajectory.config import resolve_smoother

HELP = "identify mechanism parameters (masses, inertias, gravity, damping...) from bags; writes a calibrated mechanism"
DESCRIPTION = """Identify physical parameters of the mechanism together with the trajectory of every bag
(paper 001: joint state and parameter estimation by Levenberg-Marquardt on the batch
smoother's residuals, noise re-estimated from the residuals, parameter covariance as a
Schur complement). Several bags (e.g. several releases) share one parameter set.

--params lists key paths into the mechanism YAML (comma-separated, `*` expands):
  bodies.crank.mass  bodies.coupler.inertia (I0)  bodies.rod.cog.x  bodies.crank.length
  gravity (magnitude)  gravity.y  joints.A.damping  joints.*.damping  loads.NAME.c
  loads.NAME.value  sliders.NAME.mass  points.P2.x  parameters.L1
--bounds 'KEY=LO:HI,...' (either side may be empty); masses, inertias, damping and |g|
are >= 0 by default.

Writes into OUT: calibrated.yaml (the mechanism file with the identified values, each
with its standard deviation in a comment; parameters that the recordings cannot
determine are kept and marked), identification.json (estimates, standard deviations,
correlation matrix, identifiability, cost per iteration, re-estimated noise, residual
whiteness, timings), cost.png and residuals.png. Replay with the calibrated model:
`mbde replay BAG --mechanism OUT/calibrated.yaml`."""


def add_arguments(p):
    p.add_argument("bags", nargs="+", metavar="BAG", help="ROS 2 bag directories (one parameter set for all)")
    p.add_argument("--mechanism", required=True, help="mechanism YAML with the starting values")
    p.add_argument("--params", required=True, help="comma-separated key paths of the parameters to identify")
    p.add_argument("--bounds", help="box bounds 'KEY=LO:HI,...' (KEY may use *)")
    p.add_argument("--sensors", help="sensor YAML with a `sensors:` list (default: the mechanism file's)")
    p.add_argument("--config", help="estimator config YAML: its `smoother:` and `identification:` sections")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde identify` at --out")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def run(args) -> int:
    if len(set(map(os.path.realpath, args.bags))) != len(args.bags):
        raise DataError("BAG: a bag is given twice")
    smoother_cfg, guess_cfg, options = load_identification_config(args.config)
    mech = load_mechanism(args.mechanism)
    pm = ParameterizedMechanism(mech, args.params, args.bounds)
    inputs = list(args.bags) + [args.mechanism, args.sensors, args.config]
    with Output(args.out, "identify", force=args.force, inputs=inputs) as out:
        recordings, sensors_doc = [], None
        for bag in args.bags:
            inputs = load_inputs(bag, args.mechanism, args.sensors)
            for note in inputs.notes:
                print(f"warning: {note}", file=sys.stderr)
            if not inputs.measurements:
                raise DataError(f"{bag}: no valid readings of the sensors")
            if not recordings:  # the smoother options' auto values by the rule (initial sigmas, plant noise)
                smoother_cfg = resolve_smoother(smoother_cfg, mech, inputs.sensors, scenario_context(inputs.scenario))
            init = _initial_state(inputs, smoother_cfg)
            recordings.append(Recording(bag, inputs.measurements, init, inputs.sensors))
            skipped = sum(inputs.skipped.values())
            print(f"bag {bag}: {inputs.duration:.3f} s, " + ", ".join(f"{k} {v} readings" for k, v in inputs.counts.items())
                  + (f", {skipped} skipped" if skipped else ""))

        if args.sensors:
            node = read_yaml(args.sensors).get("sensors")
            sensors_doc = node.value
        else:
            node = Node(mech.spec.sensors, mech.spec.file, "sensors")
        names = ", ".join(f"{n} ({k})" for n, k in zip(pm.names, pm.kinds))
        print(f"identifying {pm.P} parameter(s) of {mech.name}: {names}")
        result = identify(pm, recordings, smoother_cfg, guess_cfg, options, progress=lambda m: print("  " + m),
                          sensor_factory=lambda m: load_sensors(node, m))
        with open(args.mechanism, encoding="utf-8") as fh:
            source = fh.read()
        written = write_outputs(out.tmp, result, list(args.bags), source, sensors_doc, plots=not args.no_plots)
        out.commit()
    print(summary_table(result))
    for w in result.warnings:
        print(f"warning: identify: {w}")
    t = result.timings
    print(f"{result.iterations} iterations ({result.first_pass_iterations} in the first pass, {result.passes} noise passes), "
          f"status {result.status}; wall time {t['total_s']:.1f} s (initial guess {t['initial_guess_s']:.1f} s)")
    print(f"wrote {args.out}: " + ", ".join(written) + (" (calibrated.yaml rewritten: the original layout could not be kept)"
                                                       if written.get("calibrated.yaml") == "rewritten" else ""))
    return 0


def _initial_state(inputs, cfg):
    import numpy as np

    mech = inputs.mechanism
    g = mech.dof
    sig = cfg["initial_sigma"]
    z0 = np.asarray(inputs.initial_z, float)
    q0 = np.asarray(inputs.initial_q, float)
    if inputs.scenario is None and not np.allclose(q0[mech.independent], z0):
        q0 = solve_position_continuation(mech, z0)  # the file's configuration moved to z0, same branch
    return InitialState(z0, np.asarray(inputs.initial_zd, float), np.broadcast_to(np.asarray(sig["z"], float), (g,)).copy(),
                        np.broadcast_to(np.asarray(sig["zd"], float), (g,)).copy(), q0, inputs.initial_branch)
