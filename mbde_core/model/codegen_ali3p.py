"""Generated kernels of the ALI3-P step (:mod:`mbde_core.engine.ali3p`) for one mechanism.

The ALI3-P step of a single state spends its time on small dense linear algebra with the
penalised tangent matrix A = M + c Phi_q^T Phi_q (c = alpha h^2 / 4; the matrix of the
Newton iterations and of the projections when the forces do not depend on q and qd):
forming Phi_q^T Phi_q, a factorisation and a few solves, n <= ~10. Through numpy each of
these is a call with ~1-5 us of fixed cost. Here they are emitted as straight-line code
next to the mechanism's other kernels (:mod:`mbde_core.model.codegen`): M's entries are
constants folded in, the structural zeros of M and Phi_q are dropped, and A is
factorised as A = L D L^T (symmetric positive definite: M is positive semi-definite and
Phi_q^T Phi_q adds the missing directions, so no pivoting is needed; Golub & Van Loan,
Matrix Computations, 4th ed., alg. 4.1.2). The results equal the LAPACK LU solves of the
textbook step to rounding (cond(A) ~ 1e3 for the default penalty).

Generated functions (``J``: the values of ``jac_values``, i.e. every structural
non-zero of Phi_q in pattern order; sequences of n or m floats)::

    pen_state(q) -> (Phi (m,), J, tr): constraints, Jacobian values and the sines and
        cosines of the relative angles at q, in one body (an iterate of the step)
    pen_newton(J, ph, lam, q, qddh, Q, a, c, hh, k2) -> x (n,) with
        A x = hh (M qdd + Phi_q^T (a ph + lam) - Q), qdd = k2 q + qddh
        (the Newton update of the augmented Lagrangian equations is -x)
    pen_factor(J, c) -> F: the factors of A (entries of L and 1/D)
    pen_msolve(F, x, r) -> y (n,) with A y = M x - r   (the projections)
    pen_jt(J, y, c) -> c Phi_q^T y (n,)
"""
from __future__ import annotations

import numpy as np

from mbde_core.model.symbolic import ZERO, Emitter, Sym, tuple_expr, var

FUNCS = ("pen_state", "pen_newton", "pen_factor", "pen_msolve", "pen_jt")


def _jac_syms(jpat, pattern):
    """Phi_q as {(row, col): Sym}: constants of the pattern folded in, the others J<k>."""
    return {rc: (jpat[rc] if jpat[rc].name is None else var(f"J{k}")) for k, rc in enumerate(pattern)}


def _columns(Js, m, n):
    """Per column, the [(row, Sym)] of its structural non-zeros."""
    cols = [[] for _ in range(n)]
    for (r, c), s in Js.items():
        cols[c].append((r, s))
    return cols


def _penalised(em: Emitter, M, cols, cvar: Sym, n):
    """Lower triangle of A = M + c J^T J as {(i, j): Sym}, i >= j."""
    A = {}
    for i in range(n):
        rows_i = dict(cols[i])
        for j in range(i + 1):
            terms = [(float(M[i, j]),)] if M[i, j] != 0.0 else []
            terms += [(1, cvar, s, rows_i[r]) for r, s in cols[j] if r in rows_i]
            A[(i, j)] = em.lin(terms)
    return A


def _ldlt(em: Emitter, A, n):
    """L (strictly lower, {(i, j): Sym}) and 1/D ([Sym]) with A = L D L^T."""
    L, dinv, LD = {}, [], {}
    for j in range(n):
        d = em.lin([(1, A[(j, j)])] + [(-1, L[(j, k)], LD[(j, k)]) for k in range(j) if not L[(j, k)].zero])
        if d.zero:  # structurally singular (a coordinate without mass nor constraint)
            raise ValueError("singular penalised matrix")
        dinv.append(em.div(Sym(1.0), d))
        for i in range(j + 1, n):
            num = em.lin([(1, A[(i, j)])] + [(-1, L[(i, k)], LD[(j, k)]) for k in range(j) if not L[(i, k)].zero
                                             and not LD[(j, k)].zero])
            L[(i, j)] = em.lin([(1, num, dinv[j])]) if not num.zero else ZERO
            LD[(i, j)] = num  # = L[i, j] D[j]
    return L, dinv


def _substitute(em: Emitter, L, dinv, b, n):
    """x with L D L^T x = b."""
    y = []
    for i in range(n):
        y.append(em.lin([(1, b[i])] + [(-1, L[(i, k)], y[k]) for k in range(i) if not L[(i, k)].zero]))
    z = [em.lin([(1, y[i], dinv[i])]) for i in range(n)]
    x = [ZERO] * n
    for i in range(n - 1, -1, -1):
        x[i] = em.lin([(1, z[i])] + [(-1, L[(k, i)], x[k]) for k in range(i + 1, n) if not L[(k, i)].zero])
    return x


def _mx(em: Emitter, M, x, n):
    return [em.lin([(float(M[i, j]), x[j]) for j in range(n) if M[i, j] != 0.0]) for i in range(n)]


def emit(src, md, jpat, pattern, m) -> bool:
    """Add the functions of the module docstring to ``src`` (a codegen Source); False
    (nothing added) if A is structurally singular."""
    try:
        _emit(src, md, jpat, pattern, m)
    except ValueError:
        return False
    return True


def _emit(src, md, jpat, pattern, m):
    mech = md.mech
    n = mech.n
    M = np.asarray(mech.M, dtype=float)
    Js = _jac_syms(jpat, pattern)
    cols = _columns(Js, m, n)
    J_ = ([f"J{k}" for k in range(len(pattern))], "J")
    X_ = ([f"x{i}" for i in range(n)], "x")
    R_ = ([f"r{i}" for i in range(n)], "r")
    c = var("c")

    em = Emitter("t")
    em.lines = [f"{nm}{c} = {fn}(q{c})" for c in md.rel for nm, fn in (("s", "sin"), ("c", "cos"))]
    ph = md.rows(em, "phi")
    jrows = md.rows(em, "jac")
    tr = [var(f"{nm}{c}") for c in md.rel for nm in ("s", "c")]
    src.add("pen_state(q)", "(Phi, jac_values, trig) at q.", em,
            f"({tuple_expr(s.expr() for s in ph)}, {tuple_expr(jrows[r][c].expr() for r, c in pattern)}, "
            f"{tuple_expr(s.expr() for s in tr)})", [([f"q{i}" for i in range(n)], "q")])

    em = Emitter("t")
    a, hh, k2 = var("a"), var("hh"), var("k2")
    y = [em.lin([(1, a, var(f"p{r}")), (1, var(f"l{r}"))]) for r in range(m)]
    u = [em.lin([(1, k2, var(f"q{j}")), (1, var(f"w{j}"))]) if M[j].any() else ZERO for j in range(n)]
    f = []
    for i in range(n):
        terms = [(float(M[i, j]), u[j]) for j in range(n) if M[i, j] != 0.0]
        terms += [(1, s, y[r]) for r, s in cols[i]]
        terms += [(-1, var(f"Q{i}"))]
        f.append(em.lin([(1, hh, em.lin(terms))]))
    L, dinv = _ldlt(em, _penalised(em, M, cols, c, n), n)
    x = _substitute(em, L, dinv, f, n)
    src.add("pen_newton(J, ph, lam, q, qddh, Q, a, c, hh, k2)",
            "x with (M + c J^T J) x = hh (M qdd + J^T (a ph + lam) - Q), qdd = k2 q + qddh.",
            em, tuple_expr(s.expr() for s in x),
            [J_, ([f"p{r}" for r in range(m)], "ph"), ([f"l{r}" for r in range(m)], "lam"),
             ([f"q{i}" for i in range(n)], "q"), ([f"w{i}" for i in range(n)], "qddh"), ([f"Q{i}" for i in range(n)], "Q")])

    em = Emitter("t")
    L, dinv = _ldlt(em, _penalised(em, M, cols, c, n), n)
    fac = [L[(i, j)] for i in range(n) for j in range(i) if not L[(i, j)].zero] + dinv
    fnames = [f"F{k}" for k in range(len(fac))]
    src.add("pen_factor(J, c)", "Factors of M + c J^T J (L entries, then 1/D).", em, tuple_expr(s.expr() for s in fac), [J_])

    em = Emitter("t")
    k = 0
    Lf, df = {}, []
    for i in range(n):
        for j in range(i):
            if not L[(i, j)].zero:
                Lf[(i, j)] = var(fnames[k])
                k += 1
            else:
                Lf[(i, j)] = ZERO
    df = [var(fnames[k + i]) for i in range(n)]
    b = [em.lin([(1, s), (-1, var(f"r{i}"))]) for i, s in enumerate(_mx(em, M, [var(f"x{j}") for j in range(n)], n))]
    x = _substitute(em, Lf, df, b, n)
    src.add("pen_msolve(F, x, r)", "y with (M + c J^T J) y = M x - r (F from pen_factor).", em,
            tuple_expr(s.expr() for s in x), [(fnames, "F"), X_, R_])

    em = Emitter("t")
    out = [em.lin([(1, c, s, var(f"y{r}")) for r, s in cols[i]]) for i in range(n)]
    src.add("pen_jt(J, y, c)", "c J^T y (n,).", em, tuple_expr(s.expr() for s in out),
            [J_, ([f"y{r}" for r in range(m)], "y")])
