"""Generated straight-line kernels for one mechanism's kinematics and dynamics.

Why: the constraint rows of a planar linkage are a handful of short polynomials of the
natural coordinates (|P_j - P_i|^2 - L^2, linear rigid-polygon and slider rows, and the
sin/cos rows of the angle coordinates). Evaluated through gathered numpy arrays, a
four-bar's Phi costs ~20 us, almost all of it interpreter and array-creation overhead.
So, once per :class:`~mbde_core.model.mechanism.Mechanism`, the constraint index arrays,
the mass matrix and the loads are turned into Python source with one assignment per
non-zero quantity (constants folded in, structural zeros dropped). The source is compiled
twice, with the same text:

- ``scalar`` backend: ``sin``/``cos`` are :mod:`math` functions and the inputs are
  Python floats (single states: a four-bar Phi costs ~1 us);
- ``vector`` backend: ``sin``/``cos`` are numpy ufuncs and the inputs are (N,) rows of a
  batch-last (n, N) array, so every statement is one vectorised operation over all
  particles (structure of arrays: contiguous rows, no gathers).

Generated functions (``q``/``qd``: sequences of n values; ``tr``: sines and cosines of
the relative angles from ``trig``; ``J``: the tuple returned by ``jac``)::

    trig(q) -> tr
    phi(q, tr) -> Phi of the kept constraint rows (m,)
    jac(q, tr) -> J: the variable entries of Phi_q and the dependent-block determinants
    phijac(q, tr) -> (phi, J) at the same q, sharing subexpressions (Newton iterations)
    jac_values(q, tr) -> every structural non-zero of Phi_q (pattern jac_rows, jac_cols)
    jdot(q, qd, tr) -> (Phi_q)' qd (m,)
    newton_step(J, tr, r) -> x_d with Phi_q,d x_d = -r      (dependent order)
    dsolve(J, tr, b) -> x_d with Phi_q,d x_d = b
    velocity(J, tr, zd) -> qd (n,) with Phi_q qd = 0, qd[z] = zd
    acceleration(J, tr, q, qd, zdd) -> qdd (n,), qdd[z] = zdd
    rmatrix(J, tr) -> R as n rows of g values
    forces(q, qd, tv) -> Q (n,): gravity + loads (tv: values of the loads' time functions)
    dynamics(J, tr, q, qd, Q, ez) -> (zdd, qdd, R, rdzd, Mbar, Qbar), R-matrix method
    dynamics_t(J, tr, q, qd, tv, ez) -> (zdd, qdd, R, rdzd), Q = forces inlined (constant
        gravity terms folded in: no operation for a zero force)
    post(J, tr, q, zd, tv, ez, full) -> (qd, zdd, qdd, R, rdzd): velocity qd = R zd and
        dynamics_t in one body, what an integrator needs after each position problem
        (qdd is computed only if ``full``: intermediate Runge-Kutta stages need zdd)

Solves with the dependent block Phi_q,d use its structural non-zero pattern, permuted
to block lower-triangular form (a perfect matching rows <-> dependent columns, then the
strongly connected components of the row graph in dependency order, Tarjan): the
four-bar's 4x4 block becomes the crank's 2x2 block then the coupler-rocker dyad's 2x2
block. 1x1 blocks divide, 2x2 blocks use Cramer's rule (forward stable for 2x2) with
the determinants computed once in ``jac``; larger blocks (e.g. a triad) call a dense
partially pivoted elimination (``SOLVE``). det Phi_q,d is the product of the diagonal
blocks' determinants, so the split adds no singularity, and since there is no pivoting
branch the same code runs on floats and on arrays. Results equal the generic numpy
evaluators (:mod:`mbde_core.model.constraints`, LAPACK) to rounding.

:func:`generate` returns None when the structure is not supported (e.g. no square
dependent block); callers then use the generic evaluators. The source is compiled and
run by :mod:`mbde_core.model.kernels` (:func:`~mbde_core.model.kernels.build`).
"""
from __future__ import annotations

import numpy as np

from mbde_core.model import codegen_ali3p
from mbde_core.model.codegen_model import BlockSolver, SymbolicModel
from mbde_core.model.symbolic import ZERO, Emitter, Source, Sym, block_triangular, tuple_expr, var

# ----------------------------------------------------------------------------------------
# Source generation.


def generate(mech):
    """(source text, metadata dict) of the kernels of ``mech``, or None if unsupported."""
    md = SymbolicModel(mech)
    n, m, g = md.n, md.m, md.g
    if m == 0 or g == 0 or len(md.dep) != m:
        return None
    Q_ = (["q%d" % i for i in range(n)], "q")
    V_ = (["v%d" % i for i in range(n)], "qd")
    T_ = ([nm for c in md.rel for nm in ("s%d" % c, "c%d" % c)], "tr")
    src = Source()
    tr_exprs = [e for c in md.rel for e in (f"sin(q[{c}])", f"cos(q[{c}])")]
    src.funcs.append(f"def trig(q):\n    \"\"\"sin, cos of the relative angles.\"\"\"\n    return {tuple_expr(tr_exprs)}\n")

    em = Emitter("t")
    ret = tuple_expr(s.expr() for s in md.rows(em, "phi"))
    src.add("phi(q, tr)", "Phi (m,).", em, ret, [Q_, T_])

    # Jacobian: structural pattern, block-triangular structure, 2x2 determinants
    em = Emitter("j")
    jpat: dict[tuple[int, int], Sym] = {}
    for r, ent in enumerate(md.rows(em, "jac")):
        for c, s in ent.items():
            if not s.zero:
                jpat[(r, c)] = s
    blocks = block_triangular(jpat, m, md.dep)
    if blocks is None:
        return None
    pattern = sorted(jpat)
    values = Emitter("j")
    values.lines = list(em.lines)
    src.add("jac_values(q, tr)", "All structural non-zeros of Phi_q (pattern order).", values,
            tuple_expr(jpat[k].expr() for k in pattern), [Q_, T_])
    dets = []
    for rows, cols in blocks:
        if len(rows) == 2:
            (r1, r2), (c1, c2) = rows, cols
            a11, a12 = jpat.get((r1, c1), ZERO), jpat.get((r1, c2), ZERO)
            a21, a22 = jpat.get((r2, c1), ZERO), jpat.get((r2, c2), ZERO)
            dets.append(em.lin([(1, a11, a22), (-1, a12, a21)]))
        else:
            dets.append(None)
    jnames = []
    for s in list(jpat.values()) + [d for d in dets if d is not None]:
        if s.name is not None and s.name not in jnames:
            jnames.append(s.name)
    src.add("jac(q, tr)", "Variable entries of Phi_q and the 2x2 block determinants.", em, tuple_expr(jnames), [Q_, T_])
    # phi and jac at the same q (Newton iterations), sharing their subexpressions
    both = Emitter("j")
    ph = md.rows(both, "phi")
    jrows_b = md.rows(both, "jac")
    entries_j = [jpat[k] for k in pattern] + [d for d in dets if d is not None]
    entries_b = [jrows_b[r][c] for r, c in pattern]
    for (rows, cols), d in zip(blocks, dets):
        if d is not None:
            (r1, r2), (c1, c2) = rows, cols
            a = [jrows_b[r].get(c, ZERO) for r, c in ((r1, c1), (r1, c2), (r2, c1), (r2, c2))]
            entries_b.append(both.lin([(1, a[0], a[3]), (-1, a[1], a[2])]))
    value = {}
    for sj, sb in zip(entries_j, entries_b):
        if sj.name is not None and sj.name not in value:
            value[sj.name] = Sym(sb.c / sj.c, sb.name).expr()
    src.add("phijac(q, tr)", "(phi(q, tr), jac(q, tr)) with shared subexpressions.", both,
            f"({tuple_expr(s.expr() for s in ph)}, {tuple_expr(value[nm] for nm in jnames)})", [Q_, T_])
    J_pro = f"    {', '.join(jnames)}, = J\n" if jnames else ""
    solver = BlockSolver(md, jpat, blocks, dets)

    em = Emitter("t")
    ret = tuple_expr(s.expr() for s in md.rows(em, "jdot"))
    src.add("jdot(q, qd, tr)", "(Phi_q)' qd (m,).", em, ret, [Q_, V_, T_])

    for name, arg, sign, doc in (("newton_step", "r", -1.0, "x_d with Phi_q,d x_d = -r."),
                                 ("dsolve", "b", 1.0, "x_d with Phi_q,d x_d = b.")):
        em = Emitter("t")
        x = solver.dep(em, [Sym(sign, f"{arg}{k}") for k in range(m)])
        src.add(f"{name}(J, tr, {arg})", doc, em, tuple_expr(x[c].expr() for c in md.dep),
                [T_, ([f"{arg}{k}" for k in range(m)], arg)], J_pro)

    def zcols(em, zv):
        """-sum_k Phi_q[r, z_k] zv[k] for every kept row r."""
        return [em.lin([(-1, jpat[(r, c)], zv[k]) for k, c in enumerate(md.iz) if (r, c) in jpat]) for r in range(m)]

    def full(x, zv):
        out = [ZERO] * n
        for k, c in enumerate(md.iz):
            out[c] = zv[k]
        for c in md.dep:
            out[c] = x[c]
        return out

    def r_columns(em):
        R = [[ZERO] * g for _ in range(n)]
        for k, c in enumerate(md.iz):
            R[c][k] = Sym(1.0)
            xk = solver.dep(em, [Sym(-jpat[(r, c)].c, jpat[(r, c)].name) if (r, c) in jpat else ZERO for r in range(m)])
            for cd in md.dep:
                R[cd][k] = xk[cd]
        return R

    ZD = [f"zd{k}" for k in range(g)]
    em = Emitter("t")
    zv = [var(nm) for nm in ZD]
    x = solver.dep(em, zcols(em, zv))
    src.add("velocity(J, tr, zd)", "qd (n,) from zd (g,).", em, tuple_expr(s.expr() for s in full(x, zv)), [T_, (ZD, "zd")], J_pro)

    ZDD = [f"zdd{k}" for k in range(g)]
    em = Emitter("t")
    zv = [var(nm) for nm in ZDD]
    jd = md.rows(em, "jdot")
    zc = zcols(em, zv)
    x = solver.dep(em, [em.lin([(-1, jd[r]), (1, zc[r])]) for r in range(m)])
    src.add("acceleration(J, tr, q, qd, zdd)", "qdd (n,) from zdd (g,).", em, tuple_expr(s.expr() for s in full(x, zv)),
            [Q_, V_, T_, (ZDD, "zdd")], J_pro)

    em = Emitter("t")
    R = r_columns(em)
    src.add("rmatrix(J, tr)", "R (n rows of g).", em, tuple_expr(tuple_expr(s.expr() for s in row) for row in R), [T_], J_pro)

    em = Emitter("t")
    Q, time_fns = md.forces(em)
    src.add("forces(q, qd, tv)", "Q (n,) = loads + gravity.", em, tuple_expr(s.expr() for s in Q),
            [Q_, V_, ([f"f{k}" for k in range(len(time_fns))], "tv")])

    # R-matrix forward dynamics
    M = np.asarray(mech.M, dtype=float)

    def dynamics_body(em, R, Q, optional_qdd=False):
        """Emit zdd, qdd, R'zd, Mbar, Qbar from R (n x g) and Q (n) at (q, qd)."""
        jd = md.rows(em, "jdot")
        rd = full(solver.dep(em, [Sym(-s.c, s.name) for s in jd]), [ZERO] * g)
        MR = [[em.lin([(M[i, j], R[j][k]) for j in range(n) if M[i, j] != 0.0]) for k in range(g)] for i in range(n)]
        Mbar = [[ZERO] * g for _ in range(g)]
        for k in range(g):
            for l in range(k, g):
                Mbar[k][l] = Mbar[l][k] = em.lin([(1, R[i][k], MR[i][l]) for i in range(n)])
        # Qbar = R^T (Q - M rdzd) = R^T Q - (M R)^T rdzd   (M is symmetric)
        Qbar = [em.lin([(1, R[i][k], Q[i]) for i in range(n)] + [(-1, MR[i][k], rd[i]) for i in range(n)]) for k in range(g)]
        zv = [em.named(s, f"zdd{k}") for k, s in enumerate(BlockSolver.small(em, Mbar, Qbar))]
        em.lines.append("if ez is not None:")
        em.lines += [f"    zdd{k} = zdd{k} + ez[{k}]" for k in range(g)]
        mark = len(em.lines)
        qdd = [em.lin([(1, R[i][k], zv[k]) for k in range(g)] + [(1, rd[i])]) for i in range(n)]
        if optional_qdd:  # computed only when asked for (``full``)
            em.lines[mark:] = ["if full:"] + ["    " + ln for ln in em.lines[mark:]] + [
                f"    QDD = {tuple_expr(s.expr() for s in qdd)}", "else:", "    QDD = None"]
            em.forget()
            qdd = None
        return zv, qdd, rd, Mbar, Qbar

    def vec(xs):
        return tuple_expr(s.expr() for s in xs)

    def mat(rows):
        return tuple_expr(tuple_expr(s.expr() for s in row) for row in rows)

    TV_ = ([f"f{k}" for k in range(len(time_fns))], "tv")
    em = Emitter("t")
    R = r_columns(em)
    zv, qdd, rd, Mbar, Qbar = dynamics_body(em, R, [var(f"Q{i}") for i in range(n)])
    src.add("dynamics(J, tr, q, qd, Q, ez)", "(zdd, qdd, R, rdzd, Mbar, Qbar) by the R-matrix method; ez: extra zdd or None.",
            em, "(" + ", ".join([vec(zv), vec(qdd), mat(R), vec(rd), mat(Mbar), vec(Qbar)]) + ")",
            [Q_, V_, T_, ([f"Q{i}" for i in range(n)], "Q")], J_pro)

    em = Emitter("t")
    R = r_columns(em)
    zv, qdd, rd, _, _ = dynamics_body(em, R, md.forces(em)[0])
    src.add("dynamics_t(J, tr, q, qd, tv, ez)", "(zdd, qdd, R, rdzd) with Q = forces(q, qd, tv) computed inline.",
            em, "(" + ", ".join([vec(zv), vec(qdd), mat(R), vec(rd)]) + ")", [Q_, V_, T_, TV_], J_pro)

    # after a position problem: velocities qd = R zd, then the dynamics, in one body
    em = Emitter("t")
    R = r_columns(em)
    zd = [var(nm) for nm in ZD]
    md.vel = [em.lin([(1, R[i][k], zd[k]) for k in range(g)]) for i in range(n)]
    zv, _, rd, _, _ = dynamics_body(em, R, md.forces(em)[0], optional_qdd=True)
    qd = md.vel
    md.vel = None
    src.add("post(J, tr, q, zd, tv, ez, full)",
            "(qd, zdd, qdd, R, rdzd) at an assembled q: qd = R zd, then dynamics_t (qdd None unless full).",
            em, "(" + ", ".join([vec(qd), vec(zv), "QDD", mat(R), vec(rd)]) + ")", [Q_, T_, TV_, (ZD, "zd")], J_pro)
    codegen_ali3p.emit(src, md, jpat, pattern, m)
    return src.text(), {"pattern": pattern, "blocks": blocks, "time_fns": time_fns}
