"""mbde inverse-dynamics: driver force/torque for a prescribed coordinate trajectory."""
from __future__ import annotations

import numpy as np

HELP = "driver force/torque needed to follow a prescribed coordinate trajectory"
DESCRIPTION = """Compute the generalized force (torque for an angle, force for a point
coordinate) that a driver acting on coordinate K must apply so that a 1-DOF mechanism
follows a prescribed trajectory of K. The trajectory file has rows `t value` (seconds,
SI units); lines starting with % or # are ignored. Velocities and accelerations are
obtained by differentiating the samples (Savitzky-Golay for uniform sampling). The
output CSV has a header `t,force` and one row per trajectory sample; positive force
acts along increasing K."""


def add_arguments(p):
    p.add_argument("mechanism", help="mechanism YAML file")
    p.add_argument("--trajectory", required=True, help="text file with rows `t value`")
    p.add_argument("--coordinate", required=True, help="driven coordinate: 0-based index into q or its name (see `mbde info`)")
    p.add_argument("--out", required=True, help="output CSV file (t,force)")


def read_trajectory(path: str) -> np.ndarray:
    from mbde_core.errors import DataError

    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                s = line.strip()
                if not s or s[0] in "%#":
                    continue
                parts = s.replace(",", " ").split()
                try:
                    vals = [float(x) for x in parts[:2]]
                except ValueError:
                    raise DataError(f"{path}: line {lineno}: expected two numbers `t value`, got {s[:40]!r}") from None
                if len(vals) < 2:
                    raise DataError(f"{path}: line {lineno}: expected two numbers `t value`")
                if not all(np.isfinite(vals)):
                    raise DataError(f"{path}: line {lineno}: non-finite value")
                rows.append(vals)
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    if len(rows) < 5:
        raise DataError(f"{path}: need at least 5 samples, found {len(rows)}")
    return np.array(rows)


def run(args) -> int:
    from mbde_core.engine.inverse_dynamics import driver_forces
    from mbde_core.errors import DataError
    from mbde_core.model.mechanism import load_mechanism

    mech = load_mechanism(args.mechanism)
    try:
        k = mech.coordinate_index(args.coordinate)
    except (KeyError, IndexError) as exc:
        raise DataError(f"--coordinate: {exc.args[0]}") from None
    data = read_trajectory(args.trajectory)
    tau, _ = driver_forces(mech, data[:, 0], data[:, 1], [k])
    try:
        with open(args.out, "w", encoding="utf-8") as fh:
            fh.write("t,force\n")
            for t, f in zip(data[:, 0], tau[:, 0]):
                fh.write(f"{t:.9g},{f:.12g}\n")
    except OSError as exc:
        raise DataError(f"--out: cannot write {args.out} ({exc.strerror})") from None
    unit = "N m" if k in mech.rel_columns else "N"
    print(f"{mech.coordinate_names[k]}: {len(tau)} samples, force range [{tau.min():.6g}, {tau.max():.6g}] {unit} -> {args.out}")
    return 0
