"""The replay's PNG plots, rendered in one forked process off the critical path.

matplotlib costs ~0.3 s to import and ~0.3 s per figure. Rendered inside every estimator
task, that is paid once per worker process and adds to the estimators' wall time. Here
one process (forked from ``mbde replay`` when the first estimator finishes: it inherits
the opened bags, so only small jobs travel through its queue) imports matplotlib once and
draws each estimator's figure as soon as that estimator's result arrives, while the other
estimators still run, then ``summary.png`` while the estimates bag is written. The file
names do not depend on the rendering (:func:`run_plots`), so the report can list them.
"""
from __future__ import annotations

import multiprocessing
import os
from types import SimpleNamespace

from mbde_core.replay.plots import has_branch_probabilities, plot_branches, plot_run, plot_summary
from mbde_core.runs.stop import child_setup


def run_plots(path: str, series: dict) -> list[str]:
    """The PNGs of one estimator's run: its figure ``path`` and, if it reports assembly-
    branch probabilities, ``<path stem>_branches.png``."""
    out = [path]
    if has_branch_probabilities(series):
        out.append(os.path.splitext(path)[0] + "_branches.png")
    return out


def _serve(queue, sources) -> None:
    child_setup()  # Ctrl-C is the parent's to handle; SIGTERM ends this renderer silently

    failed = 0
    while True:
        job = queue.get()
        if job is None:
            break
        kind, bag, paths, payload = job
        try:
            if kind == "summary":
                plot_summary(paths[0], payload)
                continue
            run = SimpleNamespace(name=payload[0], series=payload[1])
            plot_run(paths[0], sources[bag], run)
            if len(paths) > 1:
                plot_branches(paths[1], sources[bag], run)
        except Exception:  # noqa: BLE001 - a figure that fails is missing from the report, nothing else
            failed += 1
    os._exit(1 if failed else 0)


class PlotWorker:
    """Queue of figures for one forked renderer (see module doc); start() is lazy."""

    def __init__(self, sources: dict):
        self.sources = sources
        self.proc = None
        self.queue = None

    def _start(self) -> None:
        if self.proc is None:
            method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
            ctx = multiprocessing.get_context(method)
            self.queue = ctx.SimpleQueue()
            self.proc = ctx.Process(target=_serve, args=(self.queue, self.sources), daemon=True)
            self.proc.start()

    def estimator(self, bag: str, out_dir: str, result) -> list[str]:
        """Queue the figures of one estimator's result; returns their paths."""
        paths = run_plots(os.path.join(out_dir, f"{result.name}.png"), result.series)
        self._start()
        self.queue.put(("run", bag, paths, (result.name, result.series)))
        return paths

    def summary(self, bag: str, path: str, doc: dict) -> list[str]:
        self._start()
        self.queue.put(("summary", bag, [path], doc))
        return [path]

    def stop(self) -> None:
        """End the renderer now (the figures are abandoned)."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.join(1.0)
            if self.proc.is_alive():
                self.proc.kill()
                self.proc.join()
            self.proc = None

    def finish(self) -> None:
        """Wait until every queued figure is drawn."""
        if self.proc is not None:
            self.queue.put(None)
            self.proc.join()
            self.proc = None
