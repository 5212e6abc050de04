"""The ROS reference: nodes, topics, services, parameters and launch arguments, from the
nodes' own declarations (mbde_core/live/params.py, topics.py, config/params/, launch/)."""
from __future__ import annotations

import ast
import os

from mbde_docs.md import code, table

REPO = os.path.normpath(os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, os.pardir))


def _range(p) -> str:
    if p.choices:
        return "one of " + ", ".join(p.choices)
    if p.min is None and p.max is None:
        return ""
    lo = "" if p.min is None else f"{p.min:g}"
    hi = "" if p.max is None else f"{p.max:g}"
    return f"[{lo}, {hi}]"


def launch_arguments(path: str) -> list[tuple[str, str, str]]:
    """(name, default, description) of every DeclareLaunchArgument of a launch file."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    consts = {t.id: n.value.value for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant)
              for t in n.targets if isinstance(t, ast.Name)}

    def value(node):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return consts.get(node.id)
        return None

    out = []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        f = call.func
        if getattr(f, "id", getattr(f, "attr", "")) != "DeclareLaunchArgument":
            continue
        kw = {k.arg: value(k.value) for k in call.keywords}
        default = kw.get("default_value")
        out.append((value(call.args[0]), "(required)" if default is None else code(default), kw.get("description") or ""))
    return out


def _shipped(exe: str) -> list[tuple[str, object]]:
    """(parameter, value) of the shipped parameter file config/params/<exe>.yaml."""
    from mbde_core.live.params import validate_param_file

    path = os.path.join(REPO, "config", "params", f"{exe}.yaml")
    if not os.path.isfile(path):
        return []
    out = []
    for values in validate_param_file(path, exe).values():
        out += [(k, "[]" if v == [] else str(v).lower() if isinstance(v, bool) else v) for k, v in values.items()]
    return out


def markdown() -> str:
    from mbde_core.live import topics
    from mbde_core.live.params import schema

    out = ["Generated from the nodes' declarations: the parameter schema `mbde_core/live/params.py` "
           "(each node declares these, read-only, with descriptors: `ros2 param describe`), the "
           "topic table `mbde_core/live/topics.py` and the launch files' `DeclareLaunchArgument`s. "
           "Executables are `mbde-<node>` (`ros2 run mbde mbde-estimator`); the parameter file of "
           "each is `config/params/<node>.yaml`.\n",
           "## Nodes\n"]
    for exe, params in schema().items():
        out.append(f"### `{exe}` (executable `mbde-{exe.replace('_', '-')}`)\n")
        pubs = topics.PUBLISHES.get(exe, [])
        subs = topics.SUBSCRIBES.get(exe, [])
        srvs = topics.SERVICES.get(exe, [])
        rows = [["publishes", code(t), ty, q] for t, ty, q in pubs] + [["subscribes", code(t), ty, q] for t, ty, q in subs]
        rows += [["service", code(s), ty, ""] for s, ty in srvs]
        if rows:
            out.append(table(["", "topic", "type", "QoS"], rows))
        prow = [[code(p.name), p.type, code(p.default if not isinstance(p.default, list) else "[]"), _range(p), p.unit,
                 p.description] for p in params]
        out.append("Parameters:\n")
        out.append(table(["parameter", "type", "default", "range", "unit", "meaning"], prow))
        shipped = _shipped(exe)
        if shipped:
            out.append(f"The shipped parameter file `config/params/{exe}.yaml` (validated against this schema) sets: "
                       + ", ".join(f"{code(k)} = {code(v)}" for k, v in shipped) + ".\n")
    out.append("QoS: `latched` = reliable, transient local, depth 1; `reliable` = depth 10; `sensor` = "
               "SensorDataQoS (best effort; the estimator reads with a history of 2 x rate x "
               "reorder_window readings, 100 to 20000), which matches reliable and best-effort "
               "publishers alike (REP 2003).\n")
    out.append("## Launch files\n")
    launch_dir = os.path.join(REPO, "launch")
    for fname in sorted(os.listdir(launch_dir)):
        if not fname.endswith(".launch.py"):
            continue
        path = os.path.join(launch_dir, fname)
        doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read())) or ""
        first = doc.strip().split("\n\n")[0].replace("\n", " ")
        out += [f"### `launch/{fname}`\n", first + "\n",
                table(["argument", "default", "meaning"], [[code(n), d, m] for n, d, m in launch_arguments(path)])]
    return "\n".join(out)
