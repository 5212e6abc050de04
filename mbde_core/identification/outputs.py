"""What ``mbde identify`` writes: calibrated.yaml, identification.json, plots, a table."""
from __future__ import annotations

import datetime
import json
import math
import os

import numpy as np

from mbde_core.estimators.assess.metrics import whiteness
from mbde_core.identification.calibrated import calibrated_text


def _num(v):
    v = float(v)
    return v if math.isfinite(v) else None


def summary(result, sources) -> dict:
    """The identification.json document of an IdentificationResult."""
    pm = result.pm
    corr = result.correlation
    params = {}
    for k, par in enumerate(pm.params):
        ok = bool(result.identifiable[k])
        params[par.label] = {
            "key": par.key, "unit": par.unit, "kind": pm.kinds[k], "initial": float(result.p0[k]),
            "estimate": float(result.p[k]) if ok else None, "std": _num(result.std[k]) if ok else None,
            "std_model": _num(result.std_model[k]) if ok and result.std_model is not None else None,
            "relative_std": _num(result.std[k] / abs(result.p[k])) if ok and result.p[k] != 0 else None,
            "lower": _num(pm.lower[k]), "upper": _num(pm.upper[k]), "identifiable": ok,
            "at_bound": bool(result.at_bound[k]),
        }
    ident = result.identifiability
    return {
        "recordings": sources,
        "mechanism": pm.file,
        "parameters": params,
        "correlation": {"parameters": pm.names, "matrix": [[_num(c) for c in row] for row in corr]},
        "identifiability": {
            "rank": ident.rank if ident is not None else 0,
            "eigenvalues_normalised": [float(v) for v in (ident.eigenvalues if ident is not None else [])],
            "null_directions": ident.null_directions if ident is not None else [],
        },
        "cost_per_iteration": result.history,
        "pass_starts": result.pass_starts,
        "iterations": result.iterations,
        "first_pass_iterations": result.first_pass_iterations,
        "noise_passes": result.passes,
        "stages": result.stages,
        "status": result.status,
        "noise": {"status": result.noise_status, "acceleration_sigma": [float(v) for v in result.sigma_a],
                  "sensor_sigma": result.sensor_sigma,
                  "variance_factors_last_pass": result.factors},
        "residual_whiteness": result.whiteness,
        "warnings": list(result.warnings),
        "hac_block_steps": list(result.hac_lags),
        "cost_per_factor": result.cost_per_factor,
        "timings_s": {k: v for k, v in result.timings.items() if k != "filters"},
        "initial_guess": result.timings.get("filters"),
    }


def header_lines(result, sources) -> list[str]:
    pm = result.pm
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"Calibrated by `mbde identify` ({stamp}) from {len(sources)} recording(s):"]
    lines += [f"  {s}" for s in sources]
    lines.append(f"Started from {os.path.basename(pm.file)}; {result.iterations} Levenberg-Marquardt iterations "
                 f"({result.first_pass_iterations} in the first pass), {result.passes} noise pass(es). Estimate +- std:")
    for k, par in enumerate(pm.params):
        if result.identifiable[k]:
            note = " (at its bound)" if result.at_bound[k] else ""
            lines.append(f"  {par.label} = {result.p[k]:.8g} +- {result.std[k]:.3g} {par.unit}{note} (start {result.p0[k]:.6g})")
        else:
            lines.append(f"  {par.label}: NOT identifiable from these recordings, kept at {result.p0[k]:.6g}")
    for d in (result.identifiability.null_directions if result.identifiability is not None else []):
        lines.append("  null direction (relative changes): " + ", ".join(f"{v:+.2f} {n}" for n, v in d.items()))
    lines.append("Standard deviations and correlations: identification.json next to this file.")
    return lines


def write_outputs(out: str, result, sources, source_text: str | None, sensors_doc=None, plots: bool = True) -> dict:
    """Write DIR/calibrated.yaml, DIR/identification.json and plots; returns what was written."""
    pm = result.pm
    doc = pm.document(result.p)
    if sensors_doc is not None and "sensors" not in doc:
        doc["sensors"] = sensors_doc
    text, mode = calibrated_text(source_text, pm.doc, doc, pm.params, result.p, result.std, result.identifiable,
                                 header_lines(result, sources))
    with open(os.path.join(out, "calibrated.yaml"), "w", encoding="utf-8") as fh:
        fh.write(text)
    info = summary(result, sources)
    info["calibrated_yaml"] = mode
    with open(os.path.join(out, "identification.json"), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=2)
    written = {"calibrated.yaml": mode, "identification.json": "written"}
    if plots:
        written.update({os.path.basename(p): "plot" for p in write_plots(out, result, sources)})
    return written


def write_plots(out: str, result, sources) -> list[str]:
    """cost.png (cost per iteration, log scale) and residuals.png (normalised residuals
    of every sensor and recording, with their histogram against N(0, 1))."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    fig, ax = plt.subplots(figsize=(6, 3.5))
    h = np.asarray(result.history, dtype=float)
    ax.semilogy(np.arange(len(h)), h, "o-", ms=3)
    for k in result.pass_starts[1:]:
        ax.axvline(k - 0.5, color="0.6", lw=0.8, ls="--")
    ax.set_xlabel("Levenberg-Marquardt step (dashed: new noise weights)")
    ax.set_ylabel("cost 1/2 |r|^2")
    ax.set_title("identification cost")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    paths.append(os.path.join(out, "cost.png"))
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    series = [(src, name, t, r) for src, per in zip(sources, result.residuals) for name, (t, r) in per.items()]
    if series:
        fig, axes = plt.subplots(len(series), 2, figsize=(10, 2.2 * len(series) + 0.6), squeeze=False,
                                 gridspec_kw={"width_ratios": [3, 1]})
        x = np.linspace(-4, 4, 200)
        for k, (src, name, t, r) in enumerate(series):
            ax = axes[k, 0]
            ax.plot(t - t[0], r, ",", alpha=0.6)
            ax.set_ylabel(f"{name}\n[sigma]")
            ax.set_title(os.path.basename(os.path.normpath(src)), fontsize=8, loc="left")
            ax.axhline(0, color="k", lw=0.5)
            axes[k, 1].hist(r.ravel(), bins=50, range=(-5, 5), density=True, alpha=0.7)
            axes[k, 1].plot(x, np.exp(-0.5 * x**2) / np.sqrt(2 * np.pi), "k-", lw=1)
        axes[-1, 0].set_xlabel("t [s] since the first reading")
        axes[-1, 1].set_xlabel("normalised residual")
        fig.tight_layout()
        paths.append(os.path.join(out, "residuals.png"))
        fig.savefig(paths[-1], dpi=100)
        plt.close(fig)
    return paths


def summary_table(result) -> str:
    """Human-readable table of the estimates."""
    pm = result.pm
    w = max(len(n) for n in pm.names)
    lines = [f"{'parameter':<{w}}  {'start':>12}  {'estimate':>12}  {'std':>10}  {'rel. std':>9}  unit"]
    for k, par in enumerate(pm.params):
        if result.identifiable[k]:
            rel = result.std[k] / abs(result.p[k]) if result.p[k] else float("nan")
            flag = "  (at bound)" if result.at_bound[k] else ""
            lines.append(f"{par.label:<{w}}  {result.p0[k]:>12.6g}  {result.p[k]:>12.6g}  {result.std[k]:>10.3g}  "
                         f"{rel:>9.2%}  {par.unit}{flag}")
        else:
            lines.append(f"{par.label:<{w}}  {result.p0[k]:>12.6g}  {'not identifiable':>12}")
    return "\n".join(lines)


def per_recording(jp, X, rows, recordings):
    """Per recording: trajectory, normalised residuals per sensor, their whiteness."""
    g = jp.g
    trajs, resid, white = [], [], {}
    for k, (pr, Xr, off) in enumerate(zip(jp.recs, jp.split(X), jp.offsets[:-1])):
        ev = pr.ev
        trajs.append({"t": pr.t.copy(), "z": Xr[:, :g].copy(), "zd": Xr[:, g:2 * g].copy(), "zdd": Xr[:, 2 * g:].copy(),
                      "q": None if ev is None else ev.q.copy()})
        lo, hi = off, off + pr.N
        per = {}
        for rb in rows:
            if not rb.name.startswith("obs:"):
                continue
            sel = (rb.idx >= lo) & (rb.idx < hi)
            if not np.any(sel):
                continue
            name = rb.name[4:]
            per[name] = (pr.t[rb.idx[sel] - lo], rb.r[sel].copy())
        resid.append(per)
        white[recordings[k].name] = {name: dict(whiteness(list(r)), lag1_autocorrelation=_lag1(r))
                                     for name, (_, r) in per.items()}
    return trajs, resid, white


def _lag1(r) -> float | None:
    """Largest |lag-1 autocorrelation| over the channels of residuals r (K, d)."""
    r = np.asarray(r, dtype=float)
    if r.shape[0] < 10:
        return None
    x = r - r.mean(axis=0)
    den = np.einsum("kd,kd->d", x, x)
    rho = np.where(den > 0, np.einsum("kd,kd->d", x[1:], x[:-1]) / np.where(den > 0, den, 1.0), 0.0)
    return float(rho[np.argmax(np.abs(rho))])
