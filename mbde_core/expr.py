"""A small, safe arithmetic evaluator for mechanism YAML expressions (never ``eval``).

Grammar (precedence low to high; ``^`` and ``**`` are right-associative powers)::

    expr   := term (('+' | '-') term)*
    term   := unary (('*' | '/') unary)*
    unary  := ('+' | '-') unary | power
    power  := atom (('^' | '**') unary)?
    atom   := NUMBER | NAME | NAME '(' [expr (',' expr)*] ')' | '(' expr ')'

Names are looked up in the variables given to :func:`evaluate` (parameters, ``index``,
``length``, ``mass``, ``lengthIJ``, ``x0``/``y0``...) and then in the constants ``pi``
and ``e``. Functions: sqrt, sin, cos, tan, asin, acos, atan, atan2, exp, log, abs,
min, max, hypot, deg2rad, rad2deg.
"""
from __future__ import annotations

import functools
import math
import re
from typing import Mapping

__all__ = ["ExpressionError", "compile_expression", "evaluate", "evaluate_value"]


class ExpressionError(ValueError):
    """The expression cannot be parsed or evaluated; the message says why (one line)."""


_FUNCS = {
    "sqrt": (math.sqrt, 1),
    "sin": (math.sin, 1),
    "cos": (math.cos, 1),
    "tan": (math.tan, 1),
    "asin": (math.asin, 1),
    "acos": (math.acos, 1),
    "atan": (math.atan, 1),
    "atan2": (math.atan2, 2),
    "exp": (math.exp, 1),
    "log": (math.log, 1),
    "abs": (abs, 1),
    "min": (min, -1),
    "max": (max, -1),
    "hypot": (math.hypot, 2),
    "deg2rad": (math.radians, 1),
    "rad2deg": (math.degrees, 1),
}
_CONSTS = {"pi": math.pi, "e": math.e}

_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)|(?P<name>[A-Za-z_][A-Za-z_0-9]*)"
    r"|(?P<op>\*\*|[-+*/^(),]))"
)


def _tokenize(text: str) -> list[tuple[str, str]]:
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"unexpected character {text[pos:].strip()[:1]!r} in expression {text!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    """Recursive-descent parser producing a closure ``env -> float``."""

    def __init__(self, text: str):
        self.text = text
        self.toks = _tokenize(text)
        self.i = 0

    def _peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else (None, None)

    def _take(self, value=None):
        kind, tok = self._peek()
        if kind is None:
            raise ExpressionError(f"unexpected end of expression {self.text!r}")
        if value is not None and tok != value:
            raise ExpressionError(f"expected {value!r} but found {tok!r} in expression {self.text!r}")
        self.i += 1
        return kind, tok

    def parse(self):
        if not self.toks:
            raise ExpressionError("empty expression")
        node = self._expr()
        if self.i != len(self.toks):
            raise ExpressionError(f"unexpected {self.toks[self.i][1]!r} in expression {self.text!r}")
        return node

    def _expr(self):
        node = self._term()
        while self._peek()[1] in ("+", "-"):
            op = self._take()[1]
            node = _binary(op, node, self._term(), self.text)
        return node

    def _term(self):
        node = self._unary()
        while self._peek()[1] in ("*", "/"):
            op = self._take()[1]
            node = _binary(op, node, self._unary(), self.text)
        return node

    def _unary(self):
        if self._peek()[1] in ("+", "-"):
            op = self._take()[1]
            inner = self._unary()
            return (lambda env: -inner(env)) if op == "-" else inner
        return self._power()

    def _power(self):
        base = self._atom()
        if self._peek()[1] in ("^", "**"):
            self._take()
            return _binary("^", base, self._unary(), self.text)
        return base

    def _atom(self):
        kind, tok = self._take()
        if kind == "num":
            value = float(tok)
            return lambda env: value
        if kind == "name":
            if self._peek()[1] == "(":
                return self._call(tok)
            text = self.text

            def lookup(env, name=tok):
                if name in env:
                    return float(env[name])
                if name in _CONSTS:
                    return _CONSTS[name]
                raise ExpressionError(f"unknown name {name!r} in expression {text!r}")

            return lookup
        if tok == "(":
            node = self._expr()
            self._take(")")
            return node
        raise ExpressionError(f"unexpected {tok!r} in expression {self.text!r}")

    def _call(self, name: str):
        if name not in _FUNCS:
            raise ExpressionError(f"unknown function {name!r} in expression {self.text!r}")
        fn, arity = _FUNCS[name]
        self._take("(")
        args = []
        if self._peek()[1] != ")":
            args.append(self._expr())
            while self._peek()[1] == ",":
                self._take()
                args.append(self._expr())
        self._take(")")
        if (arity >= 0 and len(args) != arity) or (arity < 0 and not args):
            raise ExpressionError(f"{name}() takes {arity if arity >= 0 else '1 or more'} arguments, got {len(args)}")

        def call(env):
            values = [a(env) for a in args]
            try:
                return float(fn(*values))
            except (ValueError, OverflowError) as exc:
                raise ExpressionError(f"{name}{tuple(values)}: {exc}") from None

        return call


def _binary(op: str, lhs, rhs, text: str):
    if op == "+":
        return lambda env: lhs(env) + rhs(env)
    if op == "-":
        return lambda env: lhs(env) - rhs(env)
    if op == "*":
        return lambda env: lhs(env) * rhs(env)
    if op == "/":

        def div(env):
            den = rhs(env)
            if den == 0:
                raise ExpressionError(f"division by zero in expression {text!r}")
            return lhs(env) / den

        return div

    def power(env):
        try:
            result = lhs(env) ** rhs(env)
        except (OverflowError, ZeroDivisionError) as exc:
            raise ExpressionError(f"{exc} in expression {text!r}") from None
        if isinstance(result, complex):
            raise ExpressionError(f"negative base to a fractional power in expression {text!r}")
        return result

    return power


@functools.lru_cache(maxsize=4096)
def _parse(text: str):
    """The parsed expression tree of ``text`` (memoised: loaders re-read the same texts)."""
    return _Parser(text).parse()


def compile_expression(text: str):
    """Parse once; return ``fn(variables: Mapping) -> float`` (raises ExpressionError)."""
    node = _parse(str(text))

    def fn(variables: Mapping[str, float] | None = None) -> float:
        try:
            value = node(variables or {})
        except OverflowError as exc:
            raise ExpressionError(f"{exc} in expression {text!r}") from None
        if not math.isfinite(value):
            raise ExpressionError(f"expression {text!r} is not finite ({value})")
        return value

    return fn


def evaluate(text: str, variables: Mapping[str, float] | None = None) -> float:
    """Evaluate an arithmetic expression string; raises :class:`ExpressionError`.

    >>> evaluate("(1/3)*mass*length^2", {"mass": 3.0, "length": 2.0})
    4.0
    """
    return compile_expression(text)(variables)


def evaluate_value(value, variables: Mapping[str, float] | None = None) -> float:
    """A YAML scalar as a float: numbers pass through, strings are evaluated, bools rejected."""
    if isinstance(value, bool) or value is None:
        raise ExpressionError(f"expected a number or an expression, got {value!r}")
    if isinstance(value, (int, float)):
        value = float(value)
        if not math.isfinite(value):
            raise ExpressionError(f"value {value} is not finite")
        return value
    if isinstance(value, str):
        return evaluate(value, variables)
    raise ExpressionError(f"expected a number or an expression, got a {type(value).__name__}")
