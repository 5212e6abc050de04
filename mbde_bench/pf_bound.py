"""The bare arithmetic bound of a particle-step: the floating-point operations of the
vectorised RK4 step of one particle against the machine's measured flop rate.

``flops``: the additions, subtractions, multiplications, divisions and square roots in the
body of the loop over particles of the mechanism's SIMD module
(:mod:`mbde_core.engine.simd_source`: one RK4 step, its four position problems with their
two masked Newton iterations each, the dynamics, sincos as its polynomial), counted in its
generated text -- index arithmetic (subscripts), comparisons, selects and bit operations
excluded. Everything else in the filter's step (proposal, weights, resampling, moments) is
left out: the bound is what the propagation alone must compute.

``rate``: the double-precision flop rate of one core, measured by a compiled loop of
independent fused multiply-adds over a vector that fits in L1 (``contract``: FMA, 2 flops
each), vectorised by LLVM as the SIMD module is; the best of a few repeats of process CPU
time. It is a practical peak for this code's kind of arithmetic, not the vendor's.

bound = flops / rate (seconds per particle-step on one core); a measured whole step's CPU
time per particle-step over it is the ratio the bench reports.
"""
from __future__ import annotations

import ast
import time

import numpy as np

from mbde_core.engine import fastpath
from mbde_core.engine.numba_cache import numba
from mbde_core.engine.simd_source import module_source

_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div)
_CALLS = ("sqrt",)
_RATE = None


def _count(node, in_index=False) -> int:
    n = 0
    if isinstance(node, ast.Subscript):
        return _count(node.value, in_index)  # the slice is index arithmetic
    if not in_index:
        if isinstance(node, ast.BinOp) and isinstance(node.op, _OPS):
            n += 1
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            n += name in _CALLS
    return n + sum(_count(c, in_index) for c in ast.iter_child_nodes(node))


def flops_per_step(mech) -> int | None:
    """Floating-point operations of one particle's RK4 step in the SIMD module's loop body
    (module docstring), or None when the mechanism has no SIMD module."""
    K = fastpath.kernels(mech)
    if K is None:
        return None
    try:
        text = module_source(mech, K)[0]
    except ValueError:
        return None
    for node in ast.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == "lanes":
            return _count(node)
    return None


def _kernel():
    nb = numba()
    if nb is None:
        return None

    @nb.njit(fastmath={"contract"}, cache=False)
    def fma_loop(x, a, b, reps):
        for _ in range(reps):
            for i in range(x.size):
                v = x[i]
                for _k in range(16):
                    v = v * a + b
                x[i] = v
        return x[0]

    return fma_loop


def flop_rate(repeats: int = 5) -> float | None:
    """Measured double-precision flops per CPU second of one core (module docstring), or
    None without numba."""
    global _RATE
    if _RATE is not None:
        return _RATE
    k = _kernel()
    if k is None:
        return None
    x = np.full(2048, 0.5)
    k(x, 0.999, 0.0005, 1)  # compile
    reps = 2000
    best = float("inf")
    for _ in range(repeats):
        c0 = time.process_time()
        k(x, 0.999, 0.0005, reps)
        best = min(best, time.process_time() - c0)
    _RATE = 2.0 * 16 * x.size * reps / best
    return _RATE
