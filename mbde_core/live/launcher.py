"""Start a node graph (:mod:`mbde_core.live.graph`) as processes and stop it cleanly (ROS-free).

What ``mbde live`` does instead of ``ros2 launch`` (not available without a ROS
installation): one process per node, ``<python> -m mbde_nodes.<node> --ros-args
--params-file config/params/<node>.yaml -r __node:=<name> [-r __ns:=/<ns>] -p k:=v ...``,
each in its own session (a terminal's Ctrl-C reaches only the launcher, which then
stops the nodes). SIGINT or SIGTERM to the launcher, ``duration`` elapsed, or a node
exiting: every node gets SIGTERM (a running node leaves its spin loop and exits 0
silently, one still importing its modules ends at once, also silently), then SIGKILL after
``stop_timeout``.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from mbde_core.config.paths import config_dirs
from mbde_core.errors import ConfigError


def params_file(node: str) -> str:
    """The package's parameter file of a node (config/params/<node>.yaml)."""
    for base in config_dirs():
        path = os.path.join(base, "params", node + ".yaml")
        if os.path.isfile(path):
            return path
    raise ConfigError(f"params/{node}.yaml", "", "parameter file not found in the package's config/")


def node_command(spec, python: str | None = None) -> list[str]:
    """The argv that runs one NodeSpec."""
    argv = [python or sys.executable, "-m", f"mbde_nodes.{spec.node}", "--ros-args",
            "--params-file", params_file(spec.node), "-r", f"__node:={spec.name}"]
    if spec.namespace:
        argv += ["-r", f"__ns:=/{spec.namespace.strip('/')}"]
    for key, value in spec.parameters.items():
        argv += ["-p", f"{key}:={json.dumps(value)}"]  # JSON is YAML: strings stay strings
    return argv


class Launcher:
    """Runs NodeSpecs as child processes (see the module docstring).

    env: environment of the children (default: this process's); stdout/stderr: where
    their output goes (default: inherited); log: a print-like function for the
    launcher's own lines (stderr by default).
    """

    def __init__(self, nodes, python: str | None = None, env=None, stdout=None, stderr=None, log=None):
        self.nodes = list(nodes)
        self.python = python
        self.env = env
        self.stdout, self.stderr = stdout, stderr
        self.log = log or (lambda text: print(f"mbde live: {text}", file=sys.stderr, flush=True))
        self.procs: list[tuple[object, subprocess.Popen]] = []
        self._signal = None

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum

    def start(self) -> None:
        for spec in self.nodes:
            proc = subprocess.Popen(node_command(spec, self.python), env=self.env, stdout=self.stdout,
                                    stderr=self.stderr, stdin=subprocess.DEVNULL, start_new_session=True)
            self.procs.append((spec, proc))
        self.log("started " + ", ".join(f"{spec.fully_qualified_name} (pid {p.pid})" for spec, p in self.procs)
                 + "; Ctrl-C stops them")

    def stop(self, timeout: float) -> dict:
        """SIGTERM to every running node, SIGKILL after ``timeout`` s; {name: exit code}
        (0 for a node stopped by the SIGTERM before its handler was installed)."""
        for _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for spec, proc in self.procs:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                self.log(f"{spec.fully_qualified_name} did not stop within {timeout:g} s: killed")
                proc.kill()
                proc.wait()
        return {spec.fully_qualified_name: 0 if proc.returncode == -signal.SIGTERM else proc.returncode
                for spec, proc in self.procs}

    def run(self, duration: float | None = None, stop_timeout: float = 10.0) -> int:
        """Start, wait for a signal / ``duration`` / a node's exit, stop. Returns 0 after a
        clean stop at the end of ``duration``, 128 + the signal number after a clean stop by
        SIGINT / SIGTERM (130 / 143), 2 if a node could not start (its exit status 2), else 1."""
        old = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            t_end = None if duration is None else time.monotonic() + duration
            died = None
            while self._signal is None and (t_end is None or time.monotonic() < t_end):
                died = next(((s, p) for s, p in self.procs if p.poll() is not None), None)
                if died is not None:
                    break
                time.sleep(0.1)
            if died is not None:
                spec, proc = died
                what = "could not start" if proc.returncode == 2 else "stopped"
                self.log(f"{spec.fully_qualified_name} {what} (exit status {proc.returncode}): stopping the others")
            codes = self.stop(stop_timeout)
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)
        bad = {n: c for n, c in codes.items() if c != 0}
        if died is None and not bad:
            self.log(f"stopped {len(codes)} nodes" + (f" ({signal.Signals(self._signal).name})" if self._signal else ""))
            return 128 + int(self._signal) if self._signal else 0  # stopped by a signal: 130 / 143
        self.log("exit statuses: " + ", ".join(f"{n} {c}" for n, c in codes.items()))
        return 2 if died is not None and died[1].returncode == 2 else 1
