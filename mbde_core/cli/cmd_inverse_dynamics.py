"""mbde inverse-dynamics: driver force/torque for a prescribed coordinate trajectory."""
from __future__ import annotations

import numpy as np

from mbde_core.cli.outputs import Output
from mbde_core.engine.inverse_dynamics import driver_forces
from mbde_core.errors import DataError
from mbde_core.model.mechanism import load_mechanism

HELP = "driver force/torque needed to follow a prescribed coordinate trajectory"
DESCRIPTION = """Compute the generalized forces (torque for an angle, force for a point
coordinate) that drivers acting on the coordinates K1,K2,... must apply so that the
mechanism follows prescribed trajectories of them: give as many coordinates as the
mechanism has degrees of freedom (one for a four-bar, two for a five-bar). The
trajectory file has rows `t value1 value2 ...` (seconds, SI units; one column per
coordinate, in the order of --coordinate); lines starting with % or # are ignored.
Velocities and accelerations are obtained by differentiating the samples
(Savitzky-Golay for uniform sampling). The output CSV has one row per trajectory sample
and the header `t,force` (one coordinate) or `t,force_K1,force_K2,...` (coordinate
names); positive force acts along the increasing coordinate. An existing --out file is
replaced only with --force, and only if it is an unchanged earlier output of this command."""


def add_arguments(p):
    p.add_argument("mechanism", help="mechanism YAML file")
    p.add_argument("--trajectory", required=True, help="text file with rows `t value1 value2 ...` (one column per coordinate)")
    p.add_argument("--coordinate", required=True, metavar="K1[,K2,...]",
                   help="driven coordinates, as many as degrees of freedom: 0-based indices into q or names "
                        "(see `mbde info`), comma-separated, e.g. theta1,theta2")
    p.add_argument("--out", required=True, help="output CSV file (t,force or t,force_K1,force_K2,...)")
    p.add_argument("--force", action="store_true", help="replace an earlier output of `mbde inverse-dynamics` at --out")


def read_trajectory(path: str, columns: int = 1) -> np.ndarray:
    """(K, 1 + columns) array of the rows `t value1 ... value<columns>` of a text file."""
    want = "`t " + " ".join(f"value{i + 1}" for i in range(columns)) + "`" if columns > 1 else "`t value`"
    rows = []
    try:
        with open(path, encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                s = line.strip()
                if not s or s[0] in "%#":
                    continue
                parts = s.replace(",", " ").split()
                try:
                    vals = [float(x) for x in parts[: 1 + columns]]
                except ValueError:
                    raise DataError(f"{path}: line {lineno}: expected {columns + 1} numbers {want}, got {s[:40]!r}") from None
                if len(vals) < 1 + columns:
                    raise DataError(f"{path}: line {lineno}: expected {columns + 1} numbers {want}, got {len(vals)}")
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
    mech = load_mechanism(args.mechanism)
    refs = [r.strip() for r in str(args.coordinate).split(",") if r.strip()]
    try:
        driven = [mech.coordinate_index(r) for r in refs]
    except (KeyError, IndexError) as exc:
        raise DataError(f"--coordinate: {exc.args[0]}") from None
    if len(set(driven)) != len(driven):
        raise DataError(f"--coordinate: {args.coordinate!r} names a coordinate twice")
    if len(driven) != mech.dof:
        raise DataError(f"--coordinate: {mech.name} has {mech.dof} degree(s) of freedom: give {mech.dof} "
                        f"coordinate(s), got {len(driven)} ({args.coordinate})")
    data = read_trajectory(args.trajectory, len(driven))
    with Output(args.out, "inverse-dynamics", force=args.force, kind="file",
                inputs=[args.mechanism, args.trajectory]) as out:
        tau, _ = driver_forces(mech, data[:, 0], data[:, 1:], driven)
        names = [mech.coordinate_names[k] for k in driven]
        header = "t,force" if len(driven) == 1 else "t," + ",".join(f"force_{n}" for n in names)
        try:
            with open(out.tmp, "w", encoding="utf-8") as fh:
                fh.write(header + "\n")
                for t, row in zip(data[:, 0], tau):
                    fh.write(f"{t:.9g}," + ",".join(f"{f:.12g}" for f in row) + "\n")
        except OSError as exc:
            raise DataError(f"--out: cannot write {args.out} ({exc.strerror})") from None
        out.commit()
    for c, (k, name) in enumerate(zip(driven, names)):
        unit = "N m" if k in mech.rel_columns else "N"
        print(f"{name}: {len(tau)} samples, force range [{tau[:, c].min():.6g}, {tau[:, c].max():.6g}] {unit}")
    print(f"wrote {args.out}")
    return 0
