"""Every class of config error gives one line naming file and key path, exit status 2."""
import pytest

from conftest import run_mbde

BASE = """points:
  - {x: 0, y: 0, fixed: true}
  - {x: 1, y: 0}
  - {x: 1, y: 2}
  - {x: 4, y: 0, fixed: true}
planar_bodies:
  - {points: [0, 1], length: auto, mass: 1.0, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {points: [1, 2], length: auto, mass: 2.0, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {points: [2, 3], length: auto, mass: 4.0, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
"""

CASES = [
    ("missing key", BASE.replace("mass: 2.0, ", ""), "planar_bodies[1].mass", "missing required key"),
    ("unknown key", BASE + "gravty: [0, -9.81]\n", "gravty", "unknown key (did you mean 'gravity'?)"),
    ("unknown key in item", BASE.replace("{x: 1, y: 0}", "{x: 1, y: 0, fixd: true}"), "points[1].fixd", "unknown key"),
    ("wrong type", BASE.replace("fixed: true}\n  - {x: 1", "fixed: 'yes'}\n  - {x: 1"), "points[0].fixed", "expected true or false"),
    ("wrong type list", BASE.split("planar_bodies:")[0] + "planar_bodies: 3\n", "planar_bodies", "expected a list"),
    ("non-finite mass", BASE.replace("mass: 4.0", "mass: .nan"), "planar_bodies[2].mass", "not finite"),
    ("negative mass", BASE.replace("mass: 4.0", "mass: -4.0"), "planar_bodies[2].mass", "must be >= 0"),
    ("zero length", BASE.replace("points: [0, 1], length: auto", "points: [0, 1], length: 0"), "planar_bodies[0].length", "must be > 0"),
    ("index out of range", BASE.replace("points: [2, 3]", "points: [2, 7]"), "planar_bodies[2].points[1]", "out of range"),
    ("duplicate names", BASE.replace("{x: 1, y: 0}", "{name: P, x: 1, y: 0}").replace("{x: 1, y: 2}", "{name: P, x: 1, y: 2}"), "points[2].name", "duplicate name 'P'"),
    ("bad expression", BASE.replace("I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}\n  - {points: [1, 2]", "I0: (1/3)*mas*length^2, cog: [0.5*length, 0]}\n  - {points: [1, 2]"), "planar_bodies[0].I0", "unknown name 'mas'"),
    ("cannot assemble", BASE.replace("points: [1, 2], length: auto", "points: [1, 2], length: 9"), "points", "cannot be assembled"),
    ("yaml syntax", BASE + "  - {points: [0, 1\n", "line", "YAML syntax error"),
    ("no dof", BASE.replace("{x: 4, y: 0, fixed: true}", "{x: 4, y: 0, fixed: true}\n  - {x: 0, y: 3, fixed: true}") + "  - {points: [2, 4], length: auto, mass: 1, I0: 1, cog: [0, 0]}\n", "planar_bodies", "no degree of freedom"),
]


@pytest.mark.parametrize("label, text, keypath, fragment", CASES, ids=[c[0] for c in CASES])
def test_config_error_one_line(tmp_path, label, text, keypath, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    proc = run_mbde("info", path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert str(path) in lines[0]
    assert keypath in lines[0]
    assert fragment in lines[0]


def test_missing_file(tmp_path):
    proc = run_mbde("info", tmp_path / "nope.yaml")
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("nope.yaml: file not found")
