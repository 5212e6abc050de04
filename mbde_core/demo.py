"""`make demo`: the headline of mbde in three short runs (under a minute on 2 cores).

Run with ``python -m mbde_core.demo``. Each run simulates a scenario into a bag under
``out/demo/`` and replays it (``mbde simulate`` + ``mbde replay``, reports and estimates
bags left there):

1. the particle filter (paper 000) on ``pf_sim``: the four-bar released from 60 deg, one
   gyroscope on the rocker, the filter started from the uniform prior (crank angle over
   the circle, both assembly branches): it finds the pose *and the assembly branch*
   (branch-probability plot ``out/demo/pf/pf_branches.png``);
2. the ADE-KF (paper 004) on ``adekf_slider_crank``: the unknown motor torque and the
   state of a slider-crank from one accelerometer on the slider;
3. the Kalman observers of paper 003 (UKF, errorEKF, DEKF, CEKF, DIEKFpm) on
   ``fourbar_gyro`` (gyroscope on the coupler, gravity model error +1 m/s^2).

It ends with a summary of the three, read from each replay's ``metrics.json``.
"""
from __future__ import annotations

import json
import math
import os
import sys

from mbde_core.cli.main import main as mbde
from mbde_core.config.paths import config_path

OUT = os.path.join("out", "demo")
KALMAN = "ukf,errorekf,dekf,cekf,diekfpm"


def _run(name: str, scenario: str, settings: list[str], estimators: str, config: str, plots: bool) -> dict:
    """simulate + replay into out/demo/<name>/; the replay's metrics.json."""
    bag, rep = os.path.join(OUT, name, "bag"), os.path.join(OUT, name)
    sets = [a for s in settings for a in ("--set", s)]
    if mbde(["simulate", config_path("scenarios", scenario), "--out", bag, "--force", *sets]):
        raise SystemExit(f"demo: simulating {scenario} failed")
    args = ["replay", bag, "--estimators", estimators, "--config", config_path("estimators", config),
            "--out", os.path.join(rep, "replay"), "--force"] + ([] if plots else ["--no-plots"])
    if mbde(args):
        raise SystemExit(f"demo: replaying {scenario} failed")
    with open(os.path.join(rep, "replay", "metrics.json"), encoding="utf-8") as fh:
        return json.load(fh)


def _deg(rad) -> str:
    return "-" if rad is None else f"{math.degrees(rad):.2f} deg"


def pf_summary(doc: dict) -> list[str]:
    m = doc["estimators"]["pf"]["metrics"]
    conv = m.get("convergence", {})
    branch_t = conv.get("branch_identified_after")
    lines = ["particle filter (paper 000), pf_sim: unknown start (uniform crank angle, both assembly branches), "
             "one gyroscope on the rocker"]
    if branch_t is None:
        lines.append(f"  assembly branch: NOT identified (P(true branch) at the end {conv.get('branch_probability_final', 0):.3f})")
    else:
        lines.append(f"  assembly branch: the true one identified after {branch_t:.3f} s "
                     f"(P = {conv['branch_probability_final']:.3f} at the end)")
    t_acq = conv.get("acquired_after")
    whole = _deg(m["rmse"]["z"][0])
    if t_acq is None:
        lines.append(f"  crank angle: never tracked within 5 sigma to the end (whole-run RMSE {whole})")
    else:
        lines.append(f"  crank angle: acquired after {t_acq:.3f} s (error within 5 sigma from then on), then RMSE "
                     f"{_deg(conv['tracking']['rmse']['z'][0])} (whole run, start-up included: {whole})")
    lines.append(f"  plot: {os.path.join(OUT, 'pf', 'replay', 'pf_branches.png')}")
    return lines


def adekf_summary(doc: dict) -> list[str]:
    m = doc["estimators"]["adekf"]["metrics"]
    lines = ["ADE-KF (paper 004), slider-crank: unknown motor torque from one accelerometer on the slider"]
    for name, inp in (m.get("inputs") or {}).items():
        rmse, rng = inp.get("rmse_after_1s"), inp.get("truth_range")
        pct = f" ({100 * rmse / rng:.1f} % of its {rng:.2f} N m range)" if rmse is not None and rng else ""
        lines.append(f"  torque on {name}: RMSE after the first second {rmse:.3f} N m{pct}")
    lines.append(f"  crank angle RMSE {m['rmse']['z'][0]:.4f} rad")
    return lines


def kalman_summary(doc: dict) -> list[str]:
    lines = ["Kalman observers (paper 003), fourbar_gyro: gyroscope on the coupler, gravity error +1 m/s^2"]
    for name, entry in doc["estimators"].items():
        m = entry["metrics"]
        lines.append(f"  {name:<9} crank angle RMSE {m['rmse']['z'][0]:.4f} rad, "
                     f"{m['step_time_us']['mean']:.0f} us per step")
    return lines


def main(argv=None) -> int:
    print("== 1/3 particle filter: pose and assembly branch from an unknown start (paper 000) ==")
    pf = _run("pf", "pf_sim.yaml", ["duration=1.5"], "pf", "pf.yaml", plots=True)
    print("\n== 2/3 ADE-KF: unknown motor torque from one accelerometer (paper 004) ==")
    adekf = _run("adekf", "adekf_slider_crank.yaml", ["duration=2.5", "initial_state.position.theta=pi/2"],
                 "adekf", "adekf.yaml", plots=False)
    print("\n== 3/3 the Kalman observers of paper 003 ==")
    kalman = _run("kalman", "fourbar_gyro.yaml", ["duration=3"], KALMAN, "default.yaml", plots=False)
    print("\n== summary ==")
    for lines in (pf_summary(pf), adekf_summary(adekf), kalman_summary(kalman)):
        print("\n".join(lines))
    print(f"reports, plots and estimates bags (Foxglove, `ros2 bag play`): {OUT}/*/replay/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
