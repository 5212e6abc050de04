"""Malformed-config corpus: mechanism, sensor, scenario and estimator YAML and CLI arguments.

Every case must end with exit status 2 and exactly one line on stderr that names the
file (for files) and the key path or argument, never a traceback: deep nesting, YAML
tags, alias bombs, duplicate keys, huge numbers and expressions included. The cases run
``mbde_core.cli.main.main`` in-process (the console script is ``sys.exit(main())``); two
of them also through a subprocess.
"""
import contextlib
import io
import os

import pytest

from conftest import REPO, mech_path, run_mbde
from mbde_core.cli.main import main

MECH = open(mech_path("fourbar"), encoding="utf-8").read()
GYRO = "  - {name: gyro, type: gyroscope, body: coupler, period: 0.005, noise: {sigma: 0.01}}\n"
SCENARIO = f"""name: corpus
mechanism: {mech_path("fourbar")}
sensors:
{GYRO}duration: 1
step: 0.001
seed: 1
"""
ESTIMATORS = "ukf: {step: 0.005}\n"


def mech(old, new):
    assert old in MECH
    return MECH.replace(old, new, 1)


def param(value):
    return mech("L1: 2.0", f"L1: {value}")


def sensors(item):
    return SCENARIO.replace(GYRO, item)


def laughs():
    lines = ["a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    for prev, cur in zip("abcdefg", "bcdefgh"):
        lines.append(f"{cur}: &{cur} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join(lines) + "\nparameters: {L1: *h}\n"


def deep_block(levels):
    return "".join("  " * i + "a:\n" for i in range(levels)) + "  " * levels + "1\n"


# (id, kind, text, expected fragments of the error line). kind: mech (mbde info FILE),
# scenario (mbde simulate FILE), estimator (mbde replay BAG --config FILE)
FILES = [
    # mechanism YAML
    ("deep-flow-list-5000", "mech", "points: " + "[" * 5000 + "]" * 5000 + "\n", ["line 1", "nested deeper"]),
    ("deep-flow-map-5000", "mech", "points: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", ["line 1", "nested deeper"]),
    ("deep-block-3000", "mech", deep_block(3000), ["line 65", "nested deeper"]),
    ("deep-200", "mech", "points: " + "[" * 200 + "]" * 200 + "\n", ["line 1", "nested deeper"]),
    ("deep-aliases", "mech", "".join(f"a{i}: &a{i} [*a{i - 1}]\n" if i else "a0: &a0 [1]\n" for i in range(70)), ["a69[0]", "nested deeper"]),
    ("recursive-alias", "mech", "points: &p [*p]\n", ["points[0]", "recursive alias"]),
    ("billion-laughs", "mech", laughs(), ["aliases expand"]),
    ("python-tag", "mech", "!!python/object/apply:os.system ['echo pwned']\n", ["line 1", "python/object"]),
    ("custom-tag", "mech", param("!metres 2.0"), ["line", "!metres"]),
    ("binary-tag", "mech", param("!!binary aGVsbG8="), ["parameters.L1", "bytes"]),
    ("set-tag", "mech", param("!!set {a, b}"), ["parameters.L1", "expected a number"]),
    ("huge-power", "mech", param("9**9**9**9"), ["parameters.L1", "out of range"]),
    ("huge-sum", "mech", param("1+" * 100000 + "1"), ["parameters.L1", "too long"]),
    ("deep-parentheses", "mech", param("(" * 40 + "1" + ")" * 40), ["parameters.L1", "nested too deeply"]),
    ("unary-chain", "mech", param("'" + "-" * 300 + "1'"), ["parameters.L1", "too long"]),
    ("5000-digit-integer", "mech", param("9" * 5000), ["too many digits"]),
    ("overflowing-float", "mech", param("1e400"), ["parameters.L1", "not finite"]),
    ("exp-overflow", "mech", param("exp(1000)"), ["parameters.L1", "range error"]),
    ("division-by-zero", "mech", param("1/0"), ["parameters.L1", "division by zero"]),
    ("sqrt-negative", "mech", param("sqrt(-1)"), ["parameters.L1", "domain error"]),
    ("unknown-function", "mech", param("foo(1)"), ["parameters.L1", "unknown function 'foo'"]),
    ("nan-parameter", "mech", param(".nan"), ["parameters.L1", "not finite"]),
    ("duplicate-key", "mech", mech("L2: 8.0", "L2: 8.0\n  L1: 3.0"), ["line", "duplicate key 'L1'"]),
    ("integer-key", "mech", MECH + "\n1: 2\n", ["keys must be strings"]),
    ("empty-file", "mech", "", ["expected a mapping"]),
    ("list-root", "mech", "- 1\n- 2\n", ["expected a mapping, got a list"]),
    ("gravity-string", "mech", mech("gravity: [0, -9.81]", "gravity: down"), ["gravity"]),
    ("gravity-length", "mech", mech("gravity: [0, -9.81]", "gravity: [0, -9.81, 0]"), ["gravity"]),
    # sensor YAML (a scenario's sensors list)
    ("sensor-unknown-type", "scenario", sensors("  - {name: g, type: lidar, period: 0.01, noise: {sigma: 1}}\n"),
     ["sensors[0].type"]),
    ("sensor-unknown-body", "scenario",
     sensors("  - {name: g, type: gyroscope, body: wheel, period: 0.01, noise: {sigma: 1}}\n"), ["sensors[0].body"]),
    ("sensor-missing-body", "scenario", sensors("  - {name: g, type: gyroscope, period: 0.01, noise: {sigma: 1}}\n"),
     ["sensors[0]", "body"]),
    ("sensor-negative-period", "scenario",
     sensors("  - {name: g, type: gyroscope, body: coupler, period: -0.01, noise: {sigma: 1}}\n"),
     ["sensors[0].period", "> 0"]),
    ("sensor-negative-sigma", "scenario",
     sensors("  - {name: g, type: gyroscope, body: coupler, period: 0.01, noise: {sigma: -1}}\n"),
     ["sensors[0].noise.sigma"]),
    ("sensor-axes-range", "scenario",
     sensors("  - {name: a, type: accelerometer, body: coupler, axes: [0, 1, 2], period: 0.01, noise: {sigma: 1}}\n"),
     ["sensors[0].axes", "one or two"]),
    ("sensor-duplicate-name", "scenario", sensors(GYRO + GYRO), ["sensors[1].name", "duplicate"]),
    ("sensor-unknown-key", "scenario",
     sensors("  - {name: g, type: gyroscope, body: coupler, perod: 0.01, noise: {sigma: 1}}\n"),
     ["sensors[0].perod", "unknown key"]),
    ("sensors-not-a-list", "scenario", SCENARIO.replace("sensors:\n" + GYRO, "sensors: 3\n"), ["sensors", "list"]),
    # scenario YAML
    ("scenario-missing-mechanism", "scenario", SCENARIO.replace(f"mechanism: {mech_path('fourbar')}\n", ""),
     ["mechanism", "missing"]),
    ("scenario-mechanism-not-found", "scenario", SCENARIO.replace(mech_path("fourbar"), "/nope/m.yaml"),
     ["/nope/m.yaml", "not found"]),
    ("scenario-negative-duration", "scenario", SCENARIO.replace("duration: 1", "duration: -1"), ["duration", "> 0"]),
    ("scenario-unknown-key", "scenario", SCENARIO + "durration: 3\n", ["durration", "did you mean 'duration'"]),
    ("scenario-model-error-string", "scenario", SCENARIO + "model_errors: {gravity: lots}\n",
     ["model_errors.gravity"]),
    ("scenario-initial-unknown-coordinate", "scenario", SCENARIO + "initial_state: {position: {phi: 1}}\n",
     ["initial_state.position.phi"]),
    ("scenario-deep-nesting", "scenario", SCENARIO + "extra: " + "[" * 5000 + "]" * 5000 + "\n", ["nested deeper"]),
    ("scenario-python-tag", "scenario", SCENARIO.replace("seed: 1", "seed: !!python/name:os.system"), ["python/name"]),
    # estimator YAML
    ("estimator-unknown-name", "estimator", "ukff: {step: 0.005}\n", ["ukff", "unknown estimator"]),
    ("estimator-gate-above-one", "estimator", "ukf: {gate: 1.5}\n", ["ukf.gate"]),
    ("estimator-gate-string", "estimator", "ukf: {gate: high}\n", ["ukf.gate"]),
    ("estimator-reacquire-inflation", "estimator", "dekf: {reacquire: {inflation: 0.5}}\n",
     ["dekf.reacquire.inflation", ">= 1"]),
    ("estimator-reacquire-rejections", "estimator", "pf: {reacquire: {rejections: 0}}\n",
     ["pf.reacquire.rejections"]),
    ("estimator-reacquire-unknown", "estimator", "ukf: {reacquire: {after: 3}}\n", ["ukf.reacquire.after"]),
    ("estimator-negative-step", "estimator", "ukf: {step: -1}\n", ["ukf.step"]),
    ("estimator-unknown-option", "estimator", "ukf: {alfa: 1}\n", ["ukf.alfa", "unknown key"]),
    ("estimator-pf-particles", "estimator", "pf: {particles: 0}\n", ["pf.particles"]),
    ("estimator-pf-scheme", "estimator", "pf: {resampling: {scheme: lottery}}\n", ["pf.resampling.scheme"]),
    ("estimator-negative-psd", "estimator", "dekf: {plant_noise: {acceleration_psd: -1}}\n",
     ["dekf.plant_noise.acceleration_psd"]),
    ("estimator-deep-nesting", "estimator", "ukf: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n", ["nested deeper"]),
    ("estimator-tag", "estimator", "ukf: !!python/object:dict {}\n", ["python/object"]),
    ("estimator-huge-expression", "estimator", "ukf: {step: '" + "1+" * 5000 + "1'}\n", ["ukf.step", "too long"]),
    # every numeric option finite and in range, before the run
    ("estimator-ukf-alpha-zero", "estimator", "ukf: {alpha: 0}\n", ["ukf.alpha", "> 0"]),
    ("estimator-ukf-beta-negative", "estimator", "ukf: {beta: -1}\n", ["ukf.beta", ">= 0"]),
    ("estimator-nan-psd", "estimator", "dekf: {plant_noise: {acceleration_psd: .nan}}\n",
     ["dekf.plant_noise.acceleration_psd", "finite"]),
    ("estimator-input-nan-psd", "estimator", "ukf: {inputs: [{coordinate: theta, psd: .nan, sigma0: 1}]}\n",
     ["ukf.inputs[0].psd", "finite"]),
    ("estimator-input-nan-sigma0", "estimator", "dekf: {inputs: [{coordinate: theta, sigma0: .nan}]}\n",
     ["dekf.inputs[0].sigma0", "finite"]),
    ("estimator-input-nan-limit", "estimator", "errorekf: {inputs: [{coordinate: theta, limit: .nan}]}\n",
     ["errorekf.inputs[0].limit", "finite"]),
    ("estimator-input-nan-initial", "estimator", "cekf: {inputs: [{coordinate: theta, initial: .nan}]}\n",
     ["cekf.inputs[0].initial", "finite"]),
    ("estimator-input-inf-psd", "estimator", "viekf: {inputs: [{coordinate: theta, psd: .inf}]}\n",
     ["viekf.inputs[0].psd", "finite"]),
    ("estimator-adekf-input-nan", "estimator", "adekf: {inputs: [{coordinate: theta, r_a: .nan}]}\n",
     ["adekf.inputs[0].r_a", "finite"]),
    ("estimator-adekf-weights-nan", "estimator", "adekf: {learn: {order_weights: [1, .nan]}}\n",
     ["adekf.learn.order_weights"]),
    ("estimator-adekf-samples", "estimator", "adekf: {learn: {samples: -3}}\n", ["adekf.learn.samples"]),
    ("estimator-cekf-newton", "estimator", "cekf: {newton_iterations: 1.5}\n", ["cekf.newton_iterations"]),
    ("estimator-diekfpm-iterations", "estimator", "diekfpm: {iterations: 0}\n", ["diekfpm.iterations", ">= 1"]),
    ("estimator-errorekf-bias-psd", "estimator", "errorekf: {acceleration_bias_psd: -1}\n",
     ["errorekf.acceleration_bias_psd", ">= 0"]),
    ("estimator-pf-follower-alpha", "estimator", "pf: {refine: {options: {alpha: 0}}}\n", ["pf.refine.options.alpha"]),
]

# options checked against the run (its model and sensors) before it starts: (id, text, fragments);
# the bag: fourbar_imu (coordinates P1.x, P1.y, P2.x, P2.y, theta; sensors gyro_coupler, accel_rocker)
RUN_FILES = [
    ("run-unknown-sensor", "ukf: {sensor_sigma: {gyro: 0.01}}\n", ["ukf.sensor_sigma.gyro", "not a sensor", "gyro_coupler"]),
    ("run-unknown-sensor-pf", "pf: {sensor_sigma: {camera: 0.01}}\n", ["pf.sensor_sigma.camera", "not a sensor"]),
    ("run-unknown-input-coordinate", "ukf: {inputs: [{coordinate: phi, psd: 1, sigma0: 1}]}\n",
     ["ukf.inputs[0].coordinate", "'phi'", "theta"]),
    ("run-unknown-force-limit", "dekf: {rule: {force_limits: {phi: 2.0}}}\n", ["dekf.rule.force_limits.phi", "theta"]),
    ("run-adekf-unknown-coordinate", "adekf: {inputs: [{coordinate: phi}]}\n", ["adekf.inputs[0].coordinate"]),
    ("run-pf-particles-budget", "pf: {particles: 100000000}\n", ["pf.particles", "GB", "at most"]),
    ("run-pf-init-particles-budget", "vipf: {uniform: {particles: 1000000000}}\n", ["vipf.uniform.particles", "GB"]),
    ("run-pf-unknown-branch", "pf: {uniform: {branches: [7]}}\n", ["pf.uniform.branches", "[7]"]),
    ("run-pf-range-pairs", "pf: {uniform: {z: [[0, 1], [0, 1]]}}\n", ["pf.uniform.z", "1 [lo, hi] pairs"]),
]

SCEN = os.path.join(REPO, "config", "scenarios", "fourbar_gyro.yaml")
# (id, argv, expected fragments)
ARGS = [
    ("replay-missing-arguments", ["replay"], ["required", "bag"]),
    ("replay-seed-not-int", ["replay", "BAG", "--out", "OUT", "--seed", "abc"], ["--seed", "non-negative integer"]),
    ("replay-seed-negative", ["replay", "BAG", "--out", "OUT", "--seed=-5"], ["--seed", "got -5"]),
    ("replay-jobs-zero", ["replay", "BAG", "--out", "OUT", "--jobs", "0"], ["--jobs", "got 0"]),
    ("replay-jobs-and-scheduler", ["replay", "BAG", "--out", "OUT", "--jobs", "2", "--scheduler", "tcp://h:1"],
     ["--jobs", "--scheduler"]),
    ("replay-reorder-nan", ["replay", "BAG", "--out", "OUT", "--reorder-window", "nan"], ["--reorder-window", "finite"]),
    ("simulate-duration-fills-disk", ["simulate", SCEN, "--out", "OUT", "--set", "duration=1e8"], ["duration", "free"]),
    ("simulate-beyond-2262", ["simulate", SCEN, "--out", "OUT", "--set", "duration=1e10"], ["duration", "2262"]),
    ("smooth-window-nan", ["smooth", "BAG", "--out", "OUT", "--window", "nan"], ["--window", "finite"]),
    ("tune-window-inf", ["tune", "BAG", "--window", "inf"], ["--window", "finite"]),
    ("tune-force-without-out", ["tune", "BAG", "--force"], ["--force", "--out"]),
    ("render-dpi-zero", ["render", "BAG", "--out", "OUT", "--dpi", "0"], ["--dpi", "got 0"]),
    ("learn-map-restarts-zero", ["learn-map", mech_path("pendulum"), "--restarts", "0"], ["--restarts", "got 0"]),
    ("observability-rtol", ["adekf-observability", mech_path("slider_crank"), "--sensors", "[]", "--rtol", "2"],
     ["--rtol", "(0, 1)"]),
    ("live-rtf-zero", ["live", "--real-time-factor", "0"], ["--real-time-factor", "got 0"]),
    ("bench-seed-negative", ["bench", "faults", "--seed=-1"], ["--seed", "got -1"]),
    ("bench-runs-zero", ["bench", "accuracy", "--out", "OUT", "--runs", "0"], ["--runs", "got 0"]),
    ("bare-mbde", [], ["a command is required"]),
    ("replay-unknown-estimator", ["replay", "BAG", "--out", "OUT", "--estimators", "ukf,kalman"], ["--estimators", "kalman"]),
    ("replay-no-such-bag", ["replay", "BAG", "--out", "OUT"], ["BAG", "no such bag"]),
    ("replay-storage-choice", ["replay", "BAG", "--out", "OUT", "--storage", "zip"], ["--storage", "zip"]),
    ("simulate-set-malformed", ["simulate", SCEN, "--out", "OUT", "--set", "duration"], ["--set", "KEY.PATH=VALUE"]),
    ("simulate-set-unknown-index", ["simulate", SCEN, "--out", "OUT", "--set", "sensors[9].period=1"], ["sensors[9]"]),
    ("simulate-set-deep-value", ["simulate", SCEN, "--out", "OUT", "--set", "duration=" + "[" * 3000 + "]" * 3000],
     ["--set", "duration"]),
    ("bench-unknown", ["bench", "lottery"], ["NAME", "lottery"]),
    ("bench-accuracy-periods", ["bench", "accuracy", "--out", "OUT", "--periods", "a,b"], ["--periods"]),
    ("bench-faults-unknown-fault", ["bench", "faults", "--faults", "meteor"], ["meteor"]),
    ("bench-faults-unknown-scenario", ["bench", "faults", "--scenario", "moon"], ["--scenario", "moon"]),
    ("unknown-command", ["launch"], ["unknown command 'launch'"]),
    ("unrecognized-argument", ["info", mech_path("fourbar"), "--bogus"], ["unrecognized arguments: --bogus"]),
]


def _run(argv):
    err, out = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    return code, err.getvalue()


def _check(code, stderr, fragments):
    lines = stderr.strip().splitlines()
    assert code == 2, stderr
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    for f in fragments:
        assert f in lines[0], (f, lines[0])


def test_corpus_size():
    assert len(FILES) + len(ARGS) >= 45
    kinds = {k for _, k, _, _ in FILES}
    assert kinds == {"mech", "scenario", "estimator"}


@pytest.mark.parametrize("label, kind, text, fragments", FILES, ids=[c[0] for c in FILES])
def test_malformed_file(tmp_path, label, kind, text, fragments):
    path = tmp_path / f"{label}.yaml"
    path.write_text(text, encoding="utf-8")
    argv = {"mech": ["info", path], "scenario": ["simulate", path, "--out", tmp_path / "bag"],
            "estimator": ["replay", tmp_path / "nobag", "--config", path, "--out", tmp_path / "out"]}[kind]
    code, stderr = _run(argv)
    _check(code, stderr, [str(path)] + fragments)
    assert not (tmp_path / "bag").exists() and not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def imu_bag(tmp_path_factory):
    from mbde_core.live.model_source import load_source
    from mbde_core.simulator.bag import write_simulation_bag

    out = tmp_path_factory.mktemp("corpus") / "bag"
    write_simulation_bag(load_source(scenario_file="scenarios/fourbar_imu.yaml", settings=["duration=0.2"]), out)
    return out


@pytest.mark.parametrize("label, text, fragments", RUN_FILES, ids=[c[0] for c in RUN_FILES])
def test_options_checked_against_the_run(tmp_path, imu_bag, label, text, fragments):
    """Names, branch labels, range dimensions and the particles' memory budget: one line
    naming the file and key path, exit 2, before any estimator runs (no metrics written)."""
    path = tmp_path / f"{label}.yaml"
    path.write_text(text, encoding="utf-8")
    name = text.split(":")[0]
    code, stderr = _run(["replay", imu_bag, "--estimators", name, "--config", path, "--out", tmp_path / "out",
                         "--jobs", "1", "--no-plots"])
    _check(code, stderr, [str(path)] + fragments)
    assert not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.parametrize("label, argv, fragments", ARGS, ids=[c[0] for c in ARGS])
def test_malformed_arguments(tmp_path, label, argv, fragments):
    subst = {"BAG": str(tmp_path / "BAG"), "OUT": str(tmp_path / "out")}
    code, stderr = _run([subst.get(a, a) if isinstance(a, str) else a for a in argv])
    _check(code, stderr, [subst.get(f, f) for f in fragments])


def test_invalid_utf8_and_directory(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe points: [\x80]")
    _check(*_run(["info", bad]), [str(bad), "cannot read file"])
    _check(*_run(["info", tmp_path]), [str(tmp_path), "is a directory"])


@pytest.mark.parametrize("text", ["points: " + "[" * 5000 + "]" * 5000 + "\n", param("1+" * 100000 + "1")])
def test_console_script_no_traceback(tmp_path, text):
    """The real process: exit status 2 and one line (no RecursionError traceback)."""
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    proc = run_mbde("info", path)
    _check(proc.returncode, proc.stderr, [str(path)])
