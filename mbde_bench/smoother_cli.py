"""Memory of ``mbde smooth --window`` end to end, against bag length (``mbde bench smoother
--cli-memory 60,180,600``).

For every length L: a ``fourbar_gyro`` bag of L seconds (``mbde simulate ... --set
duration=L``: a gyroscope reading every 5 ms, 1 kHz ground truth; kept in --cli-bags
and reused), then, each in a fresh process (its peak resident memory,
``resource.getrusage(RUSAGE_SELF).ru_maxrss``, is its own):

- streamed: the command itself, ``mbde smooth BAG --window W --out ...`` (readings and
  ground truth read chunk by chunk, windows solved as they fill, estimates written and
  evaluated as they come, plots from the thinned series): wall, CPU and peak memory;
- in memory: the same windowed smoother on the whole bag read into memory first
  (``load_inputs`` + ``smooth_windowed``, i.e. ``mbde smooth`` before it streamed,
  without its outputs): peak memory, and its trajectory, which the streamed estimates bag
  must equal (max |difference| of z and of the covariance over the run).

Flat streamed memory (within ~20 % from 60 s to 600 s) is the target (reported, not
asserted).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from mbde_bench.common import in_fresh_process
from mbde_core.config.paths import config_path
from mbde_core.replay.inputs import load_inputs
from mbde_core.replay.runner import initial_state
from mbde_core.rosio.bag import BagReader
from mbde_core.rosio.convert import snapshot_from_mechanism_state
from mbde_core.trajectory.config import smoother_defaults
from mbde_core.trajectory.smoother import BatchSmoother
from mbde_core.trajectory.windowed import smooth_windowed

SCENARIO = "fourbar_gyro"


def add_arguments(p) -> None:
    p.add_argument("--cli-memory", default="", help="bag lengths [s] of the `mbde smooth --window` memory table, "
                                                     "e.g. 60,180,600 ('' = skip, the default)")
    p.add_argument("--cli-bags", help="folder for the simulated bags of --cli-memory (kept and reused; default: a "
                                      "temporary folder)")


_PROBE = """
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from mbde_core.cli.main import main
rc = main(sys.argv[2:])
print("\\n@@" + json.dumps({"rc": rc, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                           "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0}))
"""


def _run_cli(args: list[str]) -> dict:
    """`mbde ARGS` in a fresh Python process: rc, wall, CPU and its own peak memory."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, "-c", _PROBE, "--"] + [str(a) for a in args], capture_output=True,
                          text=True, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@")]
    if proc.returncode or not lines:
        raise RuntimeError(f"mbde {' '.join(map(str, args))} failed: {proc.stderr.strip()[-500:]}")
    out = json.loads(lines[-1][2:])
    if out["rc"]:
        raise RuntimeError(f"mbde {' '.join(map(str, args))} exited {out['rc']}: {proc.stderr.strip()[-500:]}")
    out["stdout"] = proc.stdout
    return out


def make_bag(folder: str, length: float) -> str:
    """The fourbar_gyro bag of ``length`` seconds in folder (simulated unless present)."""
    bag = os.path.join(folder, f"{SCENARIO}_{length:g}s")
    if not os.path.isfile(os.path.join(bag, "metadata.yaml")):
        _run_cli(["simulate", config_path("scenarios", f"{SCENARIO}.yaml"), "--set", f"duration={length:g}",
                  "--out", bag, "--force"])
    return bag


def _in_memory_task(args):
    """The windowed smoother on a bag read whole into memory: peak memory, trajectory saved to npz."""
    import resource

    bag, window, npz = args
    t0, c0 = time.perf_counter(), time.process_time()
    inputs = load_inputs(bag)
    cfg = dict(smoother_defaults(), window=window)
    traj = smooth_windowed(BatchSmoother(inputs.mechanism, inputs.sensors, cfg), inputs.measurements,
                           initial_state(inputs, cfg))
    np.savez(npz, t=traj.t, z=traj.z, zd=traj.zd, cov=traj.cov)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, "final_cost": traj.info["final_cost"]}


def read_estimates(bag: str, name: str = "smoother"):
    """(t, z, zd, cov) of /mbde/<name>/state in an estimates bag."""
    t, z, zd, cov = [], [], [], []
    with BagReader(bag) as r:
        for _, _, msg in r.messages([f"/mbde/{name}/state"]):
            s = snapshot_from_mechanism_state(msg)
            t.append(s.stamp)
            z.append(s.z)
            zd.append(s.zd)
            cov.append(s.cov)
    return np.array(t), np.array(z), np.array(zd), np.array(cov)


def cli_memory(lengths, window: float, bag_folder: str | None = None) -> list[dict]:
    """The table's rows (see module doc), printed as they come."""
    rows = []
    print(f"{'bag s':>6}{'bag MB':>8}{'steps':>8}{'windows':>8}{'wall s':>8}{'CPU s':>7}{'peak MB':>9}"
          f"{'in-memory MB':>13}{'RMSE z':>9}{'max dz':>10}{'max dcov':>10}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = bag_folder or tmp
        os.makedirs(folder, exist_ok=True)
        for length in lengths:
            bag = make_bag(folder, length)
            size = sum(os.path.getsize(os.path.join(bag, f)) for f in os.listdir(bag)) / 1e6
            out = os.path.join(tmp, f"smooth_{length:g}")
            s = _run_cli(["smooth", bag, "--window", f"{window:g}", "--out", out, "--force"])
            doc = json.load(open(os.path.join(out, "metrics.json"), encoding="utf-8"))
            m = doc["estimators"]["smoother"]["metrics"]
            npz = os.path.join(tmp, f"mem_{length:g}.npz")
            mem = in_fresh_process(_in_memory_task, (bag, window, npz))
            ref = np.load(npz)
            t, z, zd, cov = read_estimates(os.path.join(out, "estimates"))
            same_t = len(t) == len(ref["t"]) and bool(np.allclose(t, ref["t"], atol=1e-9, rtol=0))
            dz = float(np.abs(z - ref["z"]).max()) if same_t else float("inf")
            dcov = float(np.abs(cov - ref["cov"]).max()) if same_t else float("inf")
            r = {"length_s": length, "bag_mb": size, "steps": m["steps"], "windows": m["solver"]["windows"],
                 "wall_s": s["wall_s"], "cpu_s": s["cpu_s"], "peak_mb": s["peak_mb"], "in_memory_peak_mb": mem["peak_mb"],
                 "in_memory_wall_s": mem["wall_s"], "in_memory_cpu_s": mem["cpu_s"], "rmse_z": m["rmse"]["z"][0],
                 "max_abs_dz": dz, "max_abs_dcov": dcov, "final_cost": m["solver"]["final_cost"],
                 "in_memory_final_cost": mem["final_cost"]}
            rows.append(r)
            print(f"{length:>6g}{size:>8.0f}{r['steps']:>8}{r['windows']:>8}{r['wall_s']:>8.1f}{r['cpu_s']:>7.1f}"
                  f"{r['peak_mb']:>9.0f}{r['in_memory_peak_mb']:>13.0f}{r['rmse_z']:>9.4f}{dz:>10.2g}{dcov:>10.2g}")
    if len(rows) > 1:
        lo, hi = rows[0]["peak_mb"], rows[-1]["peak_mb"]
        print(f"streamed peak memory {lo:.0f} MB at {rows[0]['length_s']:g} s -> {hi:.0f} MB at "
              f"{rows[-1]['length_s']:g} s ({100 * (hi / lo - 1):+.0f} %; target within 20 %)")
    return rows
