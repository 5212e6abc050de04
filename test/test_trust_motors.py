"""``mbde bench trust``'s motors runs (mbde_bench.trust_motors): every motors-bench scenario
with a motor, torque measured and unknown, simulated for that bench's duration; a row per
estimator scored like the trust bench's own runs, n/a where the estimator cannot take the
variant."""
from mbde_bench.motors import SCENARIOS
from mbde_bench.trust_motors import KIND, motor_cases, run_motor_case


def test_motor_cases_are_the_motor_scenarios_in_both_variants():
    cases = dict(motor_cases())
    assert "motors/moving:unknown" in cases and "motors/moving:measured" in cases
    assert not any(name == "released" for name in cases.values())  # the reference has no motor
    assert {name for name in cases.values()} == {n for n, v in SCENARIOS.items() if "unknown" in v[1]}


def test_a_motor_run_is_scored_like_the_trust_runs(tmp_path):
    rows = run_motor_case(("motors/pendulum:unknown", 0, ["errorekf"], str(tmp_path)))
    row = rows[0]
    assert row["status"] == "ok", row
    assert row["kind"] == KIND and row["model"] == "exact" and row["case"] == "motors/pendulum:unknown"
    assert row["ok_steps"] > 0 and 0.0 <= row["fraction"]["LOST"] <= 1.0
    assert row["ok_within"] >= 0.95 * row["ok_steps"]  # on track: the verdict's OK holds
    assert not list(tmp_path.iterdir())  # the run's bag is removed
