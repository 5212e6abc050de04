"""Replay figures: time axes relative to the first reading (bag stamps are epoch seconds),
and a summary that says something for a single estimator."""
from types import SimpleNamespace

import numpy as np
import pytest
from matplotlib.figure import Figure

from mbde_core.replay import plots


@pytest.fixture
def saved(monkeypatch):
    figs = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: figs.append(self))
    return figs


def test_run_and_branch_plots_start_at_the_first_reading(fourbar, saved):
    t = 1.7966e9 + 6.0 + 0.005 * np.arange(200)
    ser = {"t": t, "z": np.full((200, 1), 1.0), "sig": np.full((200, 1), 0.01), "ez": np.zeros((200, 1)),
           "nees": np.ones(200), "bp": np.tile([0.7, 0.3], (200, 1))}
    run = SimpleNamespace(name="ukf", series=ser)
    source = SimpleNamespace(mechanism=fourbar, reference=None, initial_branch=0)
    plots.plot_run("x.png", source, run)
    plots.plot_branches("y.png", source, run)
    for fig in saved:
        ax = fig.axes[-1] if len(fig.axes) == 1 else fig.axes[-1]
        assert ax.get_xlabel() == plots.TIME_LABEL
        for line in ax.get_lines():
            x = line.get_xdata()
            if len(x) > 2:
                assert x[0] == pytest.approx(0.0) and x[-1] == pytest.approx(0.995)


def test_summary_of_one_estimator_shows_accuracy_consistency_and_cost(saved):
    m = {"rmse": {"z": [0.02]}, "convergence": {"tracking": {"rmse": {"z": [0.01]}}, "acquired_after": 0.19},
         "nees": {"mean": 2.12, "dof": 2}, "nis": {"mean": 0.19, "mean_dof": 2.0}, "realtime_factor": 0.57,
         "counters": {"fused": 1001, "rejected_gate": 0}, "suitability": {"level": "ok"}}
    doc = {"mechanism": "slider_crank", "ground_truth": True, "units": {"z": ["rad"]},
           "estimators": {"adekf": {"metrics": m}}}
    plots.plot_summary("s.png", doc)
    (fig,) = saved
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["accuracy", "consistency: mean NEES / dof", "consistency: mean NIS / dof",
                      "real-time factor (processing time / data time)"]
    heights = [[p.get_height() for p in ax.patches if p.get_height() > 0] for ax in fig.axes]
    assert heights[0] == pytest.approx([0.02, 0.01])  # whole run, tracking
    assert 1.06 in [pytest.approx(h) for h in heights[1]]  # NEES / dof against the band
    assert heights[3] == pytest.approx([0.57])
    texts = " ".join(t.get_text() for t in fig.axes[3].texts)
    assert "fused 1001" in texts and "acquired 0.19 s" in texts
