"""Estimates bags as tables: one per estimator, time x state, standard deviations, diagnostics.

An estimates bag (``estimates/`` of ``mbde replay`` or ``mbde smooth``, or a recording of
the live nodes' ``/<ns>/<name>/state`` topics) holds ``mbde_msgs/MechanismState``
messages; reading them needs the ``mbde_msgs`` types, which mbde's typestore registers
(:mod:`mbde_core.rosio.typestore`): the user registers nothing.

:func:`estimate_tables` returns, per estimator (the ``<name>`` of ``.../<name>/state``), a
mapping of column name -> (K,) array:

- ``t``: the header stamp [s]; ``t_rel``: since the first state of the bag [s];
- ``z_<c>``, ``zd_<c>``, ``zdd_<c>``: independent coordinates c and their rates (rad or m);
- ``sd_z_<c>``, ``sd_zd_<c>``: standard deviations, sqrt of the diagonal of the
  covariance of [z, zd];
- ``q_<k>``, ``qd_<k>``: every natural coordinate (points' x, y; angles);
- ``branch`` and ``p_branch<b>``: the most probable assembly branch and the probabilities;
- ``trust``: the trust verdict, 0 OK, 1 DEGRADED, 2 LOST (the message's ``trust_level``;
  its ``trust_reason`` sentence stays in the bag);
- ``input_<i>``, ``sd_input_<i>``: estimated unknown inputs (N m or N) and their sd;
- ``ess``, ``unique_particles``: the particle filter's diagnostics from ``.../particles``
  (the value of the latest particle set at or before each state's stamp).

:func:`export_estimates` writes them as ``<name>.csv`` (always) or ``<name>.parquet``
(with pyarrow, the ``parquet`` extra), plus ``summary.csv`` (one row per estimator: the
replay's metrics and counters) when the bag sits in a replay folder with ``metrics.json``.
"""
from __future__ import annotations

import csv
import json
import os
import re

import numpy as np

from mbde_core.errors import DataError
from mbde_core.rosio.bag_reader import BagReader
from mbde_core.rosio.stamps import stamp_to_ns, stamp_to_sec
from mbde_core.rosio.typestore import MECHANISM_STATE, PARTICLE_SET

FORMATS = ("csv", "parquet")
_STATE = re.compile(r"^(?P<base>.*/(?P<name>[^/]+))/state$")


def state_topics(bag) -> dict[str, str]:
    """estimator name -> its state topic, for every MechanismState topic ``.../<name>/state``."""
    with BagReader(bag) as reader:
        out = {}
        for topic, typ, _ in reader.topics():
            m = _STATE.match(topic)
            if typ == MECHANISM_STATE and m and "ground_truth" not in topic:
                out[m.group("name")] = topic
    if not out:
        raise DataError(f"{bag}: no estimates in this bag (no mbde_msgs/msg/MechanismState topic .../<name>/state)")
    return out


def estimate_tables(bag, names=None) -> dict[str, dict[str, np.ndarray]]:
    """{estimator: {column: (K,) array}} of an estimates bag (see the module docstring).

    bag: the bag directory; names: estimators to read (default: every one in the bag)."""
    topics = state_topics(bag)
    if names:
        unknown = [n for n in names if n not in topics]
        if unknown:
            raise DataError(f"{bag}: no estimates of {', '.join(unknown)} (the bag has {', '.join(sorted(topics))})")
        topics = {n: topics[n] for n in names}
    rows: dict[str, list] = {n: [] for n in topics}
    particles: dict[str, list] = {n: [] for n in topics}
    by_topic = {t: n for n, t in topics.items()}
    with BagReader(bag) as reader:
        wanted = set(topics.values())
        pset = {t[: -len("state")] + "particles": n for n, t in topics.items()}
        have = {t for t, typ, _ in reader.topics() if typ == PARTICLE_SET and t in pset}
        for topic, _, msg in reader.messages(sorted(wanted | have)):
            if topic in by_topic:
                rows[by_topic[topic]].append(msg)
            else:
                particles[pset[topic]].append((stamp_to_sec(msg.header.stamp), float(msg.effective_sample_size),
                                               int(msg.unique_particles)))
    t0 = min((stamp_to_ns(r[0].header.stamp) for r in rows.values() if r), default=0)
    return {n: _columns(msgs, particles[n], t0) for n, msgs in rows.items()}


def _columns(msgs, particles, t0: int) -> dict[str, np.ndarray]:
    if not msgs:
        return {"t": np.zeros(0), "t_rel": np.zeros(0)}
    first = msgs[0]
    zn, qn = list(first.independent_names), list(first.coordinate_names)
    inputs = list(first.input_names)
    g, K = len(zn), len(msgs)
    ns = np.array([stamp_to_ns(m.header.stamp) for m in msgs], dtype=np.int64)
    t = np.array([stamp_to_sec(m.header.stamp) for m in msgs])
    cols = {"t": t, "t_rel": (ns - t0) * 1e-9}  # exact differences of integer nanoseconds

    def stack(field, size):
        out = np.full((K, size), np.nan)
        for k, m in enumerate(msgs):
            v = np.asarray(getattr(m, field), dtype=float)
            if v.size == size:
                out[k] = v
        return out

    for field, prefix, names in (("z", "z_", zn), ("zd", "zd_", zn), ("zdd", "zdd_", zn)):
        arr = stack(field, g)
        cols.update({prefix + c: arr[:, i] for i, c in enumerate(names)})
    cov = stack("covariance", 4 * g * g)
    diag = np.sqrt(np.clip(cov.reshape(K, 2 * g, 2 * g)[:, range(2 * g), range(2 * g)], 0, None))
    cols.update({f"sd_z_{c}": diag[:, i] for i, c in enumerate(zn)})
    cols.update({f"sd_zd_{c}": diag[:, g + i] for i, c in enumerate(zn)})
    for field, prefix in (("q", "q_"), ("qd", "qd_")):
        arr = stack(field, len(qn))
        cols.update({prefix + c: arr[:, i] for i, c in enumerate(qn)})
    cols["branch"] = np.array([m.branch for m in msgs], dtype=float)
    if hasattr(first, "trust_level"):
        cols["trust"] = np.array([m.trust_level for m in msgs], dtype=float)
    nb = max(len(m.branch_probabilities) for m in msgs)
    if nb:
        bp = stack("branch_probabilities", nb)
        cols.update({f"p_branch{b}": bp[:, b] for b in range(nb)})
    if inputs:
        u = stack("input_forces", len(inputs))
        ucov = stack("input_covariance", len(inputs) ** 2).reshape(K, len(inputs), len(inputs))
        for i, c in enumerate(inputs):
            cols[f"input_{c}"] = u[:, i]
            cols[f"sd_input_{c}"] = np.sqrt(np.clip(ucov[:, i, i], 0, None))
    if particles:
        ps = np.array(sorted(particles))
        idx = np.searchsorted(ps[:, 0], t + 1e-9, side="right") - 1
        ok = idx >= 0
        for j, key in ((1, "ess"), (2, "unique_particles")):
            col = np.full(K, np.nan)
            col[ok] = ps[idx[ok], j]
            cols[key] = col
    return cols


def _summary_rows(metrics_path: str) -> list[dict]:
    doc = json.load(open(metrics_path, encoding="utf-8"))
    out = []
    for name, entry in doc.get("estimators", {}).items():
        m = entry.get("metrics") or {}
        row = {"estimator": name}
        for key in ("rmse", "max_error"):
            for part, vals in (m.get(key) or {}).items():
                for i, v in enumerate(vals or []):
                    row[f"{key}_{part}_{i}"] = v
        for key in ("nees", "nis"):
            row[f"{key}_mean"] = (m.get(key) or {}).get("mean")
        row["acquired_after_s"] = (m.get("convergence") or {}).get("acquired_after")
        row["realtime_factor"] = m.get("realtime_factor")
        row["step_time_us_mean"] = (m.get("step_time_us") or {}).get("mean")
        row["suitability"] = (m.get("suitability") or {}).get("level")
        for key, v in (m.get("counters") or {}).items():
            if not isinstance(v, dict):
                row[key] = v
        out.append(row)
    return out


def _write_csv(path: str, cols: dict) -> None:
    keys = list(cols) if isinstance(cols, dict) else list(dict.fromkeys(k for r in cols for k in r))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(keys)
        if isinstance(cols, dict):
            w.writerows(zip(*(np.asarray(cols[k]).tolist() for k in keys)))
        else:
            w.writerows([[r.get(k, "") for k in keys] for r in cols])


def _write_parquet(path: str, cols: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({k: np.asarray(v) for k, v in cols.items()}), path)


def export_estimates(bag, out_dir, fmt: str = "csv", names=None) -> list[str]:
    """Write the tables of :func:`estimate_tables` into ``out_dir`` as ``<name>.<fmt>``
    (and ``summary.csv`` from a ``metrics.json`` next to the bag); the paths written."""
    if fmt not in FORMATS:
        raise DataError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise DataError("--format parquet needs pyarrow: pip install 'mbde[parquet]' (csv needs nothing)") from None
    tables = estimate_tables(bag, names)
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, cols in tables.items():
        path = os.path.join(out_dir, f"{name}.{fmt}")
        (_write_parquet if fmt == "parquet" else _write_csv)(path, cols)
        paths.append(path)
    metrics = os.path.join(os.path.dirname(os.path.abspath(os.fspath(bag))), "metrics.json")
    if os.path.isfile(metrics):
        rows = [r for r in _summary_rows(metrics) if r["estimator"] in tables]
        if rows:
            path = os.path.join(out_dir, "summary.csv")
            _write_csv(path, rows)
            paths.append(path)
    return paths
