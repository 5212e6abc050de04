"""Run the code blocks of a Markdown page (the README's tour, the guides in docs/) as written.

A page's fenced blocks run in order, in one temporary folder per page (with ``config/``
linked to the repository's, as if run from a checkout):

- ``yaml``: written to the file its first line names (``# my_linkage.yaml: ...``); every
  such file must be used by a command of the page (so each YAML block is checked by the
  loader that reads it);
- ``sh``: each command line (``\\`` continuations joined, comments dropped) is
  - ``mbde ...``: run (the mbde command line in a subprocess), exit status 0 required;
  - ``ros2 launch mbde FILE.launch.py k:=v ...``: checked without ROS: the launch file
    exists and declares every argument; ``params_file:=F`` is validated against the
    nodes' parameter schema, ``mechanism:=``/``sensors:=``/``scenario:=`` files are loaded;
  - ``ros2 run mbde EXE --ros-args ...``: EXE is a node executable, every ``-p NAME:=V``
    a parameter of it (value validated), every ``--params-file F`` valid for it;
  - ``make TARGET``: a target of the Makefile; ``pip install ...'.[extra]'``: an extra of
    setup.py (neither is run);
  - anything else fails the test, unless the block is marked ``{.no-run}`` on the line
    before its fence (MyST attrs syntax, invisible on the page), e.g. ``colcon build``;
- ``python``: executed in one namespace per page, in the page's folder;
- blocks without a language (or ``text``/``console``) are outputs and are not run.
"""
from __future__ import annotations

import ast
import os
import re
import shlex
from dataclasses import dataclass

from conftest import REPO, run_mbde

FENCE = re.compile(r"^(?P<attrs>\{[^}\n]*\}\n)?```(?P<lang>[\w-]*)[^\n]*\n(?P<code>.*?)^```\s*$", re.M | re.S)
OUTPUT_LANGS = ("", "text", "console")


@dataclass
class Block:
    lang: str
    code: str
    norun: bool
    line: int


def blocks(text: str) -> list[Block]:
    out = []
    for m in FENCE.finditer(text):
        lang = m.group("lang")
        if lang.startswith("{"):  # a MyST directive ({toctree}, {mbde-reference}, ...)
            continue
        attrs = m.group("attrs") or ""
        out.append(Block(lang, m.group("code"), ".no-run" in attrs, text.count("\n", 0, m.start()) + 1))
    return out


def commands(code: str) -> list[str]:
    """The command lines of a shell block: continuations joined, comments and blanks dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        out.append(line)
    return out


def setup_nodes() -> dict[str, str]:
    """Console scripts of the nodes: executable ('mbde-estimator') -> 'module:function'."""
    tree = ast.parse(open(os.path.join(REPO, "setup.py")).read())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "NODES" for t in node.targets):
            return dict(ast.literal_eval(node.value))
    raise AssertionError("setup.py has no NODES list")


def _launch_arguments(path: str) -> set:
    tree = ast.parse(open(path).read())
    out = set()
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        f = call.func
        if getattr(f, "id", getattr(f, "attr", "")) == "DeclareLaunchArgument" and isinstance(call.args[0], ast.Constant):
            out.add(call.args[0].value)
    return out


def _strip_shell(word: str, cwd: str) -> str:
    return word.replace("$PWD", str(cwd))


def _check_model_file(key: str, path: str) -> None:
    from mbde_core.model.mechanism import load_mechanism
    from mbde_core.scenario.scenario import load_scenario

    if key == "mechanism":
        load_mechanism(path)
    elif key == "scenario":
        load_scenario(path)


def check_ros2(words: list[str], cwd: str, used: set) -> None:
    from mbde_core.live.params import node_params, validate_param_file

    nodes = setup_nodes()
    if words[1] == "launch":
        assert words[2] == "mbde", f"{words}: launch files of other packages"
        path = os.path.join(REPO, "launch", words[3])
        assert os.path.isfile(path), f"no launch file {words[3]}"
        declared = _launch_arguments(path)
        values = {}
        for arg in words[4:]:
            key, sep, value = arg.partition(":=")
            assert sep and key in declared, f"{words[3]}: unknown launch argument {arg!r} (declared: {sorted(declared)})"
            values[key] = _strip_shell(value, cwd)
        for key, value in values.items():
            full = os.path.join(cwd, value)
            if value.endswith(".yaml") and os.path.isfile(full):
                used.add(os.path.basename(value))
                if key == "params_file":
                    validate_param_file(full, "estimator" if "estimator" in words[3] else None)
                else:
                    _check_model_file(key, full)
        return
    if words[1] == "run":
        assert words[2] == "mbde" and words[3] in nodes, f"{words}: not an mbde node executable"
        kind = words[3][len("mbde-"):].replace("-", "_")
        params = node_params(kind)
        rest = words[4:]
        for i, w in enumerate(rest):
            if w == "-p":
                name, _, value = rest[i + 1].partition(":=")
                assert name in params, f"{words[3]}: no parameter {name!r}"
            if w == "--params-file":
                full = os.path.join(cwd, _strip_shell(rest[i + 1], cwd))
                used.add(os.path.basename(full))
                validate_param_file(full, kind)
        return
    raise AssertionError(f"ros2 {words[1]}: not checked by the docs tests (mark the block {{.no-run}})")


def check_static(words: list[str]) -> bool:
    """make / pip lines: checked, not run. True if the line was one of them."""
    if words[0] == "make":
        targets = re.findall(r"^([\w-]+):", open(os.path.join(REPO, "Makefile")).read(), re.M)
        for w in words[1:]:
            if "=" not in w:
                assert w in targets, f"make {w}: no such target"
        return True
    if words[:2] == ["pip", "install"]:
        setup = open(os.path.join(REPO, "setup.py")).read()
        for w in words[2:]:
            for extra in re.findall(r"\[([\w,-]+)\]", w):
                for e in extra.split(","):
                    assert re.search(rf'"{e}":', setup), f"pip install: no extra {e!r} in setup.py"
        return True
    return False


def run_page(text: str, cwd, label: str) -> dict:
    """Run every block of ``text`` in folder ``cwd``; returns counts by kind."""
    cwd = str(cwd)
    if not os.path.exists(os.path.join(cwd, "config")):  # the pages' commands run from the repository root
        os.symlink(os.path.join(REPO, "config"), os.path.join(cwd, "config"))
    written, used = set(), set()
    counts = {"yaml": 0, "mbde": 0, "ros2": 0, "static": 0, "python": 0, "no-run": 0}
    namespace: dict = {"__name__": "__doc_page__"}
    for b in blocks(text):
        where = f"{label}:{b.line}"
        if b.norun:
            counts["no-run"] += 1
            continue
        if b.lang == "yaml":
            m = re.match(r"#\s*(\S+\.ya?ml)\b", b.code)
            assert m, f"{where}: a YAML block must start with '# NAME.yaml' (the file it is)"
            path = os.path.join(cwd, m.group(1))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(b.code)
            written.add(m.group(1))
            counts["yaml"] += 1
        elif b.lang == "sh":
            for line in commands(b.code):
                words = [_strip_shell(w, cwd) for w in shlex.split(line, comments=True)]
                if not words:
                    continue
                for w in words:
                    for name in written:
                        if os.path.basename(w) == os.path.basename(name) or w.endswith("/" + name) or w == name:
                            used.add(name)
                if words[0] == "mbde":
                    proc = run_mbde(*words[1:], cwd=cwd)
                    assert proc.returncode == 0, f"{where}: {line}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
                    counts["mbde"] += 1
                elif words[0] == "ros2":
                    check_ros2(words, cwd, used)
                    counts["ros2"] += 1
                elif check_static(words):
                    counts["static"] += 1
                else:
                    raise AssertionError(f"{where}: {line!r} is not run by the docs tests (mark the block {{.no-run}})")
        elif b.lang == "python":
            used.update(w for w in written if w in b.code)
            old = os.getcwd()
            os.chdir(cwd)
            try:
                exec(compile(b.code, where, "exec"), namespace)  # noqa: S102 - the page's own example
            finally:
                os.chdir(old)
            counts["python"] += 1
        elif b.lang not in OUTPUT_LANGS:
            raise AssertionError(f"{where}: code block of language {b.lang!r}: not run by the docs tests")
    texts = {w: open(os.path.join(cwd, w), encoding="utf-8").read() for w in written}
    changed = True
    while changed:  # a file named in a used file (a scenario's sensors_file) is used too
        changed = False
        for w in written - used:
            if any(w in texts[u] for u in used if u in texts):
                used.add(w)
                changed = True
    unused = {w for w in written if w not in used and os.path.basename(w) not in used}
    assert not unused, f"{label}: YAML files no command uses: {sorted(unused)}"
    return counts

