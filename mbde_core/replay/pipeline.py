"""``mbde replay`` end to end: bags x estimators as tasks, then one output folder per bag.

1. Every bag is opened (model, sensors, initial guess: :func:`~mbde_core.replay.source.open_source`).
2. Every (bag, estimator) is one :class:`~mbde_core.replay.worker.ReplayTask` run by
   :func:`mbde_core.runs.run_tasks`: local processes (default), serially (``jobs=1``)
   or on a Dask cluster; each streams its bag and writes its estimates into a part
   file. Results do not depend on where a task runs. As each finishes, its figure is
   queued to one forked renderer (:mod:`mbde_core.replay.plot_worker`).
3. Per bag: metrics.json, the estimates bag (the part files merged in time order,
   :mod:`mbde_core.replay.merge`; on local processes by a thread of this process while
   the tasks still run, on the core it would otherwise leave idle), summary.png (queued
   to the renderer), then report.md.
   With several bags, OUT/<bag name>/ each and OUT/summary.csv + summary.md: one row
   per (bag, estimator).

A failed task is reported with its cause; the other estimators and bags are written.
"""
from __future__ import annotations

import csv
import os
import sys
import time
from dataclasses import dataclass, field

from mbde_core import runs
from mbde_core.errors import DataError
from mbde_core.estimators.options.widening import widening_line
from mbde_core.estimators.registry import traits
from mbde_core.replay.merge import LiveMerge
from mbde_core.replay.outputs import write_estimates_bag, write_metrics, write_report
from mbde_core.replay.plot_worker import PlotWorker
from mbde_core.replay.runner import resolved_options, rule_widening, suitability
from mbde_core.replay.smoothing import reference_path, smoother_reference
from mbde_core.replay.source import open_source
from mbde_core.replay.worker import ReplayTask, part_path, replay_task
from mbde_core.scenario.description import write_description
from mbde_core.trajectory.config import load_smoother_config


@dataclass
class BagOutcome:
    bag: str
    out: str
    doc: dict | None = None
    results: list = field(default_factory=list)
    failed: list = field(default_factory=list)  # [(estimator, error)]
    timings: dict = field(default_factory=dict)
    plots: list = field(default_factory=list)  # drawn PNGs (report order)
    figures: dict = field(default_factory=dict)  # estimator -> its queued PNGs
    reference: dict | None = None  # metrics.json "reference" (--reference smoother)
    notes: list = field(default_factory=list)  # metrics.json "notes", the report's: what the noise rule widened


def find_bags(paths) -> list[str]:
    """Bag directories of the arguments: a bag (has metadata.yaml) or a folder of bags."""
    out = []
    for p in paths:
        if os.path.isfile(os.path.join(p, "metadata.yaml")):
            out.append(os.path.normpath(p))
        elif os.path.isdir(p):  # hidden folders (e.g. outputs being written) are not bags of the folder
            found = sorted(os.path.join(p, d) for d in os.listdir(p)
                           if not d.startswith(".") and os.path.isfile(os.path.join(p, d, "metadata.yaml")))
            if not found:
                raise DataError(f"{p}: neither a rosbag2 bag nor a folder of bags")
            out += found
        else:
            raise DataError(f"{p}: no such bag")
    if len({os.path.basename(b) for b in out}) != len(out):
        raise DataError("bags with the same folder name: " + ", ".join(out))
    return out


def replay(bags, names, configs, out, *, storage="sqlite3", seed=0, plots=True, mechanism_file=None,
           sensors_file=None, jobs=None, scheduler=None, log=print, reference=None, config_file=None,
           reorder_window=None) -> list[BagOutcome]:
    """Run every estimator on every bag and write the outputs (see module doc). configs:
    {name: validated Spec} (:func:`mbde_core.estimators.configure.load`), resolved here for
    each bag before any run starts.

    reference ``smoother``: every bag is first smoothed (the ``smoother:`` options of
    config_file) and RMSE/NEES compare with the smoothed trajectory
    (:func:`mbde_core.replay.smoothing.smoother_reference`)."""
    t0 = time.perf_counter()
    sources = {b: open_source(b, mechanism_file, sensors_file) for b in bags}
    t_load = time.perf_counter() - t0
    for src in sources.values():
        for note in src.notes:
            log(f"warning: {note}")
    outs = {b: out if len(bags) == 1 else os.path.join(out, os.path.basename(b)) for b in bags}

    verdicts, options, widened, notes = {}, {}, {}, {}
    for b in bags:  # before running: options resolved for the bag (a bad name exits 2), a meaningless
        for name in names:  # estimator exits 2, a weak one warns (one line)
            options[(b, name)] = resolved_options(sources[b], configs[name], name)
            widened[(b, name)] = rule_widening(sources[b].mechanism, sources[b].sensors, configs[name], name,
                                               options[(b, name)])
            verdicts[(b, name)] = v = suitability(sources[b], name, options[(b, name)])
            if v.warning:
                log(f"warning: {os.path.basename(b)}: {v.message}")
        line = widening_line({name: widened[(b, name)] for name in names})
        notes[b] = [line] if line else []
        if line:  # one line: which channels, from what to what, and why
            log(f"note: {os.path.basename(b)}: {line}")
    refs = {}
    if reference == "smoother":  # streamed into a file per bag, which the tasks read back (replay/reference.py)
        smoother_cfg = load_smoother_config(config_file)
        for b in bags:
            os.makedirs(outs[b], exist_ok=True)
            sources[b].reference, refs[b] = smoother_reference(sources[b], *smoother_cfg, reference_path(outs[b]))
            log(f"reference of {b}: the batch smoother, {refs[b]['status']} after {refs[b]['iterations']} iterations "
                f"({refs[b]['wall_time_s']:.2f} s)")
    outcomes = []
    tasks = []
    for b in bags:
        bag_out = outs[b]
        os.makedirs(bag_out, exist_ok=True)
        src = sources[b]
        log(f"bag {b}: {src.mechanism.name}, {src.duration:.3f} s, "
            + ", ".join(f"{k} {v} messages" for k, v in src.expected.items())
            + ("" if src.has_truth else "; no ground truth"))
        outcomes.append(BagOutcome(b, bag_out, timings={"load": t_load / len(bags)}, reference=refs.get(b),
                                   notes=notes[b]))
        for name in names:
            tasks.append(ReplayTask(b, name, options[(b, name)], seed, part_path(bag_out, name), None,
                                    mechanism_file, sensors_file, reorder_window=reorder_window))

    # expensive first: each estimator's relative cost per simulated second (its traits)
    order = sorted(range(len(tasks)), key=lambda i: -traits(tasks[i].name).cost * sources[tasks[i].bag].duration)
    out_of = {bo.bag: bo for bo in outcomes}
    plotter = PlotWorker(sources) if plots else None
    live = scheduler is None and (runs.default_jobs() if jobs is None else int(jobs)) > 1
    mergers = {bo.bag: _live_merge(bo, sources[bo.bag], names, storage) for bo in outcomes} if live else {}

    def finished(o):
        task = tasks[order[o.index]]
        if task.bag in mergers:
            mergers[task.bag].ended(task.name)
        if plotter is not None and o.ok:
            r = o.value
            out_of[r.bag].figures[r.name] = plotter.estimator(r.bag, out_of[r.bag].out, r)

    t0 = time.perf_counter()
    try:
        done = runs.run_tasks(replay_task, [tasks[i] for i in order], sources, jobs=jobs, scheduler=scheduler,
                              label="replay", on_outcome=finished, parent_busy=live,
                              on_start=lambda: [m.start() for m in mergers.values()])
    except BaseException:  # interrupted, or the engine failed: the outputs are abandoned
        for m in mergers.values():
            m.cancel()
        if plotter is not None:
            plotter.stop()
        raise
    t_tasks = time.perf_counter() - t0
    by_task = {order[k]: o for k, o in enumerate(done)}
    for bo in outcomes:
        bo.timings["tasks"] = t_tasks
        for i, task in enumerate(tasks):
            if task.bag != bo.bag:
                continue
            o = by_task[i]
            if o.ok:
                o.value.metrics["suitability"] = verdicts[(task.bag, task.name)].as_dict()
                o.value.metrics["noise_rule_widened"] = widened[(task.bag, task.name)]
                bo.results.append(o.value)
            else:
                bo.failed.append((task.name, o.error))
                log(f"failed: {task.bag} {task.name}: {o.error}")
        _write_bag(bo, sources[bo.bag], storage, plotter, mergers.get(bo.bag))
    t0 = time.perf_counter()
    if plotter is not None:
        plotter.finish()
    for bo in outcomes:
        bo.timings["plots_wait"] = (time.perf_counter() - t0) / len(outcomes)
        t1 = time.perf_counter()
        bo.plots = _drawn(bo)
        write_report(os.path.join(bo.out, "report.md"), bo.doc, bo.plots)
        bo.timings["report"] = time.perf_counter() - t1
    if len(bags) > 1:
        write_summary(out, outcomes)
    return outcomes


def _drawn(bo: BagOutcome) -> list[str]:
    """The figures of a bag that were drawn: summary first, then in estimator order."""
    paths = [os.path.join(bo.out, "summary.png")] + [p for r in bo.results for p in bo.figures.get(r.name, [])]
    return [p for p in paths if os.path.exists(p)]


def _description(source) -> str | None:
    if source.scenario is None:
        return None

    return write_description(source.scenario)


def _live_merge(bo: BagOutcome, source, names, storage: str):
    """A LiveMerge writing bo's estimates bag from the part files as the tasks write them."""
    return LiveMerge(os.path.join(bo.out, "estimates"), source, [(n, part_path(bo.out, n)) for n in names], storage,
                     _description(source))


def _write_bag(bo: BagOutcome, source, storage: str, plotter, merger=None) -> None:
    """metrics.json, the summary figure (queued to ``plotter``) and the estimates bag
    (written by ``merger`` meanwhile if given: waited for here)."""
    results = bo.results
    for r in results:
        if r.counters.get("estimator_errors"):
            c = r.counters
            print(f"warning: {r.name} failed {c['estimator_errors']} time(s), first at t = "
                  f"{c['first_estimator_error_at']} s (last: {c['last_estimator_error']}); each failure restarted "
                  "its track from the initial guess at the next reading, as the live node does", file=sys.stderr)
    t0 = time.perf_counter()
    bo.doc = write_metrics(os.path.join(bo.out, "metrics.json"), source, results, bo.reference, bo.notes)
    bo.timings["metrics"] = time.perf_counter() - t0
    if plotter is not None and results:
        plotter.summary(bo.bag, os.path.join(bo.out, "summary.png"), bo.doc)
    t0 = time.perf_counter()
    if merger is not None:
        merger.join()
    else:
        write_estimates_bag(os.path.join(bo.out, "estimates"), source, results, storage, _description(source))
    for name in [r.name for r in results] + [name for name, _ in bo.failed]:
        if os.path.exists(_part(bo.out, name)):
            os.remove(_part(bo.out, name))
    if getattr(source, "reference", None) is not None and os.path.exists(source.reference.path):
        os.remove(source.reference.path)
    bo.timings["write"] = time.perf_counter() - t0


def _part(out_dir, name):
    return part_path(out_dir, name)


SUMMARY_COLUMNS = ["bag", "estimator", "rmse_z", "rmse_zd", "nees", "nis", "trust", "step_us", "rtf", "fused",
                   "estimator_errors", "error"]


def summary_rows(outcomes) -> list[dict]:
    rows = []
    for bo in outcomes:
        for name, entry in (bo.doc or {}).get("estimators", {}).items():
            m = entry["metrics"] or {}
            rows.append({"bag": os.path.basename(bo.bag), "estimator": name,
                         "rmse_z": _join((m.get("rmse") or {}).get("z")), "rmse_zd": _join((m.get("rmse") or {}).get("zd")),
                         "nees": (m.get("nees") or {}).get("mean"), "nis": (m.get("nis") or {}).get("mean"),
                         "trust": ((m.get("trust") or {}).get("final") or {}).get("level"),
                         "step_us": (m.get("step_time_us") or {}).get("mean"), "rtf": m.get("realtime_factor"),
                         "fused": (m.get("counters") or {}).get("fused"),
                         "estimator_errors": (m.get("counters") or {}).get("estimator_errors"), "error": ""})
        for name, err in bo.failed:
            rows.append({"bag": os.path.basename(bo.bag), "estimator": name, "error": err})
    return rows


def write_summary(out: str, outcomes) -> str:
    """OUT/summary.csv and summary.md over all bags; returns the text table."""
    rows = summary_rows(outcomes)
    with open(os.path.join(out, "summary.csv"), "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=SUMMARY_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    text = summary_text(rows)
    with open(os.path.join(out, "summary.md"), "w", encoding="utf-8") as fh:
        fh.write("# mbde replay summary\n\n```\n" + text + "\n```\n")
    return text


def summary_text(rows) -> str:
    cols = ["bag", "estimator", "RMSE z", "RMSE zd", "NEES", "NIS", "trust", "us/step", "RTF", "fused", "errors"]
    keys = ["bag", "estimator", "rmse_z", "rmse_zd", "nees", "nis", "trust", "step_us", "rtf", "fused", "estimator_errors"]
    table = []
    for r in rows:
        if r.get("error"):
            table.append([r["bag"], r["estimator"], "failed: " + r["error"][:60]] + [""] * (len(cols) - 3))
            continue
        table.append([_fmt(r.get(k)) for k in keys])
    widths = [max(len(c), *(len(t[i]) for t in table)) if table else len(c) for i, c in enumerate(cols)]
    fmt = lambda vals: "  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(vals, widths)))  # noqa: E731
    return "\n".join([fmt(cols)] + [fmt(t) for t in table])


def _join(v):
    return None if v is None else "/".join(format(x, ".3g") for x in v)


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return format(v, ".3g")
    return str(v)
