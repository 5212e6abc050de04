"""One run's estimates evaluated and written as they come: what a streamed replay does
with the records of an estimator (:mod:`mbde_core.replay.worker`) or of the batch
smoother (:mod:`mbde_core.replay.smoothing`), with memory bounded whatever the bag's length.

:class:`StreamEvaluator` holds the emitted records until the ground truth has passed
their stamps, then a batch at a time evaluates them (:class:`~mbde_core.estimators.assess.metrics.RunMetrics`,
convergence, inputs; against the bag's ground truth or a smoother reference, see
:mod:`mbde_core.replay.reference`) and hands them to a :class:`RunOutput`: serialised
(:class:`~mbde_core.replay.encode.EstimateEncoder`) into the run's part file and thinned
for the plots (at most ``SERIES_POINTS`` steps).
"""
from __future__ import annotations

import math
import time

import numpy as np

from mbde_core.estimators.assess.acquisition import AcquisitionMetrics
from mbde_core.estimators.assess.metrics import RunMetrics, coordinate_errors, record_arrays, reference_nees, sigma_z
from mbde_core.estimators.stage.trust_truth import TrustSummary, trust_checks
from mbde_core.replay.encode import EstimateEncoder, ParticleSetEncoder, PartWriter
from mbde_core.replay.runner import InputMetrics
from mbde_core.replay.source import TruthWindow
from mbde_core.replay.viewables import EstimateView
from mbde_core.rosio.convert import JOINT_STATE, MECHANISM_STATE, PARTICLE_SET
from mbde_core.rosio.stamps import sec_to_ns

BATCH = 2048  # estimates evaluated and serialised together
SERIES_POINTS = 20_000  # steps kept for the plots
TRUTH_BOUND = 100_000  # truth samples held while no estimate waits: keep only the last TRUTH_KEEP
TRUTH_KEEP = 10.0  # s


class StreamEvaluator:
    """Metrics of one run's records, fed in time order (see module doc).

    source: ReplaySource (mechanism, duration, has_truth, reference); out: RunOutput or
    None (metrics only). :meth:`add_truth` the bag's ground-truth samples as read,
    :meth:`append` the records as emitted, :meth:`drain` now and then, :meth:`result`
    at the end. bound_truth: while no record waits, keep only the last TRUTH_KEEP seconds
    of more than TRUTH_BOUND truth samples (a filter that emits nothing for a long stretch); False when
    the records come later than the truth by design (the smoother: a window, or the
    whole run, after its readings)."""

    def __init__(self, source, out=None, batch: int = BATCH, bound_truth: bool = True):
        mech = source.mechanism
        self.source, self.out, self.batch = source, out, int(batch)
        self.angular = np.isin(mech.independent, mech.rel_columns)
        self.ref = getattr(source, "reference", None)  # mbde replay --reference smoother: replaces the ground truth
        self.has_truth = bool(source.has_truth)
        self.metrics = RunMetrics(self.angular, source.duration, truth=self.has_truth or self.ref is not None)
        self.conv = AcquisitionMetrics(self.angular, mech.length_scale)
        self.trust = TrustSummary()
        self.inputs = InputMetrics(mech)
        self.truth = TruthWindow(self.angular)
        self.pending: list = []  # emitted records not yet evaluated and written
        self.bound_truth = bound_truth
        self.time = 0.0  # s spent evaluating and writing

    def add_truth(self, samples) -> None:
        self.truth.extend(samples)
        if self.bound_truth and not self.pending and len(self.truth.t) > TRUTH_BOUND:  # no estimates for a long stretch
            self.truth.drop_before(self.truth.last - TRUTH_KEEP)

    def append(self, rec) -> None:
        self.pending.append(rec)

    def drain(self, final: bool = False, partial: bool = False) -> None:
        """Evaluate and write the batches whose stamps the truth has passed: full ones, any
        size with ``partial``, all with ``final``."""
        t0 = time.perf_counter()
        pending, truth, angular = self.pending, self.truth, self.angular
        while pending:
            k = min(len(pending), self.batch)
            if not final and self.has_truth and self.ref is None and pending[k - 1].estimate.stamp > truth.last:
                if not partial:
                    break
                stamps = [r.estimate.stamp for r in pending[:k]]
                k = int(np.searchsorted(stamps, truth.last, side="right"))
                if k == 0:
                    break
            elif not final and not partial and k < self.batch:
                break
            batch, pending[:k] = pending[:k], []
            arrays = record_arrays(batch)
            if self.ref is not None:
                tr = self.ref.at(arrays["stamps"])
                self.metrics.add(arrays, tr["z"], tr["zd"], tr["zdd"], tr["cov"])
            elif self.has_truth:
                tr = truth.at(arrays["stamps"])
                v = self.metrics.add(arrays, tr["z"], tr["zd"], tr["zdd"])
                bp = _branch_probabilities(batch)
                errs = {"z": coordinate_errors(arrays["z"], tr["z"], angular), "zd": arrays["zd"] - tr["zd"],
                        "zdd": arrays["zdd"] - tr["zdd"]}
                sig = sigma_z(arrays["covs"], len(angular))
                self.conv.add(arrays["stamps"], errs, sig, v, bp,
                              None if bp is None else _truth_branch(truth, arrays["stamps"]))
                self.trust.add(arrays["stamps"], [r.trust for r in batch], *trust_checks(errs["z"], sig, v))
                self.inputs.add(batch, arrays["stamps"], tr["effort"])
                truth.drop_before(arrays["stamps"][-1])
            else:
                tr = None
                self.metrics.add(arrays)
            if self.ref is not None or not self.has_truth:
                self.trust.add(arrays["stamps"], [r.trust for r in batch])
            if self.out is not None:
                self.out.add(batch, arrays, tr, angular)
        self.time += time.perf_counter() - t0

    def result(self, effort_ok: bool = True) -> dict:
        """The metrics dict of the run (replay's: RMSE, NEES... convergence and inputs
        against ground truth)."""
        result = self.metrics.result()
        result["trust"] = self.trust.result()
        if self.has_truth and self.ref is None:
            result["convergence"] = self.conv.result()
            if effort_ok:
                im = self.inputs.result()
                if im:
                    result["inputs"] = im
        return result


def _truth_branch(truth, stamps) -> np.ndarray:
    """The true assembly-branch label at each stamp (the sample at or after it)."""
    t = np.asarray(truth.t)
    labels = np.array([row.get("branch", -1) for row in truth.rows], dtype=int)
    return labels[np.clip(np.searchsorted(t, stamps), 0, len(t) - 1)]


def _branch_probabilities(batch):
    """(K, B) branch probabilities of a batch of records, None if they have none (or vary)."""
    probs = [r.estimate.branch_probabilities for r in batch]
    if not all(p is not None and len(p) for p in probs) or len({len(p) for p in probs}) != 1:
        return None
    return np.array(probs, dtype=float)


class RunOutput:
    """Part file writer, particle thinning and the thinned series of one run (task: the
    run's ReplayTask: name, part path, particle budget; source given: /tf and markers too)."""

    def __init__(self, task, mech, total_steps: int, source=None):
        self.mech = mech
        self.part = PartWriter(task.part) if task.part else None
        self.encoder = EstimateEncoder(mech) if task.part else None
        ns = f"/mbde/{task.name}"

        self.topics = [(ns + "/state", MECHANISM_STATE), (ns + "/joint_states", JOINT_STATE)]
        self.view = None
        if self.part is not None and source is not None:
            self.view = EstimateView(task.name, mech, source, self.encoder)
            self.topics += self.view.topics
        if self.part is not None:
            for k, (topic, typename) in enumerate(self.topics):
                self.part.declare(k, topic, typename)
            self.part.flush()
        self.particle_topic = (ns + "/particles", PARTICLE_SET)
        self.budget, self.total_steps = task.particle_budget, total_steps
        self.every = None
        self.cloud_encoder = None
        self.k = 0
        self.clouds: list = []  # (t_ns, bytes) waiting for the estimates of their step
        self.stride = max(1, math.ceil(total_steps / SERIES_POINTS))
        self.kept: dict[str, list] = {"t": [], "z": [], "sig": [], "ez": [], "nees": [], "bp": []}
        self.seen = 0

    def particles(self, est, rec) -> None:
        if self.every is not None and (self.part is None or self.k % self.every):  # not kept: not built
            self.k += 1
            return
        cloud = est.particles()
        if cloud is not None:
            if self.every is None:
                per = cloud.z.size * 2 + 2 * len(cloud.weight)
                self.every = max(1, int(np.ceil(per * self.total_steps / self.budget)))
            if self.k % self.every == 0 and self.part is not None:
                cloud.stamp = rec.estimate.stamp
                if self.cloud_encoder is None:
                    self.cloud_encoder = ParticleSetEncoder(self.encoder.factory, self.mech.independent_names, "world")
                if self.particle_topic not in self.topics:
                    self.topics.append(self.particle_topic)
                    self.part.declare(len(self.topics) - 1, *self.particle_topic)
                self.clouds.append((sec_to_ns(cloud.stamp), self.cloud_encoder.encode(cloud)))
        self.k += 1

    def add(self, batch, arrays, truth, angular) -> None:
        if self.part is not None:
            ns, states, joints = self.encoder.encode([r.estimate for r in batch], [r.trust for r in batch])
            pt = self.topics.index(self.particle_topic) if self.clouds else None
            c = 0
            views = self.view.encode(batch) if self.view is not None else [()] * len(ns)
            for t, s, j, extra in zip(ns, states, joints, views):
                self.part.write(t, 0, 0, s)
                self.part.write(t, 0, 1, j)
                for topic, data in extra:  # /tf, markers (viewables.py)
                    self.part.write(t, 0, topic, data)
                while c < len(self.clouds) and self.clouds[c][0] <= t:
                    self.part.write(self.clouds[c][0], 1, pt, self.clouds[c][1])
                    c += 1
            del self.clouds[:c]
            self.part.flush()  # a batch at a time for the bag's merger (mbde_core.replay.merge)
        sel = np.arange((-self.seen) % self.stride, len(batch), self.stride)
        self.seen += len(batch)
        if not len(sel):
            return
        g = self.mech.dof
        z = arrays["z"][sel]
        covs = [arrays["covs"][i] for i in sel]
        have_cov = all(c is not None for c in covs)
        sig = np.sqrt(np.clip(np.array([np.diag(c)[:g] for c in covs]), 0, None)) if have_cov else np.full((len(sel), g), np.nan)
        self.kept["t"].append(arrays["stamps"][sel])
        bp = _branch_probabilities([batch[i] for i in sel])
        if bp is not None:
            self.kept["bp"].append(bp)
        self.kept["z"].append(z)
        self.kept["sig"].append(sig)
        if truth is not None:
            ez = coordinate_errors(z, truth["z"][sel], angular)
            self.kept["ez"].append(ez)
            if have_cov:
                ex = np.hstack([ez, arrays["zd"][sel] - truth["zd"][sel]])
                ref_cov = truth.get("cov")
                self.kept["nees"].append(reference_nees(ex, covs, None if ref_cov is None else ref_cov[sel]))

    def close(self) -> None:
        if self.part is not None:
            pt = self.topics.index(self.particle_topic) if self.clouds else None
            for t, data in self.clouds:
                self.part.write(t, 1, pt, data)
            self.part.close()

    def series(self) -> dict:
        out = {k: np.concatenate(v) for k, v in self.kept.items() if v}
        out["stride"] = self.stride
        return out
