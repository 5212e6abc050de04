"""The learned minimal-coordinate map (paper 004 sec. 3.4 and 5.2): a tanh MLP for g_n(z).

Paper 004 approximates q_n = g_n(q_m) by a network of two tanh layers of 8 units and a
linear output layer, with a periodic input for the crank angle, trained offline on
configurations of the natural-coordinate model. Here:

- inputs: the independent coordinates z (g,), through (sin z, cos z) for angles (periodic
  network) and (z - center) / half_width otherwise (:class:`mbde_core.learn.mlp.Features`);
- outputs: the dependent coordinates q[dependent], each normalised by its mean and
  standard deviation; the independent coordinates are copied (q[independent] = z, exact);
- training set: ``samples`` configurations per independent coordinate on a grid over its
  domain (angles: one full turn around the initial configuration; otherwise +- one
  length scale, or ``domain``), assembled by continuation from the mechanism's initial
  configuration (neighbour's solution as Newton guess, so one assembly branch) with the
  exact map (:mod:`.exact`) giving the targets q, dq/dz, d2q/dz2 (and d3q/dz3);
- loss: mean squared error of the value and of the derivatives up to the highest order
  with a non-zero weight (``order_weights``, default 1, 1, 1, 0 for orders 0..3), each
  normalised by its target's mean square. Fitting derivatives too (Sobolev training) is
  our choice: the filter uses the map's second and third derivatives (eqs. 35-49), and
  the engine gives them for free; the paper's Adam/TensorFlow fit used values only;
- optimiser: L-BFGS with scipy's strong-Wolfe line search (:func:`mbde_core.learn.fit.lbfgs`),
  ``restarts`` seeded Glorot initialisations, the best kept, everything bounded by
  ``time_limit`` seconds (well under a minute);
- the derivatives of the trained map are the network's analytic jets (orders 1-3).

Accuracy is measured on held-out configurations (seeded uniform draws over the domain,
none on the training grid): per derivative order k, the largest error over all outputs
and samples relative to the largest magnitude of the exact k-th derivative
(``accuracy['rel_max'][k]``). Tolerances we document and test on the slider-crank
(2 x 8 units, default options): value 1e-4, first derivative 1e-3, second 5e-3, third
2e-2 (TOLERANCES; typical results: 1e-6, 3e-5, 2e-4, 1e-3 on the slider-crank and
3e-6, 5e-5, 4e-4, 1.5e-3 on the MSC four-bar).

Weights and normalisation are saved to / loaded from ``.npz`` (``mbde learn-map``), with
the mechanism's coordinate names, so a map is never used on another linkage.
"""
from __future__ import annotations

import json
import os
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.errors import DataError
from mbde_core.learn.fit import fit
from mbde_core.learn.mlp import Features, TanhMLP
from mbde_core.minimal.exact import ExactMap
from mbde_core.minimal.jet import MapJet

FORMAT = "mbde-learned-map-1"

DEFAULT_OPTIONS = {
    "hidden": [8, 8],               # units per tanh layer (paper 004: 2 x 8)
    "samples": 0,                   # grid points per independent coordinate (0: 720 for g = 1, 40 for g >= 2)
    "held_out": 400,                # held-out validation configurations
    "order_weights": [1.0, 1.0, 1.0, 0.0],   # loss weights of orders 0..3
    "seed": 0,
    "restarts": 2,
    "max_iterations": 4000,         # L-BFGS iterations per restart
    "time_limit": 40.0,             # s, whole fit
    "domain": {},                   # {coordinate name: [lo, hi]} (default: full turn / +- length scale)
}

TOLERANCES = (1e-4, 1e-3, 5e-3, 2e-2)   # documented held-out rel_max per order (see module doc)


@dataclass
class LearnedMap:
    """g_n(z) by a trained :class:`TanhMLP` (see the module docstring).

    mech: the Mechanism it belongs to; net; features; out_cols (n_out,) = the dependent
    coordinates; mean, scale (n_out,) output normalisation; accuracy and options dicts.
    """

    mech: object
    net: TanhMLP
    features: Features
    out_cols: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    accuracy: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    source = "learned"

    def describe(self) -> str:
        return f"learned (tanh MLP {'-'.join(map(str, self.net.sizes))}, {self.net.n_params} parameters)"

    @property
    def g(self) -> int:
        return self.mech.dof

    def evaluate(self, z, order: int = 3, q_guess=None) -> MapJet:
        """MapJet at z (g,) or (N, g); q_guess is ignored (the network has one branch)."""
        mech, g = self.mech, self.g
        Z = np.asarray(z, dtype=float).reshape(-1, g)
        N = Z.shape[0]
        y = self.net.jet(self.features.jet(Z, order))
        iz, oc = mech.independent, self.out_cols
        q = np.empty((N, mech.n))
        q[:, iz] = Z
        q[:, oc] = self.mean + self.scale * y[0]
        J = np.zeros((N, mech.n, g))
        J[:, iz, np.arange(g)] = 1.0
        J[:, oc] = self.scale[:, None] * y[1]
        H2 = H3 = None
        if order >= 2:
            H2 = np.zeros((N, mech.n, g, g))
            H2[:, oc] = self.scale[:, None, None] * y[2]
        if order >= 3:
            H3 = np.zeros((N, mech.n, g, g, g))
            H3[:, oc] = self.scale[:, None, None, None] * y[3]
        return MapJet(q, J, H2, H3, np.ones(N, dtype=bool))

    # -- files -------------------------------------------------------------------------------
    def save(self, path: str) -> None:
        """Write the map to ``path`` (.npz)."""
        arrays = {f"W{k}": W for k, (W, _) in enumerate(self.net.weights)}
        arrays.update({f"b{k}": b for k, (_, b) in enumerate(self.net.weights)})
        meta = {"format": FORMAT, "mechanism": self.mech.name, "coordinate_names": list(self.mech.coordinate_names),
                "independent": [int(i) for i in self.mech.independent], "layers": len(self.net.weights),
                "accuracy": self.accuracy, "options": self.options}
        with open(path, "wb") as fh:
            np.savez(fh, meta=np.array(json.dumps(meta)), out_cols=self.out_cols, mean=self.mean, scale=self.scale,
                     angle=self.features.angle, center=self.features.center, half_width=self.features.half_width,
                     **arrays)

    @staticmethod
    def load(path: str, mech) -> "LearnedMap":
        """Read a map written by :meth:`save` for ``mech`` (DataError if missing or not for it)."""
        path = os.fspath(path)
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(str(data["meta"]))
                arrays = {k: data[k] for k in data.files}
        except FileNotFoundError:
            raise DataError(f"{path}: learned map file not found (make one with `mbde learn-map`)") from None
        except (OSError, ValueError, KeyError) as exc:
            raise DataError(f"{path}: not a learned map file ({exc})") from None
        if meta.get("format") != FORMAT:
            raise DataError(f"{path}: unknown learned-map format {meta.get('format')!r}")
        if meta["coordinate_names"] != list(mech.coordinate_names) or meta["independent"] != [int(i) for i in mech.independent]:
            raise DataError(f"{path}: trained for another mechanism ({meta['mechanism']}: coordinates "
                            f"{', '.join(meta['coordinate_names'])}; this one: {', '.join(mech.coordinate_names)})")
        weights = [(arrays[f"W{k}"], arrays[f"b{k}"]) for k in range(int(meta["layers"]))]
        feats = Features(arrays["angle"].astype(bool), arrays["center"], arrays["half_width"])
        return LearnedMap(mech, TanhMLP(weights), feats, arrays["out_cols"].astype(np.intp), arrays["mean"],
                          arrays["scale"], meta.get("accuracy", {}), meta.get("options", {}))


# ------------------------------------------------------------------------------------------
# sampling
# ------------------------------------------------------------------------------------------
def _domains(mech, options):
    """(lo, hi, periodic) per independent coordinate."""
    names = mech.independent_names
    given = options.get("domain") or {}
    for key in given:
        if key not in names:
            raise DataError(f"learn domain: {key!r} is not an independent coordinate ({', '.join(names)})")
    out = []
    for i, col in enumerate(mech.independent):
        z0 = float(mech.q0[col])
        if names[i] in given:
            lo, hi = (float(v) for v in given[names[i]])
            if not hi > lo:
                raise DataError(f"learn domain of {names[i]}: need lo < hi, got [{lo}, {hi}]")
            periodic = col in mech.rel_columns and np.isclose(hi - lo, 2 * np.pi)
        elif col in mech.rel_columns:
            lo, hi, periodic = z0 - np.pi, z0 + np.pi, True
        else:
            lo, hi, periodic = z0 - mech.length_scale, z0 + mech.length_scale, False
        out.append((lo, hi, periodic))
    return out


def sample_configurations(mech, samples: int, domains):
    """Grid of z over the domains, assembled by continuation from the initial configuration.

    Returns (Z (N, g), Q (N, n)) of the assemblable grid points (one branch: a step to a
    neighbour must converge, keep the sign of det(Phi_q,d) and move no point by more
    than a quarter of the length scale).
    """
    g = mech.dof
    axes = []
    for lo, hi, periodic in domains:
        axes.append(lo + (hi - lo) * np.arange(samples) / samples if periodic else np.linspace(lo, hi, samples))
    shape = tuple(len(a) for a in axes)
    z0 = mech.q0[mech.independent]
    start = tuple(int(np.argmin(np.abs(a - z0[i]))) for i, a in enumerate(axes))
    dep = mech.dependent
    sign0 = np.sign(np.linalg.det(mech.phi_q(mech.q0)[:, dep]))
    solved = {}
    q, ok = kinematics.solve_position(mech, np.array([a[k] for a, k in zip(axes, start)]), mech.q0.copy())
    if not ok:
        raise DataError("learn-map: the initial configuration's grid neighbour cannot be assembled")
    solved[start] = q
    queue = deque([start])
    limit = 0.25 * mech.length_scale
    while queue:
        idx = queue.popleft()
        for d in range(g):
            for step in (-1, 1):
                nb = list(idx)
                nb[d] += step
                if not 0 <= nb[d] < shape[d]:
                    continue
                nb = tuple(nb)
                if nb in solved:
                    continue
                zq = np.array([a[k] for a, k in zip(axes, nb)])
                qn, ok = kinematics.solve_position(mech, zq, solved[idx].copy())
                if not ok or np.max(np.abs(qn - solved[idx])) > limit:
                    continue
                if np.sign(np.linalg.det(mech.phi_q(qn)[:, dep])) != sign0:
                    continue
                solved[nb] = qn
                queue.append(nb)
    keys = sorted(solved)
    Z = np.array([[a[k] for a, k in zip(axes, key)] for key in keys])
    Q = np.array([solved[key] for key in keys])
    return Z, Q


def _check_periodic(mech, Z, Q, domains):
    """A periodic (1-DOF, full turn) map must close: g_n(lo) must continue g_n(hi)."""
    if mech.dof != 1 or not domains[0][2] or len(Z) < 4:
        return
    order = np.argsort(Z[:, 0])
    Qs = Q[order]
    if not np.isclose(Z[order[-1], 0] - Z[order[0], 0], 2 * np.pi * (1 - 1 / len(Z)), rtol=1e-6):
        raise DataError(f"learn-map: {mech.independent_names[0]} cannot make a full turn on this branch "
                        "(give `domain` for a partial range)")
    step = np.max(np.abs(np.diff(Qs[:, mech.dependent], axis=0)), axis=0)
    seam = np.abs(Qs[0, mech.dependent] - Qs[-1, mech.dependent])
    bad = seam > 3.0 * step + 1e-9
    if bad.any():
        names = [mech.coordinate_names[c] for c in mech.dependent[bad]]
        raise DataError(f"learn-map: {', '.join(names)} do(es) not come back after a full turn of "
                        f"{mech.independent_names[0]} (winding angle or branch change): use map 'exact'")


def _targets(jet, out_cols, mean, scale, K):
    t = [(jet.q[:, out_cols] - mean) / scale, jet.J[:, out_cols] / scale[:, None]]
    if K >= 2:
        t.append(jet.H2[:, out_cols] / scale[:, None, None])
    if K >= 3:
        t.append(jet.H3[:, out_cols] / scale[:, None, None, None])
    return t[: K + 1]


def map_errors(learned, exact_jet: MapJet, Z) -> dict:
    """Held-out errors of a learned map against exact jets at Z: per order 0..3, the max
    abs error, the max abs exact value (over dependent outputs) and their ratio."""
    lj = learned.evaluate(Z, order=3)
    oc = learned.out_cols
    out = {"abs_max": [], "ref_max": [], "rel_max": [], "rel_rms": []}
    for a, b in ((lj.q, exact_jet.q), (lj.J, exact_jet.J), (lj.H2, exact_jet.H2), (lj.H3, exact_jet.H3)):
        e = np.abs(a[:, oc] - b[:, oc])
        ref = float(np.max(np.abs(b[:, oc]))) or 1.0
        out["abs_max"].append(float(e.max()))
        out["ref_max"].append(ref)
        out["rel_max"].append(float(e.max()) / ref)
        out["rel_rms"].append(float(np.sqrt(np.mean(e**2))) / ref)
    return out


def held_out_set(mech, domains, Zs, Qs, count: int, seed: int):
    """Seeded uniform configurations over the domains (not on the grid) and exact jets."""
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0x4E1D,)))
    lo = np.array([d[0] for d in domains])
    hi = np.array([d[1] for d in domains])
    Z = lo + (hi - lo) * rng.random((count, mech.dof))
    near = np.argmin(np.sum((Z[:, None, :] - Zs[None, :, :]) ** 2, axis=2), axis=1)
    jet = ExactMap(mech).evaluate(Z, order=3, q_guess=Qs[near])
    keep = jet.ok & (np.max(np.abs(jet.q - Qs[near]), axis=1) < 0.25 * mech.length_scale)
    return Z[keep], MapJet(jet.q[keep], jet.J[keep], jet.H2[keep], jet.H3[keep], jet.ok[keep])


def train_map(mech, options: dict | None = None, verbose=None):
    """Train a LearnedMap for ``mech``. Returns (map, report dict).

    options: see DEFAULT_OPTIONS (hidden, samples, held_out, order_weights, seed,
    restarts, max_iterations, time_limit, domain). verbose: optional print function.
    """
    opts = dict(DEFAULT_OPTIONS)
    opts.update(options or {})
    g = mech.dof
    samples = int(opts["samples"]) or (720 if g == 1 else 40)
    weights = [float(w) for w in opts["order_weights"]] + [0.0] * 4
    weights = weights[:4]
    K = max(k for k in range(4) if weights[k] > 0 or k == 0)
    t0 = time.perf_counter()
    domains = _domains(mech, opts)
    Z, Q = sample_configurations(mech, samples, domains)
    _check_periodic(mech, Z, Q, domains)
    exact = ExactMap(mech).evaluate(Z, order=max(K, 1), q_guess=Q)
    out_cols = np.asarray(mech.dependent, dtype=np.intp)
    mean = exact.q[:, out_cols].mean(axis=0)
    scale = np.maximum(exact.q[:, out_cols].std(axis=0), 1e-3 * mech.length_scale)
    angle = np.array([d[2] or (c in mech.rel_columns) for d, c in zip(domains, mech.independent)], dtype=bool)
    center = np.array([0.5 * (d[0] + d[1]) for d in domains])
    half = np.array([0.5 * (d[1] - d[0]) for d in domains])
    feats = Features(angle, center, half)
    phi = feats.jet(Z, K)
    targets = _targets(exact, out_cols, mean, scale, K)
    sizes = [feats.p] + [int(h) for h in opts["hidden"]] + [len(out_cols)]
    sample_time = time.perf_counter() - t0
    if verbose:
        verbose(f"sampled {len(Z)} configurations in {sample_time:.2f} s; fitting {'-'.join(map(str, sizes))} "
                f"tanh MLP on orders 0..{K} (L-BFGS, {opts['restarts']} seeded restarts)")
    net, rep = fit(sizes, phi, targets, weights[: K + 1], seed=int(opts["seed"]), restarts=int(opts["restarts"]),
                   max_iterations=int(opts["max_iterations"]), time_limit=float(opts["time_limit"]))
    lm = LearnedMap(mech, net, feats, out_cols, mean, scale, {}, {k: v for k, v in opts.items()})
    Zh, jh = held_out_set(mech, domains, Z, Q, int(opts["held_out"]), int(opts["seed"]))
    acc = map_errors(lm, jh, Zh)
    acc["held_out"] = int(len(Zh))
    acc["training_samples"] = int(len(Z))
    lm.accuracy = acc
    report = {"samples": int(len(Z)), "held_out": int(len(Zh)), "sizes": sizes, "parameters": net.n_params,
              "loss": rep.loss, "iterations": rep.iterations, "restarts": rep.restarts, "restart_losses": rep.losses,
              "fit_seconds": rep.seconds, "total_seconds": time.perf_counter() - t0, "accuracy": acc}
    return lm, report
