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
from mbde_core.model.symbolic import ZERO, Emitter, Source, Sym, block_triangular, tuple_expr, var

# ----------------------------------------------------------------------------------------
# Emission of the mechanism's quantities.


class _Model:
    """Symbolic description of one mechanism, read from a Mechanism under construction."""

    def __init__(self, mech):
        self.mech = mech
        self.n = mech.n
        cs = mech.constraints
        self.cs = cs
        self.keep = [int(r) for r in mech.keep_rows]
        self.m = len(self.keep)
        self.iz = [int(i) for i in mech.independent]
        self.dep = [int(i) for i in mech.dependent]
        self.g = len(self.iz)
        self.rel = [int(c) for c in mech.rel_columns]
        self.xy = np.asarray(mech.fixed_xy, dtype=float)
        self.vel: list[Sym] | None = None  # velocities computed in the body (see ``post``)

    # -- coordinates of points ------------------------------------------------------------
    def X(self, p) -> Sym:
        c = int(self.mech.px[p])
        return var(f"q{c}") if c < self.n else Sym(self.xy[p, 0])

    def Y(self, p) -> Sym:
        c = int(self.mech.py[p])
        return var(f"q{c}") if c < self.n else Sym(self.xy[p, 1])

    def V(self, c: int) -> Sym:
        """Velocity of coordinate c: the argument qd, or a value computed in the body."""
        return self.vel[c] if self.vel is not None else var(f"v{c}")

    def VX(self, p) -> Sym:
        c = int(self.mech.px[p])
        return self.V(c) if c < self.n else ZERO

    def VY(self, p) -> Sym:
        c = int(self.mech.py[p])
        return self.V(c) if c < self.n else ZERO

    def kind(self, row):
        """('d', k) distance k, ('l', k) linear row k, ('a', k) angle k of a constraint row."""
        cs = self.cs
        nd, nl = cs.rows_d.size, cs.rows_lin.size
        if row < nd:
            return "d", row
        if row < nd + nl:
            return "l", row - nd
        return "a", row - nd - nl

    # -- Phi, Phi_q, (Phi_q)' qd --------------------------------------------------------------
    def rows(self, em: Emitter, want: str):
        """Per kept row: Phi (want='phi'), Jacobian entries {col: Sym} ('jac') or jdot ('jdot')."""
        cs = self.cs
        out = []
        for row in self.keep:
            kind, k = self.kind(row)
            if kind == "d":
                i, j = int(cs.d_i[k]), int(cs.d_j[k])
                if want == "jdot":
                    wx = em.lin([(1, self.VX(j)), (-1, self.VX(i))])
                    wy = em.lin([(1, self.VY(j)), (-1, self.VY(i))])
                    out.append(em.lin([(2.0, wx, wx), (2.0, wy, wy)]))
                    continue
                dx = em.lin([(1, self.X(j)), (-1, self.X(i))])
                dy = em.lin([(1, self.Y(j)), (-1, self.Y(i))])
                if want == "phi":
                    out.append(em.lin([(1, dx, dx), (1, dy, dy), (-float(cs.d_L2[k]),)]))
                else:
                    ent = {}
                    for p, sgn in ((j, 2.0), (i, -2.0)):
                        for col, d in ((int(self.mech.px[p]), dx), (int(self.mech.py[p]), dy)):
                            if col < self.n:
                                ent[col] = Sym(sgn * d.c, d.name)
                    out.append(ent)
            elif kind == "l":
                A = cs._A_lin[k, : self.n]
                if want == "phi":
                    terms = [(float(A[c]), var(f"q{c}")) for c in range(self.n) if A[c] != 0.0]
                    out.append(em.lin(terms + [(float(cs._c_lin[k]),)]))
                elif want == "jac":
                    out.append({c: Sym(float(A[c])) for c in range(self.n) if A[c] != 0.0})
                else:
                    out.append(ZERO)
            else:
                a, b, c = int(cs.a_a[k]), int(cs.a_b[k]), int(cs.a_c[k])
                s, co = var(f"s{c}"), var(f"c{c}")
                vx = em.lin([(1, self.X(b)), (-1, self.X(a))])
                vy = em.lin([(1, self.Y(b)), (-1, self.Y(a))])
                if want == "phi":
                    out.append(em.lin([(1, s, vx), (-1, co, vy)]))
                elif want == "jac":
                    ent = {}
                    for p, sgn in ((b, 1.0), (a, -1.0)):
                        cx, cy = int(self.mech.px[p]), int(self.mech.py[p])
                        if cx < self.n:
                            ent[cx] = Sym(sgn, s.name)
                        if cy < self.n:
                            ent[cy] = Sym(-sgn, co.name)
                    ent[c] = em.lin([(1, co, vx), (1, s, vy)])
                    out.append(ent)
                else:
                    thd = self.V(c)
                    wx = em.lin([(1, self.VX(b)), (-1, self.VX(a))])
                    wy = em.lin([(1, self.VY(b)), (-1, self.VY(a))])
                    u1 = em.lin([(-1, s, vx), (1, co, vy)])
                    u2 = em.lin([(1, co, wx), (1, s, wy)])
                    out.append(em.lin([(1, thd, thd, u1), (2.0, thd, u2)]))
        return out

    # -- generalized forces -----------------------------------------------------------------------
    def forces(self, em: Emitter):
        """Q (n,) Syms and the loads' time functions (values f<k> in the ``tv`` argument).

        Unlike the other quantities, this mirrors :meth:`LoadSet.forces` operation for
        operation (loads accumulated in order from zero, each torque as the couple
        -T d_y / L^2, T d_x / L^2, then gravity added), so Q is the same to the last bit.
        """
        mech = self.mech
        acc = [[] for _ in range(self.n + 1)]  # per column: [(sign, expression)] in order
        tf = []  # time functions, in the order of the tv argument
        basis = mech.loads.basis

        def tvar(fn):
            tf.append(fn)
            return f"f{len(tf) - 1}"

        def coord(sym: Sym) -> str:
            if sym.name is None:
                return repr(sym.c)
            return sym.name if sym.c == 1.0 else f"({sym.expr()})"

        def diff(a: Sym, b: Sym) -> str:
            return em.let(f"{coord(a)} - {coord(b)}").name

        def add_torque(body, T: str):
            i, j, L2 = basis[body]
            dx, dy = diff(self.X(j), self.X(i)), diff(self.Y(j), self.Y(i))
            fx = em.let(f"-{T}*{dy}/{L2!r}").name
            fy = em.let(f"{T}*{dx}/{L2!r}").name
            for col, sign, f in ((mech.px[j], 1, fx), (mech.py[j], 1, fy), (mech.px[i], -1, fx), (mech.py[i], -1, fy)):
                acc[int(col)].append((sign, f))

        def omega(body):
            i, j, L2 = basis[body]
            dx, dy = diff(self.X(j), self.X(i)), diff(self.Y(j), self.Y(i))
            ddx, ddy = diff(self.VX(j), self.VX(i)), diff(self.VY(j), self.VY(i))
            return em.let(f"({dx}*{ddy} - {dy}*{ddx})/{L2!r}").name

        for ld in mech.spec.loads:
            if ld.kind == "force":
                acc[int(mech.px[ld.point])].append((1, tvar(ld.value[0])))
                acc[int(mech.py[ld.point])].append((1, tvar(ld.value[1])))
            elif ld.kind == "generalized_force":
                acc[int(ld.coordinate)].append((1, tvar(ld.value[0])))
            elif ld.kind == "torque":
                add_torque(ld.body, tvar(ld.value[0]))
            elif ld.kind in ("joint_damping", "joint_friction"):
                w2 = omega(ld.body2) if ld.body2 >= 0 else "0.0"
                if ld.kind == "joint_damping":
                    T = em.let(f"{-ld.c!r}*({omega(ld.body)} - {w2})").name
                else:  # regularised Coulomb: -c w / sqrt(w^2 + eps^2)
                    w = em.let(f"{omega(ld.body)} - {w2}").name
                    T = em.let(f"{-ld.c!r}*{w}/sqrt({w}*{w} + {ld.scale * ld.scale!r})").name
                add_torque(ld.body, T)
                if ld.body2 >= 0:
                    add_torque(ld.body2, em.let(f"-{T}").name)
            elif ld.kind == "point_damping":
                p = ld.point
                for col, v in ((mech.px[p], self.VX(p)), (mech.py[p], self.VY(p))):
                    acc[int(col)].append((-1, em.let(f"{ld.c!r}*{coord(v)}").name))
            elif ld.kind == "point_friction":
                p = ld.point
                vx, vy = coord(self.VX(p)), coord(self.VY(p))
                sc = em.let(f"{-ld.c!r}/sqrt({vx}*{vx} + {vy}*{vy} + {ld.scale * ld.scale!r})").name
                for col, v in ((mech.px[p], vx), (mech.py[p], vy)):
                    acc[int(col)].append((1, em.let(f"{sc}*{v}").name))
            else:  # pragma: no cover - the loader validates kinds
                raise ValueError(ld.kind)
        Q = []
        for i in range(self.n):
            g = repr(float(mech.Q_gravity[i]))
            if not acc[i]:
                Q.append(Sym(float(mech.Q_gravity[i])))
                continue
            text = "".join((" + " if sg > 0 else " - ") + e for sg, e in acc[i]).lstrip()
            text = text[2:] if text.startswith("+ ") else "-" + text[2:]
            Q.append(em.let(f"{g} + ({text})"))
        return Q, tf


def _dense_expr(rows) -> str:
    return "(" + ", ".join("(" + ", ".join(s.expr() for s in row) + ",)" for row in rows) + ",)"


class _Solver:
    """Emits solves with Phi_q,d (block triangular) and small dense g x g systems."""

    def __init__(self, model: _Model, jpat: dict[tuple[int, int], Sym], blocks, dets):
        self.md = model
        self.jpat = jpat
        self.blocks = blocks
        self.dets = dets  # per block: Sym determinant (2x2 blocks) or None

    def dep(self, em: Emitter, rhs: list[Sym]) -> dict[int, Sym]:
        """x over dependent columns with Phi_q,d x = rhs (rhs per kept row)."""
        J = self.jpat
        x: dict[int, Sym] = {}
        for (rows, cols), det in zip(self.blocks, self.dets):
            b = []
            for r in rows:
                terms = [(1, rhs[r])] + [(-1, J[(r, c)], xc) for c, xc in x.items() if (r, c) in J]
                b.append(em.lin(terms))
            if len(rows) == 1:
                x[cols[0]] = em.div(b[0], J[(rows[0], cols[0])])
            elif len(rows) == 2:
                (r1, r2), (c1, c2) = rows, cols
                a11, a12 = J.get((r1, c1), ZERO), J.get((r1, c2), ZERO)
                a21, a22 = J.get((r2, c1), ZERO), J.get((r2, c2), ZERO)
                x[c1] = em.div(em.lin([(1, a22, b[0]), (-1, a12, b[1])]), det)
                x[c2] = em.div(em.lin([(1, a11, b[1]), (-1, a21, b[0])]), det)
            else:
                A = [[J.get((r, c), ZERO) for c in cols] for r in rows]
                names = [em.fresh() for _ in cols]
                em.lines.append(f"{', '.join(names)}, = SOLVE({_dense_expr(A)}, ({', '.join(s.expr() for s in b)},))")
                for c, nm in zip(cols, names):
                    x[c] = var(nm)
        return x

    @staticmethod
    def small(em: Emitter, A: list[list[Sym]], b: list[Sym]) -> list[Sym]:
        """Solve a small dense system A x = b (the g x g reduced mass matrix)."""
        k = len(b)
        if k == 1:
            return [em.div(b[0], A[0][0])]
        if k == 2:
            det = em.lin([(1, A[0][0], A[1][1]), (-1, A[0][1], A[1][0])])
            return [
                em.div(em.lin([(1, A[1][1], b[0]), (-1, A[0][1], b[1])]), det),
                em.div(em.lin([(1, A[0][0], b[1]), (-1, A[1][0], b[0])]), det),
            ]
        names = [em.fresh() for _ in range(k)]
        em.lines.append(f"{', '.join(names)}, = SOLVE({_dense_expr(A)}, ({', '.join(s.expr() for s in b)},))")
        return [var(nm) for nm in names]


# ----------------------------------------------------------------------------------------
# Source generation.


def generate(mech):
    """(source text, metadata dict) of the kernels of ``mech``, or None if unsupported."""
    md = _Model(mech)
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
    solver = _Solver(md, jpat, blocks, dets)

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
        zv = [em.named(s, f"zdd{k}") for k, s in enumerate(_Solver.small(em, Mbar, Qbar))]
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
