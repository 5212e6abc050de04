"""A tiny symbolic layer for generating straight-line numeric code (see :mod:`codegen`).

Values are ``Sym(c, name)`` = c * name (name None: the constant c). An :class:`Emitter`
collects the statements of one function body and keeps them cheap: products and sums
are emitted only when they cost an operation (a lone scaled variable is carried as a
Sym and its factor folded into whatever uses it), exact common factors and signs are
pulled out of sums, identical expressions are reused, and (a*b)/b cancels.
:func:`block_triangular` orders a sparse square block for block substitution, and
:class:`Source` assembles functions (unpacking only the inputs they use, dropping dead
assignments).
"""
from __future__ import annotations

import re


class Sym:
    """A value ``c * name`` of the generated code, or the constant ``c`` (name None)."""

    __slots__ = ("c", "name")

    def __init__(self, c: float, name: str | None = None):
        self.c = float(c)
        self.name = name if c != 0.0 else None

    @property
    def zero(self) -> bool:
        return self.c == 0.0

    def expr(self) -> str:
        """Python expression of this value."""
        if self.name is None:
            return repr(self.c)
        if self.c == 1.0:
            return self.name
        if self.c == -1.0:
            return f"-{self.name}"
        return f"{self.c!r}*{self.name}"


ZERO = Sym(0.0)


def var(name: str) -> Sym:
    return Sym(1.0, name)


class Emitter:
    """Collects the statements of one generated function body."""

    def __init__(self, prefix: str):
        self.lines: list[str] = []
        self.prefix = prefix
        self._k = 0
        self._seen: dict[str, str] = {}  # expression -> variable (common subexpressions)
        self._products: dict[str, list[str]] = {}  # variable -> factors, for a*b/a = b

    def fresh(self) -> str:
        self._k += 1
        return f"{self.prefix}{self._k}"

    def let(self, expr: str, name: str | None = None) -> Sym:
        """A variable holding ``expr``: an existing one if the same text was emitted."""
        if name is None and expr in self._seen:
            return var(self._seen[expr])
        name = name or self.fresh()
        self.lines.append(f"{name} = {expr}")
        self._seen[expr] = name
        return var(name)

    def forget(self):
        """Stop reusing earlier expressions (a variable was rebound, or lines moved)."""
        self._seen.clear()

    def lin(self, terms, name: str | None = None) -> Sym:
        """Sum of products ``coef * f1 * f2 * ...``; terms are tuples (coef, *factors).

        Factors are Syms or numbers. Zero terms are dropped, constants folded; a single
        scaled variable is returned without emitting anything (its factor is carried in
        the Sym and folded into whatever uses it).
        """
        mons: list[tuple[float, list[str]]] = []
        const = 0.0
        for coef, *factors in terms:
            c = float(coef)
            names = []
            for f in factors:
                if isinstance(f, Sym):
                    c *= f.c
                    if f.name is not None:
                        names.append(f.name)
                else:
                    c *= float(f)
            if c == 0.0:
                continue
            if len(names) == 2:  # a*b == b*a exactly: a canonical order helps reuse
                names.sort()
            if names:
                mons.append((c, names))
            else:
                const += c
        if not mons:
            return Sym(const)
        if name is None and const == 0.0 and len(mons) == 1:
            c, names = mons[0]
            if len(names) == 1:
                return Sym(c, names[0])
            out = self.let("*".join(names))
            self._products[out.name] = names
            return Sym(c, out.name)
        sign = 1.0
        if name is None:
            # factor out the most common coefficient when exact (no multiplication is
            # emitted for it: it is carried by the returned Sym), with the sign that
            # leaves the most positive terms
            mags = [abs(c) for c, _ in mons]
            f = max(set(mags), key=lambda v: (mags.count(v), v == 1.0, v))
            exact = all((c / f) * f == c for c, _ in mons) and (const / f) * f == const
            if exact and f != 1.0:
                sign, const = f, const / f
                mons = [(c / f, names) for c, names in mons]
            if sum(c < 0 for c, _ in mons) > len(mons) / 2:
                sign, const = -sign, -const
                mons = [(-c, names) for c, names in mons]
        if len(mons) == 2 and (mons[0][0] > 0) == (mons[1][0] > 0):
            mons.sort(key=lambda mn: mn[1])  # a + b == b + a exactly: canonical order
        mons.sort(key=lambda mn: mn[0] < 0)  # a positive term first: no unary minus
        parts = []
        for k, (c, names) in enumerate(mons):
            body = "*".join(names) if abs(c) == 1.0 else f"{abs(c)!r}*" + "*".join(names)
            if k == 0:
                parts.append(body if c > 0 else f"-{body}")
            else:
                parts.append((" + " if c > 0 else " - ") + body)
        if const != 0.0:
            parts.append((" + " if const > 0 else " - ") + repr(abs(const)))
        return Sym(sign, self.let("".join(parts), name).name)

    def div(self, a: Sym, b: Sym) -> Sym:
        """a / b."""
        if a.zero:
            return ZERO
        if b.name is None:
            return Sym(a.c / b.c, a.name)
        factors = self._products.get(a.name)
        if factors is not None and b.name in factors:  # (x*b)/b = x: cancel (more accurate)
            rest = list(factors)
            rest.remove(b.name)
            return self.lin([(a.c / b.c, *[var(f) for f in rest])])
        num = a.name if a.name is not None else "1.0"
        return Sym(a.c / b.c, self.let(f"{num}/{b.name}").name)

    def named(self, s: Sym, name: str) -> Sym:
        """Bind s to a given variable name (coefficient 1)."""
        self.lines.append(f"{name} = {s.expr()}")
        self.forget()
        return var(name)


# ----------------------------------------------------------------------------------------
# Structure: block lower-triangular form of the dependent block.


def _matching(rows_cols: dict[int, list[int]], cols: list[int]) -> dict[int, int] | None:
    """Perfect matching row -> column (augmenting paths); None if structurally singular."""
    match_col: dict[int, int] = {}

    def augment(r, seen):
        for c in rows_cols[r]:
            if c in seen:
                continue
            seen.add(c)
            if c not in match_col or augment(match_col[c], seen):
                match_col[c] = r
                return True
        return False

    for r in rows_cols:
        if not augment(r, set()):
            return None
    if len(match_col) != len(cols):
        return None
    return {r: c for c, r in match_col.items()}


def _tarjan(nodes: list[int], edges: dict[int, list[int]]) -> list[list[int]]:
    """Strongly connected components; each is emitted after those it has edges to."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def block_triangular(pattern: dict[tuple[int, int], Sym], m: int, dep: list[int]):
    """[(rows, cols)] diagonal blocks of Phi_q,d in solve order, or None if singular."""
    rows_cols = {r: [c for c in dep if (r, c) in pattern] for r in range(m)}
    match = _matching(rows_cols, dep)
    if match is None:
        return None
    row_of_col = {c: r for r, c in match.items()}
    edges = {r: [row_of_col[c] for c in rows_cols[r] if row_of_col[c] != r] for r in range(m)}
    blocks = []
    for comp in _tarjan(list(range(m)), edges):
        blocks.append((comp, [match[r] for r in comp]))
    return blocks


# ----------------------------------------------------------------------------------------
# Source assembly.


def tuple_expr(items) -> str:
    items = list(items)
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


IDENT = re.compile(r"\b[A-Za-z_][A-Za-z_0-9]*\b")


def _live(lines: list[str], tail: str) -> list[str]:
    """Drop top-level assignments whose variable is never read (dead code)."""
    keep = [True] * len(lines)
    needed = set(IDENT.findall(tail))
    for k in range(len(lines) - 1, -1, -1):
        ln = lines[k]
        top = not ln.startswith(" ") and " = " in ln and ln.split(" = ", 1)[0].isidentifier()
        if top and ln.split(" = ", 1)[0] not in needed:
            keep[k] = False
            continue
        needed |= set(IDENT.findall(ln.split(" = ", 1)[1] if top else ln))
    return [ln for ln, kp in zip(lines, keep) if kp]


class Source:
    """The generated module: functions added one by one."""

    def __init__(self):
        self.funcs: list[str] = []

    def add(self, header: str, doc: str, em: Emitter, ret: str, inputs, always: str = ""):
        """def header: unpack the used names of ``inputs`` [(names, argument)], body, return."""
        em.lines = _live(em.lines, ret + " " + always)
        used = set(IDENT.findall("\n".join(em.lines) + " " + ret + " " + always))
        pro = always
        for names, arg in inputs:
            if any(nm in used for nm in names):
                pro += f"    {', '.join(names)}, = {arg}\n"
        body = "".join(f"    {ln}\n" for ln in em.lines)
        self.funcs.append(f"def {header}:\n    \"\"\"{doc}\"\"\"\n{pro}{body}    return {ret}\n")

    def text(self) -> str:
        return "\n\n".join(self.funcs)
