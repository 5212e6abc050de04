"""The symbolic pieces of a mechanism's generated kernels (:mod:`mbde_core.model.codegen`).

:class:`SymbolicModel` reads a Mechanism under construction as symbols: its kept
constraint rows, the structural non-zeros of Phi_q, (Phi_q)' qd and the generalized
forces (gravity and loads), emitted statement by statement through an
:class:`~mbde_core.model.symbolic.Emitter`. :class:`BlockSolver` emits the solves with
the dependent block Phi_q,d permuted to block lower-triangular form (1x1 blocks divide,
2x2 blocks by Cramer's rule with the determinants from ``jac``, larger ones call the
dense ``SOLVE``) and the small dense g x g solves of the reduced mass matrix.
"""
from __future__ import annotations

import numpy as np

from mbde_core.model.symbolic import ZERO, Emitter, Sym, var



class SymbolicModel:
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


def dense_expr(rows) -> str:
    return "(" + ", ".join("(" + ", ".join(s.expr() for s in row) + ",)" for row in rows) + ",)"


class BlockSolver:
    """Emits solves with Phi_q,d (block triangular) and small dense g x g systems."""

    def __init__(self, model: SymbolicModel, jpat: dict[tuple[int, int], Sym], blocks, dets):
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
                em.lines.append(f"{', '.join(names)}, = SOLVE({dense_expr(A)}, ({', '.join(s.expr() for s in b)},))")
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
        em.lines.append(f"{', '.join(names)}, = SOLVE({dense_expr(A)}, ({', '.join(s.expr() for s in b)},))")
        return [var(nm) for nm in names]
