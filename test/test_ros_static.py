"""Static checks of the ROS package (no ROS needed): launch files, parameter files,
package.xml, the RViz config, console scripts and the README's node documentation."""
from __future__ import annotations

import ast
import os
import re
import sys
import xml.etree.ElementTree as ET

import pytest
import yaml

from conftest import REPO
from docblocks import setup_nodes
from mbde_core.live import topics
from mbde_core.live.params import ParameterError, node_params, schema, validate_param_file, validate_values

LAUNCH = sorted(os.path.join(REPO, "launch", f) for f in os.listdir(os.path.join(REPO, "launch")) if f.endswith(".py"))
PARAMS_DIR = os.path.join(REPO, "config", "params")
# executables of other ROS packages the launch files may start: (package, executable)
EXTERNAL = {("rviz2", "rviz2")}


def node_kind(executable: str) -> str:
    """'mbde-imu-driver' -> 'imu_driver' (module of mbde_nodes, schema key, parameter file)."""
    assert executable.startswith("mbde-"), f"{executable}: node executables are prefixed mbde-"
    return executable[len("mbde-"):].replace("-", "_")


def node_kinds() -> set[str]:
    return {node_kind(e) for e in setup_nodes()}


def package_depends() -> set[str]:
    root = ET.parse(os.path.join(REPO, "package.xml")).getroot()
    return {e.text.strip() for e in root if e.tag.endswith("depend") and e.text}


def readme() -> str:
    """The user documentation of the nodes: the README, the live guide and the ROS
    reference generated from the nodes' declarations (docs/_ext/mbde_docs/ros.py)."""
    sys.path.insert(0, os.path.join(REPO, "docs", "_ext"))
    from mbde_docs import ros

    parts = [open(os.path.join(REPO, "README.md"), encoding="utf-8").read()]
    parts.append(open(os.path.join(REPO, "docs", "guides", "live.md"), encoding="utf-8").read())
    parts.append(ros.markdown())
    return "\n".join(parts)


def constants(tree) -> dict:
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    out[t.id] = node.value.value
    return out


def call_name(call) -> str:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def value_of(node, consts):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    return None


def kw(call, name, consts):
    for k in call.keywords:
        if k.arg == name:
            return value_of(k.value, consts)
    return None


# ------------------------------------------------------------------------------ launch files
def test_launch_files_exist():
    names = {os.path.basename(p) for p in LAUNCH}
    assert {"sim_demo.launch.py", "estimator.launch.py", "replay.launch.py"} <= names


@pytest.mark.parametrize("path", LAUNCH, ids=os.path.basename)
def test_launch_file_is_consistent(path):
    text = open(path).read()
    tree = ast.parse(text, path)
    compile(tree, path, "exec")
    consts = constants(tree)
    assert any(isinstance(n, ast.FunctionDef) and n.name == "generate_launch_description" for n in tree.body)
    nodes = setup_nodes()
    deps = package_depends()
    declared, used, started = set(), set(), []
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call)):
        name = call_name(call)
        if name == "Node":
            pkg, exe = kw(call, "package", consts), kw(call, "executable", consts)
            if pkg == "mbde" and exe is None and "sim_demo_nodes(" in text:  # the graph of mbde_core.live.graph
                from mbde_core.live.graph import sim_demo_nodes

                for spec in sim_demo_nodes():
                    assert spec.executable in nodes and os.path.isfile(os.path.join(PARAMS_DIR, spec.node + ".yaml"))
                    started.append((pkg, spec.executable))
                continue
            assert pkg and exe, f"{path}: Node without literal package/executable"
            started.append((pkg, exe))
            if pkg == "mbde":
                assert exe in nodes, f"{path}: executable {exe!r} is not a console script of setup.py"
            else:
                assert (pkg, exe) in EXTERNAL and pkg in deps, f"{path}: {pkg}/{exe} not in package.xml"
        elif name == "DeclareLaunchArgument":
            declared.add(value_of(call.args[0], consts))
            assert kw(call, "description", consts), f"{path}: launch argument without description"
        elif name == "LaunchConfiguration":
            key = value_of(call.args[0], consts)
            if key is not None:  # LaunchConfiguration(key) inside a helper: checked below
                used.add(key)
        elif name == "PathJoinSubstitution":
            parts = [value_of(e, consts) for e in call.args[0].elts]
            if "params" in parts:  # config/params/<executable>.yaml
                i = parts.index("params")
                tail = call.args[0].elts[i + 1]
                fname = parts[i + 1] if parts[i + 1] else None
                if fname is None and isinstance(tail, ast.BinOp):  # executable + ".yaml"
                    continue
                assert os.path.isfile(os.path.join(PARAMS_DIR, fname)), fname
            if "rviz" in parts:
                assert os.path.isfile(os.path.join(REPO, "rviz", parts[-1]))
        elif name == "ExecuteProcess":
            cmd = [value_of(e, consts) for e in ast.walk(call) if isinstance(e, ast.Constant)]
            if "ros2" in cmd and "bag" in cmd:
                assert "ros2bag" in deps and "--clock" in cmd
    assert used <= declared, f"{path}: undeclared launch arguments {used - declared}"
    # params_file(executable) helpers: their executables have a parameter file
    for call in (n for n in ast.walk(tree) if isinstance(n, ast.Call) and call_name(n) == "params_file"):
        kind = value_of(call.args[0], consts)
        if kind is None:  # params_file(spec.node): checked with the graph above
            continue
        assert kind in node_kinds() and os.path.isfile(os.path.join(PARAMS_DIR, kind + ".yaml"))
    # OpaqueFunction-built Nodes use LaunchConfiguration(...).perform: those keys are declared too
    performed = set(re.findall(r"""value\("(\w+)"\)""", text)) | set(re.findall(r'LaunchConfiguration\("(\w+)"\)', text))
    assert performed <= declared, f"{path}: {performed - declared}"
    assert started, f"{path} starts no node"
    # every launch argument is documented in the file's docstring and in the README
    doc = ast.get_docstring(tree) or ""
    base = os.path.basename(path)
    assert f"launch/{base}" in readme(), f"the docs do not mention launch/{base}"
    from mbde_docs import ros

    section = ros.markdown().split(f"`launch/{base}`", 1)
    assert len(section) == 2, f"the ROS reference does not document launch/{base}"
    for arg in declared:
        assert re.search(rf"\b{arg}\b", doc), f"{base}: argument {arg} not in the docstring"
        assert f"`{arg}`" in section[1].split("### ", 1)[0], f"reference: launch argument {arg} of {base} not documented"


# ------------------------------------------------------------------------------ parameters
def test_schema_covers_exactly_the_console_scripts():
    nodes = setup_nodes()
    assert set(schema()) == node_kinds()
    for exe, target in nodes.items():
        module, func = target.split(":")
        path = os.path.join(REPO, *module.split(".")) + ".py"
        tree = ast.parse(open(path).read())
        assert any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body), target
    for exe, params in schema().items():
        for p in params:
            assert p.description and p.type in ("string", "bool", "integer", "double", "string_array")
            assert p.coerce(p.default) == p.default, (exe, p.name)


@pytest.mark.parametrize("exe", sorted(node_kinds()))
def test_every_node_has_a_valid_parameter_file(exe):
    path = os.path.join(PARAMS_DIR, exe + ".yaml")
    sections = validate_param_file(path)
    assert sections and all(isinstance(v, dict) for v in sections.values())
    raw = yaml.safe_load(open(path))
    for key, section in raw.items():
        assert set(section) == {"ros__parameters"}
        for name, value in section["ros__parameters"].items():
            assert not (isinstance(value, list) and not value), f"{path}: {name}: rcl cannot parse empty lists"


def test_every_parameter_file_in_config_validates():
    found = []
    for root, _, files in os.walk(os.path.join(REPO, "config")):
        for f in files:
            if f.endswith(".yaml"):
                doc = yaml.safe_load(open(os.path.join(root, f)))
                if isinstance(doc, dict) and any(isinstance(v, dict) and "ros__parameters" in v for v in doc.values()):
                    found.append(os.path.join(root, f))
                    validate_param_file(os.path.join(root, f))
    assert len(found) == len(setup_nodes())


def test_parameter_validation_errors(tmp_path):
    from mbde_core.errors import ConfigError

    bad = tmp_path / "estimator.yaml"
    bad.write_text("/**:\n  ros__parameters:\n    publish_rate: fast\n")
    with pytest.raises(ConfigError, match=r"estimator\.yaml: /\*\*\.ros__parameters\.publish_rate: expected a number"):
        validate_param_file(bad)
    bad.write_text("ukf:\n  ros__parameters:\n    publish_rat: 5.0\n")
    with pytest.raises(ConfigError, match="unknown parameter of estimator"):
        validate_param_file(bad)
    bad.write_text("ukf:\n  ros__parameters:\n    estimator: kalman\n")
    with pytest.raises(ConfigError, match="must be one of"):
        validate_param_file(bad)
    bad.write_text("ukf:\n  parameters: {}\n")
    with pytest.raises(ConfigError, match="ros__parameters"):
        validate_param_file(bad)
    other = tmp_path / "teleop.yaml"
    other.write_text("a:\n  ros__parameters: {}\n")
    with pytest.raises(ConfigError, match="named after their executable"):
        validate_param_file(other)
    ok = validate_values("estimator", {"publish_rate": 200, "use_sim_time": True, "estimator": "pf"})
    assert ok["publish_rate"] == 200.0 and isinstance(ok["publish_rate"], float)  # an int for a double is fine
    with pytest.raises(ParameterError, match="parameter 'seed': expected an integer, got 1.5"):
        validate_values("estimator", {"seed": 1.5})
    with pytest.raises(ParameterError, match="must be <= 5"):
        validate_values("estimator", {"reorder_window": 6.0})
    assert validate_values("imu_driver", {"sensors": []})["sensors"] == []
    assert node_params("estimator")["estimator"].choices[:2] == ("ukf", "errorekf")


# ------------------------------------------------------------------------------ package.xml
STDLIB = set(sys.stdlib_module_names)
PY_DEPS = {"numpy": "python3-numpy", "scipy": "python3-scipy", "yaml": "python3-yaml",
           "matplotlib": "python3-matplotlib"}


def imported_modules(paths) -> set[str]:
    out = set()
    for path in paths:
        for node in ast.walk(ast.parse(open(path).read())):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                out.add(node.module.split(".")[0])
    return out


def test_package_xml_lists_every_imported_ros_package():
    nodes_dir = os.path.join(REPO, "mbde_nodes")
    paths = [os.path.join(nodes_dir, f) for f in os.listdir(nodes_dir) if f.endswith(".py")] + LAUNCH
    mods = imported_modules(paths) - STDLIB - {"mbde_core", "mbde_nodes", "__future__"}
    deps = package_depends()
    ros = {m for m in mods if m not in PY_DEPS}
    assert {"rclpy", "launch", "launch_ros", "mbde_msgs", "sensor_msgs"} <= ros
    assert ros <= deps, f"package.xml misses {sorted(ros - deps)}"
    assert {PY_DEPS[m] for m in mods if m in PY_DEPS} <= deps


def test_mbde_core_never_imports_ros():
    ros = {"rclpy", "rcl_interfaces", "launch", "launch_ros", "std_msgs", "sensor_msgs", "mbde_msgs",
           "visualization_msgs", "diagnostic_msgs", "std_srvs", "rosgraph_msgs", "builtin_interfaces", "mbde_nodes"}
    paths = [os.path.join(r, f) for r, _, fs in os.walk(os.path.join(REPO, "mbde_core")) for f in fs if f.endswith(".py")]
    bad = {p: imported_modules([p]) & ros for p in paths}
    assert not {p: m for p, m in bad.items() if m}


# ------------------------------------------------------------------------------ RViz
def published_topics() -> set[str]:
    from mbde_core.estimators.registry import ESTIMATOR_NAMES

    out = {t for pubs in topics.PUBLISHES.values() for t, _, _ in pubs if t.startswith("/")}
    for name in ESTIMATOR_NAMES:  # estimator nodes named after their estimator in /mbde (launch files)
        out |= set(topics.estimator_topics("/mbde", name).values())
    return out


def test_rviz_config_shows_only_published_marker_topics():
    doc = yaml.safe_load(open(os.path.join(REPO, "rviz", "mbde.rviz")))
    vm = doc["Visualization Manager"]
    from mbde_core.scenario.scenario import Scenario  # noqa: F401  (frame default lives there)
    assert vm["Global Options"]["Fixed Frame"] == "world"  # the frame_id of every marker (scenario default)
    classes = [d["Class"] for d in vm["Displays"]] + [p["Class"] for p in doc["Panels"]] + \
        [t["Class"] for t in vm["Tools"]] + [vm["Views"]["Current"]["Class"]]
    assert all(c.startswith(("rviz_default_plugins/", "rviz_common/")) for c in classes), classes
    marker_topics = {d["Topic"]["Value"]: d for d in vm["Displays"] if "Topic" in d}
    assert set(marker_topics) <= published_topics()
    assert all(d["Class"] == "rviz_default_plugins/MarkerArray" for d in marker_topics.values())
    assert all(t.endswith("markers") for t in marker_topics)
    assert {"/mbde/model/markers", "/mbde/ground_truth/markers", "/mbde/pf/markers", "/mbde/ukf/markers",
            "/mbde/errorekf/markers", "/mbde/adekf/markers"} <= set(marker_topics)
    # the model's markers are latched: the display must ask for transient local to get them
    assert marker_topics["/mbde/model/markers"]["Topic"]["Durability Policy"] == "Transient Local"


# ------------------------------------------------------------------------------ README
def test_readme_documents_nodes_topics_and_parameters():
    text = readme()
    assert "colcon build --base-paths src/mbde src/mbde/mbde_msgs" in text
    for exe, params in schema().items():
        assert f"`{exe}`" in text, exe
        for p in params:
            assert f"`{p.name}`" in text, f"README: parameter {p.name} of {exe}"
    for pubs in list(topics.PUBLISHES.values()) + list(topics.SUBSCRIBES.values()):
        for topic, _, _ in pubs:
            if not topic.startswith("<"):
                assert f"`{topic}`" in text, f"README: topic {topic}"
    assert "`~/reset`" in text and "mbde render" in text
    pics = re.findall(r"!\[[^]]*\]\(\.\./([^)]+)\)", text)
    assert pics and all(os.path.isfile(os.path.join(REPO, "docs", p)) for p in pics)
