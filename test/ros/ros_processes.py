"""Node processes of a test/ros test: ``NodeProcesses`` starts them (``python -m module
--ros-args -p k:=v``, a script, or any argv) with the test's ROS environment, their
stdout/stderr in files, and stops them at teardown with SIGINT, then SIGKILL.

Everything waits with a deadline: a test never hangs on a node that does not answer.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence


def ros_args(params: Mapping[str, Any] | None = None, remaps: Mapping[str, str] | None = None,
             name: str | None = None) -> list[str]:
    """``--ros-args -p k:=v ... -r from:=to ...`` (values as ROS parses them: YAML)."""
    out: list[str] = []
    for key, value in (params or {}).items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            text = "[" + ",".join(_scalar(v) for v in value) + "]"
        else:
            text = _scalar(value)
        out += ["-p", f"{key}:={text}"]
    if name:
        out += ["-r", f"__node:={name}"]
    for src, dst in (remaps or {}).items():
        out += ["-r", f"{src}:={dst}"]
    return ["--ros-args", *out] if out else []


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class NodeProcess:
    """One child process; stdout/stderr go to ``<log_dir>/<label>.out|.err``."""

    def __init__(self, argv: Sequence[str], env: Mapping[str, str], log_dir: Path, label: str,
                 cwd: os.PathLike | str | None = None):
        self.argv = list(argv)
        self.label = label
        self.stdout_path = log_dir / f"{label}.out"
        self.stderr_path = log_dir / f"{label}.err"
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            # Own session: a Ctrl-C at the terminal does not reach it twice, and
            # killpg stops any grandchildren (wrapper scripts) too.
            self.popen = subprocess.Popen(self.argv, env=dict(env), stdout=out, stderr=err,
                                          stdin=subprocess.DEVNULL, cwd=cwd, start_new_session=True)
        self.started = time.monotonic()
        self._interrupted = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def running(self) -> bool:
        return self.popen.poll() is None

    def stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def wait_for_output(self, pattern: str, timeout: float = 15.0, stream: str = "stdout") -> re.Match:
        """Wait until ``pattern`` (regex) appears in stdout (or stderr); fail if the process dies."""
        rx = re.compile(pattern, re.MULTILINE)
        read = self.stdout if stream == "stdout" else self.stderr
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(read())
            if m:
                return m
            if not self.running():
                m = rx.search(read())  # the last lines before it exited
                if m:
                    return m
                raise AssertionError(f"{self.label} exited with {self.returncode} before printing "
                                     f"{pattern!r}\n{self.logs()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.label} did not print {pattern!r} within {timeout} s\n{self.logs()}")
            time.sleep(0.05)

    def interrupt(self) -> None:
        """Send SIGINT once (a second one would hit a process already shutting down)."""
        if not self._interrupted and self.popen.poll() is None:
            self._interrupted = True
            self._signal(signal.SIGINT)

    def stop(self, sigint_timeout: float = 10.0) -> int:
        """SIGINT (what Ctrl-C / ros2 launch send), then SIGKILL; returns the exit code."""
        if self.popen.poll() is None:
            self.interrupt()
            try:
                self.popen.wait(sigint_timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.popen.wait(10)
        return self.popen.returncode

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except ProcessLookupError:
            pass

    def logs(self) -> str:
        rc = self.popen.poll()
        state = "running" if rc is None else f"exit code {rc}"
        return (f"===== {self.label} ({state}): {' '.join(self.argv)}\n"
                f"----- stdout\n{self.stdout()}----- stderr\n{self.stderr()}===== end {self.label}\n")


class NodeProcesses:
    """The node processes of one test (see the ``node_processes`` fixture)."""

    def __init__(self, env: Mapping[str, str], log_dir: Path, cwd: os.PathLike | str | None = None):
        self.env = dict(env)
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.cwd = cwd
        self.procs: list[NodeProcess] = []

    def start(self, target: str | Sequence[str], params: Mapping[str, Any] | None = None,
              remaps: Mapping[str, str] | None = None, name: str | None = None,
              args: Iterable[str] = (), label: str | None = None,
              env: Mapping[str, str] | None = None) -> NodeProcess:
        """Start a node.

        target: a module name (``mbde_nodes.estimator`` -> ``python -m ...``), a path to a
        ``.py`` script (run with this interpreter), or a full argv (e.g. a console script).
        params / remaps / name become ``--ros-args -p k:=v -r a:=b -r __node:=name``;
        ``args`` go before ``--ros-args``; ``env`` adds variables to the test's ROS env.
        """
        if isinstance(target, str):
            if target.endswith(".py"):
                argv = [sys.executable, target]
            else:
                argv = [sys.executable, "-m", target]
            base = Path(target).stem if target.endswith(".py") else target.rsplit(".", 1)[-1]
        else:
            argv = list(target)
            base = Path(argv[0]).name
        argv += list(args) + ros_args(params, remaps, name)
        label = label or f"{len(self.procs):02d}-{name or base}"
        proc = NodeProcess(argv, {**self.env, **(env or {})}, self.log_dir, label, self.cwd)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> dict[str, int]:
        # SIGINT to all first, so they shut down in parallel, then collect.
        for p in self.procs:
            p.interrupt()
        return {p.label: p.stop() for p in self.procs}

    def logs(self) -> str:
        return "".join(p.logs() for p in self.procs)
