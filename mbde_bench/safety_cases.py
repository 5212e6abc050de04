"""The cases of ``mbde bench safety``: each row of the data-safety table (outputs, interrupts,
bad inputs, unusable bags), run through the real command line, returning what happens.

A case is ``fn(ws) -> (now, ok)``: ``now`` says what the commands did (exit statuses, the
error line, what is left on disk, processes left, the time to stop), ``ok`` whether that
is the required behaviour. :class:`Workspace` holds the scratch folder, a small simulated
bag and the helpers that run ``mbde`` in a process of its own (a session: a terminal's
Ctrl-C is SIGINT to its whole process group, which :meth:`Workspace.interrupt` sends).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

from mbde_core.cli.main import main
from mbde_core.replay import worker
from mbde_core.rosio.bag import BagReader, BagWriter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCENARIO = os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml")
MECHANISM = os.path.join(REPO, "config", "mechanisms", "fourbar.yaml")
GYRO = "sensors:\n  - {name: gyro_coupler, type: gyroscope, body: coupler, period: 0.005, noise: {sigma: deg2rad(1)}}\n"


class Workspace:
    """A scratch folder and the ``mbde`` runs of the cases."""

    def __init__(self, root: str):
        self.root = root
        self._bag = None
        os.makedirs(root, exist_ok=True)

    def path(self, *parts) -> str:
        return os.path.join(self.root, *parts)

    def env(self) -> dict:
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def argv(self, *args) -> list[str]:
        return [sys.executable, "-m", "mbde_core.cli", *map(str, args)]

    def mbde(self, *args, timeout: float = 300):
        """Run ``mbde ARGS``: (exit status, stdout, stderr)."""
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env(), timeout=timeout)
        return p.returncode, p.stdout, p.stderr

    def sensors(self) -> str:
        """The sensor file of the bag's gyroscope (identify reads the model from files)."""
        path = self.path("gyro.yaml")
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(GYRO)
        return path

    def bag(self) -> str:
        """A 3 s fourbar_gyro bag (one gyroscope, ground truth), simulated once."""
        if self._bag is None:
            self._bag = self.path("bag3")
            rc, _, err = self.mbde("simulate", SCENARIO, "--out", self._bag, "--set", "duration=3")
            if rc != 0:
                raise RuntimeError(f"mbde simulate failed: {err.strip()}")
        return self._bag

    def copy_bag(self, dest: str, manifest: bool = True) -> str:
        """A copy of the bag; without its manifest it is a bag of another tool (ros2 bag record)."""
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copytree(self.bag(), dest)
        if not manifest:
            os.remove(os.path.join(dest, ".mbde-output.json"))
        return dest

    def start(self, *args) -> subprocess.Popen:
        """``mbde ARGS`` in a session of its own (its own process group)."""
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env(), start_new_session=True)

    def interrupt(self, proc: subprocess.Popen, sig: int, group: bool, timeout: float = 120) -> dict:
        """Send ``sig`` (to the process group: a terminal's Ctrl-C; else to the process
        alone: ``kill``), wait: {rc, seconds (signal to exit), left (pids of the group still
        alive 2 s after the exit), stderr}."""
        t0 = time.monotonic()
        (os.killpg if group else os.kill)(proc.pid, sig)
        out, err = proc.communicate(timeout=timeout)
        seconds = time.monotonic() - t0
        return {"rc": proc.returncode, "seconds": seconds, "left": group_left(proc.pid), "stderr": err, "stdout": out}


def group_left(pgid: int, wait: float = 2.0) -> list[int]:
    """Pids still in process group ``pgid`` after up to ``wait`` s (none: an empty list)."""
    deadline = time.monotonic() + wait
    while True:
        pids = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if int(fields[2]) == pgid and fields[0] != "Z":
                    pids.append(int(entry))
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.05)


def one_line(err: str) -> bool:
    return err.count("\n") == 1 and "Traceback" not in err


def listing(path: str) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


# ------------------------------------------------------------------------------ outputs
def out_is_the_input(ws):
    """`cp -r BAG x/COPY; mbde replay|smooth|identify x/COPY --out x/COPY --force`."""
    now, ok = [], True
    for cmd, extra in (("replay", ["--estimators", "ukf"]), ("smooth", []),
                       ("identify", ["--mechanism", MECHANISM, "--sensors", ws.sensors(), "--params", "gravity"])):
        copy = ws.copy_bag(ws.path(f"x_{cmd}", "COPY"))
        before = listing(copy)
        rc, _, err = ws.mbde(cmd, copy, "--out", copy, "--force", *extra)
        ok &= rc == 2 and one_line(err) and "is the input" in err and listing(copy) == before
        now.append(f"{cmd}: exit {rc}, bag {'intact' if listing(copy) == before else 'CHANGED'}")
    return "; ".join(now) + f" ({err.strip().split(': ', 2)[-1]})", ok


def out_above_the_input(ws):
    """`mbde replay y/bagA --out y --force` (y holds only the bag)."""
    bag = ws.copy_bag(ws.path("y", "bagA"))
    rc, _, err = ws.mbde("replay", bag, "--out", ws.path("y"), "--force", "--estimators", "ukf")
    intact = listing(ws.path("y")) == ["bagA"] and "metadata.yaml" in listing(bag)
    return f"exit {rc}, y and the bag {'intact' if intact else 'CHANGED'}: {err.strip()}", \
        rc == 2 and one_line(err) and intact and "holds the input" in err


def out_holds_an_unrelated_bag(ws):
    """`mbde replay BAG --out DIR --force`, DIR holding a bag of another tool (or of mbde simulate)."""
    now, ok = [], True
    for label, manifest in (("a ros2 bag", False), ("an mbde simulate bag", True)):
        other = ws.copy_bag(ws.path(f"dir_{int(manifest)}"), manifest=manifest)
        before = listing(other)
        rc, _, err = ws.mbde("replay", ws.bag(), "--out", other, "--force", "--estimators", "ukf")
        ok &= rc == 2 and one_line(err) and listing(other) == before and "not replacing it" in err
        now.append(f"{label}: exit {rc}, {'kept' if listing(other) == before else 'CHANGED'}")
    return "; ".join(now) + f" ({err.strip().split(': ', 3)[-1]})", ok


def out_is_a_folder_of_bags(ws):
    """`mbde replay z --out z --force` (z holds two bags)."""
    for name in ("a", "b"):
        ws.copy_bag(ws.path("z", name))
    rc, _, err = ws.mbde("replay", ws.path("z"), "--out", ws.path("z"), "--force", "--estimators", "ukf")
    intact = listing(ws.path("z")) == ["a", "b"] and all("metadata.yaml" in listing(ws.path("z", n)) for n in "ab")
    return f"exit {rc}, both bags {'intact' if intact else 'DELETED'}: {err.strip()}", \
        rc == 2 and one_line(err) and intact


def concurrent_runs(ws):
    """Two `mbde replay BAG --out SAME --force` at once: the second starts while the first
    holds its lock (the first is paused by SIGSTOP once its lock exists, so that the two
    overlap however loaded the machine is, then resumed)."""
    out = ws.path("same")
    rc0, _, _ = ws.mbde("replay", ws.bag(), "--out", out, "--estimators", "ukf", "--no-plots")
    first = ws.start("replay", ws.bag(), "--out", out, "--force", "--estimators", "ukf,errorekf", "--no-plots")
    lock = ws.path(".same.lock")
    deadline = time.monotonic() + 120
    while not os.path.exists(lock) and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    paused = first.poll() is None
    if paused:
        os.killpg(first.pid, signal.SIGSTOP)
    try:
        rc2, out2, err2 = ws.mbde("replay", ws.bag(), "--out", out, "--force", "--estimators", "dekf", "--no-plots")
    finally:
        if paused:
            os.killpg(first.pid, signal.SIGCONT)
    _, err1 = first.communicate(timeout=300)
    doc = json.load(open(os.path.join(out, "metrics.json")))
    manifest = json.load(open(os.path.join(out, ".mbde-output.json")))

    with BagReader(os.path.join(out, "estimates")) as r:
        topics = {t.split("/")[2] for t, _, _ in r.topics() if t.count("/") == 3 and t.endswith("/state")}
    consistent = set(doc["estimators"]) == topics == {"ukf", "errorekf"} and sorted(manifest["files"]) == sorted(
        f for f in _walk(out) if f != ".mbde-output.json")
    ok = rc0 == 0 and first.returncode == 0 and rc2 == 2 and one_line(err2) and consistent and "wrote" not in out2
    return (f"first exit {first.returncode}, second exit {rc2} ({err2.strip().split(': ', 2)[-1]}); the output is the "
            f"first run's whole ({', '.join(sorted(doc['estimators']))} in metrics.json and the estimates bag)"), ok


def _walk(root):
    for base, _, files in os.walk(root):
        for f in files:
            yield os.path.relpath(os.path.join(base, f), root)


# ------------------------------------------------------------------------------ interrupts
def ctrl_c_simulate(ws):
    """Ctrl-C 3 s into `mbde simulate fourbar_gyro.yaml --set duration=300` (many seconds of work on any
    machine); SIGKILL leaves a marked bag."""
    out = ws.path("sim60")
    p = ws.start("simulate", SCENARIO, "--out", out, "--set", "duration=300")
    time.sleep(3.0)
    r = ws.interrupt(p, signal.SIGINT, group=True)
    absent = not os.path.exists(out) and not [e for e in os.listdir(ws.root) if e.startswith(".sim60")]
    p = ws.start("simulate", SCENARIO, "--out", out, "--set", "duration=300")
    time.sleep(3.0)
    os.killpg(p.pid, signal.SIGKILL)
    p.communicate()
    staged = [e for e in os.listdir(ws.root) if e.startswith(".sim60.part-")]
    cut = os.path.join(ws.root, staged[0], "sim60") if staged else out
    rc_info, _, err_info = ws.mbde("bag-info", cut)
    rc_rep, _, err_rep = ws.mbde("replay", cut, "--out", ws.path("rep_cut"), "--estimators", "ukf")
    ok = (r["rc"] == 130 and not r["left"] and one_line(r["stderr"]) and absent and rc_info == 2 and rc_rep == 2
          and one_line(err_info) and one_line(err_rep) and not os.path.exists(out))
    return (f"Ctrl-C: exit {r['rc']} after {r['seconds']:.2f} s, {len(r['left'])} process(es) left, no bag "
            f"({r['stderr'].strip()}); a bag cut short by SIGKILL stays hidden in {staged[0] if staged else '?'} and "
            f"bag-info / replay refuse it (exit {rc_info} / {rc_rep}: {err_info.strip().split(': ', 2)[-1]})"), ok


def sigterm(ws):
    """SIGTERM to `mbde simulate` and to `mbde replay --jobs 2` (the process alone, as `kill` does)."""
    sim = ws.start("simulate", SCENARIO, "--out", ws.path("simT"), "--set", "duration=300")
    time.sleep(3.0)
    a = ws.interrupt(sim, signal.SIGTERM, group=False)
    rep = ws.start("replay", _bag60(ws), "--out", ws.path("repT"), "--estimators", "ukf,errorekf,pf", "--jobs", "2")
    time.sleep(6.0)
    b = ws.interrupt(rep, signal.SIGTERM, group=False)
    ok = all(x["rc"] == 143 and not x["left"] and one_line(x["stderr"]) for x in (a, b)) and not os.path.exists(
        ws.path("simT")) and not os.path.exists(ws.path("repT"))
    return (f"simulate: exit {a['rc']} after {a['seconds']:.2f} s, {len(a['left'])} left; replay --jobs 2: exit "
            f"{b['rc']} after {b['seconds']:.2f} s, {len(b['left'])} left; nothing written"), ok


def ctrl_c_replay(ws):
    """Ctrl-C during `mbde replay --jobs 2` (the terminal's SIGINT to the group; then SIGINT to the parent alone)."""
    rows, ok = [], True
    for group in (True, False):
        out = ws.path(f"repC{int(group)}")
        p = ws.start("replay", _bag60(ws), "--out", out, "--estimators", "ukf,errorekf,pf", "--jobs", "2")
        time.sleep(6.0)
        r = ws.interrupt(p, signal.SIGINT, group=group)
        clean = not os.path.exists(out) and not [e for e in os.listdir(ws.root) if e.startswith(f".repC{int(group)}")]
        ok &= r["rc"] == 130 and not r["left"] and one_line(r["stderr"]) and clean
        rows.append(f"{'group' if group else 'parent'}: exit {r['rc']} after {r['seconds']:.2f} s, "
                    f"{len(r['left'])} left, {'no output, no .part files' if clean else 'LEFT FILES'}")
    return "; ".join(rows) + f" ({r['stderr'].strip()})", ok


def _bag60(ws) -> str:
    """A 20 s bag: long enough that three estimators run for many seconds."""
    bag = ws.path("bag20")
    if not os.path.isdir(bag):
        rc, _, err = ws.mbde("simulate", SCENARIO, "--out", bag, "--set", "duration=20")
        if rc != 0:
            raise RuntimeError(err)
    return bag


def _running(p, most: float = 4.0, after: float = 0.3) -> None:
    """Wait until ``p`` is at work: its first line on stdout (each command prints what it
    starts on before the long part) plus ``after`` s, or ``most`` s; a fixed delay alone
    would let a fast machine finish a short run before the signal."""
    seen = threading.Event()
    threading.Thread(target=lambda: (p.stdout.readline(), seen.set()), daemon=True).start()
    if seen.wait(most):
        time.sleep(after)


def interrupt_other_commands(ws):
    """SIGINT to smooth, identify, tune and bench while they run."""
    runs = {"smooth": ["smooth", _bag60(ws), "--out", ws.path("smC")],
            "identify": ["identify", _bag60(ws), "--mechanism", MECHANISM, "--sensors", ws.sensors(), "--params",
                         "gravity", "--out", ws.path("idC")],
            "tune": ["tune", _bag60(ws), "--out", ws.path("tuned.yaml"), "--estimators", "ukf,errorekf"],
            "bench": ["bench", "faults", "--out", ws.path("bC"), "--estimators", "ukf"]}
    rows, ok = [], True
    for name, args in runs.items():
        p = ws.start(*args)
        _running(p)
        r = ws.interrupt(p, signal.SIGINT, group=True)
        out = args[args.index("--out") + 1]
        clean = not os.path.exists(out)
        good = r["rc"] == 130 and not r["left"] and one_line(r["stderr"]) and clean
        ok &= good
        rows.append(f"{name}: exit {r['rc']} after {r['seconds']:.2f} s, {len(r['left'])} left"
                    + ("" if clean else ", OUTPUT LEFT") + ("" if good else f" (stderr: {r['stderr'].strip()[-300:]!r})"))
    return "; ".join(rows), ok


# ------------------------------------------------------------------------------ inputs
def huge_duration(ws):
    """`mbde simulate --set duration=1e12` (and 1e8: 3 years, which fit in bag times but not on the disk)."""
    rows, ok = [], True
    for value in ("1e12", "1e8"):
        rc, _, err = ws.mbde("simulate", SCENARIO, "--out", ws.path("huge"), "--set", f"duration={value}")
        ok &= rc == 2 and one_line(err) and "duration" in err and not os.path.exists(ws.path("huge"))
        rows.append(f"{value}: exit {rc}: {err.strip().split('duration: ', 1)[-1]}")
    return "; ".join(rows), ok


def negative_seed(ws):
    """`mbde replay BAG --seed -5` (and `--seed 1.5`, `--jobs 0`)."""
    rows, ok = [], True
    for opt, value in (("--seed", "-5"), ("--seed", "1.5"), ("--jobs", "0")):
        rc, _, err = ws.mbde("replay", ws.bag(), "--out", ws.path("seed"), "--estimators", "ukf", f"{opt}={value}")
        ok &= rc == 2 and one_line(err) and opt in err and not os.path.exists(ws.path("seed"))
        rows.append(f"{opt} {value}: exit {rc}")
    return "; ".join(rows) + f" ({err.strip()})", ok


def failed_run(ws):
    """A run whose estimator fails: no metrics.json, report.md or estimates/, no "wrote"."""
    from unittest import mock

    def broken(source, task):
        raise RuntimeError(f"{task.name} failed on purpose")

    out, err = io.StringIO(), io.StringIO()
    with mock.patch.object(worker, "run_streamed", broken), contextlib.redirect_stdout(out), \
            contextlib.redirect_stderr(err):
        rc = main(["replay", ws.bag(), "--out", ws.path("failed"), "--estimators", "ukf,errorekf", "--jobs", "1"])
    last = err.getvalue().strip().splitlines()[-1]
    ok = rc == 1 and "wrote" not in out.getvalue() and not os.path.exists(ws.path("failed"))
    return f"exit {rc}, nothing written, no 'wrote': {last}", ok


def zero_sensor_messages(ws):
    """A bag whose sensor topic holds no message (declared, empty)."""
    bag = _rewritten(ws, "nosensor", lambda topic, typ: None if topic.startswith("/mbde/sensors/") else typ)
    rc, _, err = ws.mbde("replay", bag, "--out", ws.path("rep_nosensor"), "--estimators", "ukf")
    return f"exit {rc}: {err.strip()}", rc == 2 and one_line(err) and "no messages on" in err


def truth_of_another_type(ws):
    """A bag whose /mbde/ground_truth holds sensor_msgs/Imu messages."""
    imu = "sensor_msgs/msg/Imu"
    bag = _rewritten(ws, "imutruth", lambda topic, typ: imu if topic == "/mbde/ground_truth" else typ)
    rc, out, err = ws.mbde("replay", bag, "--out", ws.path("rep_imutruth"), "--estimators", "ukf", "--no-plots")
    doc = json.load(open(ws.path("rep_imutruth", "metrics.json"))) if rc == 0 else {}
    rmse = ((doc.get("estimators", {}).get("ukf", {}).get("metrics") or {}).get("rmse"))
    warn = [ln for ln in (out + err).splitlines() if "ground_truth" in ln]
    return (f"exit {rc}, {len(warn)} warning line ({warn[0] if warn else '-'}), RMSE {rmse} (no truth metrics)",
            rc == 0 and len(warn) == 1 and rmse is None)


def _rewritten(ws, name: str, retype) -> str:
    """The bag rewritten: retype(topic, type) -> type (None: declared without messages);
    a topic given another type gets messages of that type (a sensor reading from the bag's Imu)."""
    dest = ws.path(name)
    with BagReader(ws.bag()) as r, BagWriter(dest, "mcap") as w:
        imu = next((d for t, _, ty, d in r.raw_messages() if ty == "sensor_msgs/msg/Imu"), None)
        for topic, typ, _ in r.topics():
            w.add_topic(topic, retype(topic, typ) or typ)
        for topic, t_ns, typ, data in r.raw_messages():
            new = retype(topic, typ)
            if new is None:
                continue
            w.write_raw_ns(topic, t_ns, data if new == typ else imu)
    return dest


def bare_mbde(ws):
    """`mbde` without a command."""
    rc, out, err = ws.mbde()
    return f"exit {rc}: {err.strip().splitlines()[-1]}", rc == 2 and not out


CASES = [
    ("replay/smooth/identify --out = the input bag --force", out_is_the_input),
    ("replay y/bagA --out y --force", out_above_the_input),
    ("replay BAG --out DIR --force, DIR = an unrelated bag", out_holds_an_unrelated_bag),
    ("replay z --out z --force (z: two bags)", out_is_a_folder_of_bags),
    ("two replay --out SAME --force at once", concurrent_runs),
    ("Ctrl-C 3 s into simulate --set duration=300", ctrl_c_simulate),
    ("SIGTERM to simulate / replay", sigterm),
    ("Ctrl-C during replay --jobs 2", ctrl_c_replay),
    ("Ctrl-C during smooth, identify, tune, bench", interrupt_other_commands),
    ("simulate --set duration=1e12", huge_duration),
    ("--seed -5", negative_seed),
    ("a failed run", failed_run),
    ("zero messages on the sensor topic", zero_sensor_messages),
    ("ground truth topic holding Imu messages", truth_of_another_type),
    ("bare mbde", bare_mbde),
]
