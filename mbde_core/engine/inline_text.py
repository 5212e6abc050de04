"""Inlining of straight-line generated functions into one flat function, at the text level.

The SIMD module (:mod:`mbde_core.engine.simd_source`) needs the whole RK4 step of a
particle in the body of one loop, so that LLVM can vectorise the loop: a call left in
it cannot be vectorised, and numba does not inline across its compiled functions (each is
its own LLVM library; numba's own ``inline='always'`` does it on numba's IR, but costs ~50 s
of compilation for the four-bar's step against ~4 s for the same code written flat).
So the text is flattened before numba sees it: :meth:`Library.flatten` returns a function
whose calls to the library's functions are replaced by their bodies, with every local
name given a prefix unique to the call site.

Library functions must be straight-line: assignments, a docstring, ``if X is not None:``
blocks whose X is an argument the call site passes as ``None`` or not (resolved here, the
block kept or dropped), and one final ``return``. Arguments that are names or constants
are substituted; other argument expressions are bound to a fresh name first. The
functions are pure (no side effects), so the order in which the inlined statements run
changes nothing: each floating-point operation is the same, with the same operands.
"""
from __future__ import annotations

import ast
import copy


class Library:
    """Top-level functions of some source texts, by name, to inline into others."""

    def __init__(self, *sources: str):
        self.funcs: dict[str, ast.FunctionDef] = {}
        for src in sources:
            for node in ast.parse(src).body:
                if isinstance(node, ast.FunctionDef):
                    self.funcs[node.name] = node
        self._k = 0

    def flatten(self, source: str, decorator: str = "") -> str:
        """The text of the function defined in ``source`` with every call to a library
        function inlined (recursively), preceded by ``decorator`` (a line, or nothing)."""
        fd = ast.parse(source).body[0]
        body: list[ast.stmt] = []
        self._block(fd.body, body, {}, None)
        fd.body = body
        fd.decorator_list = []
        text = ast.unparse(ast.fix_missing_locations(fd))
        return (decorator + "\n" if decorator else "") + text + "\n"

    # -- statements -------------------------------------------------------------------
    def _block(self, stmts, out, env, prefix):
        """Statements of a body into ``out``; env: name -> node (the bindings of a callee's
        names, None at the top level: names are kept). Returns the return value's node."""
        for st in stmts:
            if isinstance(st, ast.Expr) and isinstance(st.value, ast.Constant):
                continue  # docstring
            if isinstance(st, ast.Return):
                val = self._expr(st.value, out, env, prefix)
                if prefix is None:
                    out.append(ast.Return(val))
                    continue
                return val
            if isinstance(st, ast.Assign):
                val = self._expr(st.value, out, env, prefix)
                targets = [self._target(t, env, prefix) for t in st.targets]
                out.append(ast.Assign(targets=targets, value=val))
                continue
            if isinstance(st, ast.If) and prefix is not None:
                known = self._static(st.test, env)
                if known is None:
                    raise ValueError(f"cannot inline a run-time branch: {ast.unparse(st.test)}")
                ret = self._block(st.body if known else st.orelse, out, env, prefix)
                if ret is not None:
                    raise ValueError("return inside an inlined branch")
                continue
            if prefix is not None:
                raise ValueError(f"cannot inline statement: {ast.unparse(st)}")
            # top level: keep the statement, inline inside its parts
            st = copy.deepcopy(st)
            if isinstance(st, (ast.For, ast.While, ast.If)):
                if isinstance(st, ast.For):
                    st.iter = self._expr(st.iter, out, env, prefix)
                elif isinstance(st, ast.If):
                    st.test = self._expr(st.test, out, env, prefix)
                inner: list[ast.stmt] = []
                self._block(st.body, inner, env, prefix)
                st.body = inner or [ast.Pass()]
                orelse: list[ast.stmt] = []
                self._block(st.orelse, orelse, env, prefix)
                st.orelse = orelse
                out.append(st)
            elif isinstance(st, ast.AugAssign):
                st.value = self._expr(st.value, out, env, prefix)
                out.append(st)
            else:
                out.append(self._expr_stmt(st, out, env, prefix))
        return None

    def _expr_stmt(self, st, out, env, prefix):
        if isinstance(st, ast.Expr):
            return ast.Expr(self._expr(st.value, out, env, prefix))
        return st

    @staticmethod
    def _static(test, env):
        """True/False for ``X is not None`` / ``X is None`` on a bound argument, else None."""
        if (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.IsNot, ast.Is))
                and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant)
                and test.comparators[0].value is None and test.left.id in env):
            b = env[test.left.id]
            none = isinstance(b, ast.Constant) and b.value is None
            return (not none) if isinstance(test.ops[0], ast.IsNot) else none
        return None

    def _target(self, t, env, prefix):
        if prefix is None:
            return t
        if isinstance(t, ast.Name):
            new = f"{prefix}{t.id}"
            env[t.id] = ast.Name(new, ast.Load())
            return ast.Name(new, ast.Store())
        if isinstance(t, ast.Tuple):
            return ast.Tuple([self._target(e, env, prefix) for e in t.elts], ast.Store())
        raise ValueError(f"cannot inline assignment to {ast.unparse(t)}")

    # -- expressions ------------------------------------------------------------------
    def _expr(self, node, out, env, prefix):
        lib = self

        class T(ast.NodeTransformer):
            def visit_Name(self, nd):
                if isinstance(nd.ctx, ast.Load) and nd.id in env:
                    return copy.deepcopy(env[nd.id])
                return nd

            def visit_Call(self, nd):
                self.generic_visit(nd)
                if isinstance(nd.func, ast.Name) and nd.func.id in lib.funcs:
                    return lib._call(nd.func.id, nd.args, out)
                return nd

        return T().visit(copy.deepcopy(node))

    def _call(self, name, args, out):
        fd = self.funcs[name]
        self._k += 1
        prefix = f"_{name}{self._k}_"
        params = [a.arg for a in fd.args.args]
        if len(params) != len(args):
            raise ValueError(f"{name}: {len(args)} arguments for {len(params)} parameters")
        env = {}
        for p, a in zip(params, args):
            if isinstance(a, (ast.Name, ast.Constant)):
                env[p] = a
            else:
                new = f"{prefix}{p}"
                out.append(ast.Assign(targets=[ast.Name(new, ast.Store())], value=a))
                env[p] = ast.Name(new, ast.Load())
        ret = self._block(fd.body, out, env, prefix)
        if ret is None:
            raise ValueError(f"{name}: no return")
        if isinstance(ret, (ast.Name, ast.Constant)):
            return ret
        res = f"{prefix}ret"
        out.append(ast.Assign(targets=[ast.Name(res, ast.Store())], value=ret))
        return ast.Name(res, ast.Load())
