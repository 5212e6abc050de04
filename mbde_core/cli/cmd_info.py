"""mbde info MECH.yaml: describe a mechanism."""
from __future__ import annotations

import numpy as np

from mbde_core.engine.branches import BranchTool
from mbde_core.model.mechanism import load_mechanism

HELP = "describe a mechanism YAML: points, bodies, coordinates, DOF, branches"
DESCRIPTION = """Load a mechanism YAML file (libmbse format + mbde extensions) and print its
points, bodies, natural coordinates q, degrees of freedom, the independent coordinates
z and every assembly branch at the initial z (label 0: the file's configuration). Exit
status 2 on a config error."""


def add_arguments(p):
    p.add_argument("mechanism", help="mechanism YAML file")


def run(args) -> int:
    mech = load_mechanism(args.mechanism)
    spec = mech.spec
    print(f"mechanism: {mech.name}  ({spec.file})")
    print(f"gravity: [{spec.gravity[0]:g}, {spec.gravity[1]:g}] m/s^2")
    print(f"\npoints ({mech.n_points}):")
    P = mech.points(mech.q0)
    for i, p in enumerate(spec.points):
        kind = "fixed " if p.fixed else "moving"
        print(f"  {i:>2} {p.name:<10} {kind}  x = {P[i, 0]: .6g}  y = {P[i, 1]: .6g}")
    print(f"\nbodies ({len(spec.bodies)}):")
    for i, b in enumerate(spec.bodies):
        pts = ",".join(spec.points[k].name for k in b.points)
        print(f"  {i:>2} {b.name:<10} points [{pts}]  L = {b.length:.6g} m  m = {b.mass:.6g} kg  I0 = {b.I0:.6g} kg m^2  cog = ({b.cog[0]:.6g}, {b.cog[1]:.6g})")
    for s in spec.sliders:
        print(f"  slider {s.name}: point {spec.points[s.point].name} on line through ({s.origin[0]:g}, {s.origin[1]:g}) along ({s.direction[0]:.4g}, {s.direction[1]:.4g}), mass {s.mass:g} kg")
    for ld in spec.loads:
        print(f"  load {ld.name}: {ld.kind}")
    print(f"\ncoordinates q ({mech.n}; m, and rad for angles):")
    angles = {r.name: r for r in spec.relative_coordinates}
    for i, name in enumerate(mech.coordinate_names):
        tag = "  <- independent" if i in mech.independent else ""
        if name in angles:  # RelativeAngleAbsoluteDOF: from the world x axis
            a, b = (spec.points[k].name for k in angles[name].points)
            tag += f"  (angle of {a}->{b} from the world x axis, counter-clockwise)"
        print(f"  {i:>2} {name:<12} {mech.q0[i]: .6g}{tag}")
    print(f"\nconstraints: {mech.m} (|Phi(q0)| = {np.max(np.abs(mech.phi(mech.q0))):.2e})")
    print(f"degrees of freedom: {mech.dof}")
    print(f"independent coordinates z: {', '.join(mech.independent_names)}")
    bt = BranchTool(mech)
    qs, labels = bt.enumerate(mech.q0[mech.independent])
    print(f"assembly branches at the initial z: {len(qs)}")
    for q, lab in zip(qs, labels):
        here = "  (initial configuration)" if np.max(np.abs(q - mech.q0)) < 1e-6 * mech.length_scale else ""
        Pq = mech.points(q)
        moving = ", ".join(f"{spec.points[k].name}=({Pq[k, 0]:.4g}, {Pq[k, 1]:.4g})" for k in mech.moving_points)
        print(f"  branch {lab}: {moving}{here}")
    return 0
