"""The README's walk-through "Your linkage and your IMU" runs as written: its YAML blocks
are written to the files their first comment names, its `mbde ...` lines are run in that
folder, and the replays track the simulated truth with consistent filters."""
import json
import os
import re
import shlex

from conftest import REPO, run_mbde

SECTION = "## Your linkage and your IMU: from YAML to replay"


def walkthrough():
    text = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()
    body = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(\w+)\n(.*?)```", body, re.S)
    files = {}
    commands = []
    for lang, code in blocks:
        if lang == "yaml":
            name = re.match(r"# (\S+\.yaml):", code).group(1)
            files[name] = code
        elif lang == "sh":
            commands += [line for line in code.splitlines() if line.startswith("mbde ")]
    return files, commands


def test_readme_walkthrough_runs_as_written(tmp_path):
    files, commands = walkthrough()
    assert set(files) == {"my_linkage.yaml", "my_imu.yaml", "my_estimators.yaml", "my_scenario.yaml"}
    assert len(commands) == 4 and commands[0].startswith("mbde info")
    for name, code in files.items():
        (tmp_path / name).write_text(code)
    for line in commands:
        proc = run_mbde(*shlex.split(line)[1:], cwd=tmp_path)
        assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
    for out, names in (("my_replay", ("ukf", "errorekf")), ("robot_replay", ("ukf",))):
        doc = json.loads((tmp_path / out / "metrics.json").read_text())
        for name in names:
            m = doc["estimators"][name]["metrics"]
            assert m["rmse"]["z"][0] < 0.01  # rad: the crank angle
            lo, hi = m["nees"]["band_95"]
            assert 0.5 * lo < m["nees"]["mean"] < 2 * hi  # consistent, roughly
        assert (tmp_path / out / "estimates" / "metadata.yaml").is_file()
