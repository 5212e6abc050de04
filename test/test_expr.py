import math

import pytest

from mbde_core.expr import ExpressionError, compile_expression, evaluate, evaluate_value


@pytest.mark.parametrize(
    "text, env, expected",
    [
        ("(1/3)*mass*length^2", {"mass": 3.0, "length": 2.0}, 4.0),
        ("2^3^2", {}, 512.0),  # right-associative
        ("-2^2", {}, -4.0),
        ("2**-1", {}, 0.5),
        ("sqrt(2)*cos(pi)", {}, -math.sqrt(2)),
        ("1e-3*2 + .5", {}, 0.502),
        ("atan2(1, 1)*4", {}, math.pi),
        ("max(1, 2, 3) - min(4, 5)", {}, -1.0),
        ("0.5*length12", {"length12": 3.0}, 1.5),
        ("L*cos(theta0)", {"L": 2.0, "theta0": math.pi / 3}, 1.0),
    ],
)
def test_values(text, env, expected):
    assert evaluate(text, env) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("1+", "unexpected end"),
        ("foo", "unknown name 'foo'"),
        ("sqrt(-1)", "domain error"),
        ("1/0", "division by zero"),
        ("(1", "unexpected end"),
        ("__import__('os')", "unexpected character"),
        ("os.system", "unexpected character"),
        ("exp(1000)", "range"),
        ("sin(1, 2)", "takes 1 arguments"),
        ("", "empty"),
    ],
)
def test_errors_are_one_line(text, fragment):
    with pytest.raises(ExpressionError) as err:
        evaluate(text)
    assert fragment in str(err.value)
    assert "\n" not in str(err.value)


def test_compiled_expression_reuses_parse():
    fn = compile_expression("2*t + a")
    assert fn({"t": 1.0, "a": 3.0}) == 5.0
    assert fn({"t": 2.0, "a": 3.0}) == 7.0


def test_evaluate_value_types():
    assert evaluate_value(3) == 3.0
    assert evaluate_value("3*2") == 6.0
    for bad in (True, None, [1], float("nan"), float("inf")):
        with pytest.raises(ExpressionError):
            evaluate_value(bad)
