"""Branch-free building blocks of the SIMD module's text (:mod:`mbde_core.engine.simd_source`):
``sincos``, unrolled dense solves, select-based maxima. Every function is straight-line
(conditional expressions, no statements that branch) so that it can be inlined into the
vectorised loop (:mod:`mbde_core.engine.inline_text`).

``sincos(x)``: libm's ``sin``/``cos`` are calls, which LLVM cannot vectorise without a
vector math library (numba's SVML support needs Intel's, absent here). This is the
fdlibm algorithm (FreeBSD's ``e_rem_pio2.c`` medium case, ``k_sin.c``, ``k_cos.c``):
x = n pi/2 + y with n = round(2x/pi) and y by a Cody-Waite reduction with pi/2 in three
parts (33 + 33 + 53 bits: n pi/2 is exact in the first part while |n| < 2^20, 118 bits in
all), then the minimax polynomials of sin and cos on [-pi/4, pi/4] (degree 13 and 14,
error < 2^-58) and the quadrant n mod 4. The reduction's tail (fdlibm's y[1])
is dropped: results within 1 ulp of the correctly rounded values (tested against libm).
Beyond |x| = 2^19 pi/2 (~8e5 rad) or for a non-finite x it returns NaN: the caller flags
the particle and lets the numpy path compute it.

Selects are written as arithmetic (``a c + b (1 - c)`` with c = 0.0 or 1.0: exact for
finite a and b) or as builtin ``min``/``max`` (lowered by numba to one select), never as
conditional expressions: numba makes each of those a branch of its IR, and its SSA passes
then cost time quadratic in the number of branches (~20 s of a four-bar's compilation);
LLVM sees straight-line code either way. Boolean logic uses ``&`` and ``|`` (``and``/``or``
short-circuit: branches too).
"""
from __future__ import annotations

from mbde_core.engine.numba_source import _tup

SINCOS = '''
INVPIO2 = 6.36619772367581382433e-01
PIO2_1 = 1.57079632673412561417e+00
PIO2_2 = 6.07710050630396597660e-11
PIO2_2T = 2.02226624879595063154e-21
S1, S2, S3 = -1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04
S4, S5, S6 = 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10
C1, C2, C3 = 4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05
C4, C5, C6 = -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11
XMAX = 823549.6  # 2^19 pi/2


def sincos(x):
    """(sin x, cos x) without branches; NaN for |x| > XMAX, NaN and inf."""
    fn = np.floor(x * INVPIO2 + 0.5)
    r1 = x - fn * PIO2_1
    w1 = fn * PIO2_2
    r = r1 - w1
    w = fn * PIO2_2T - ((r1 - r) - w1)
    y = r - w
    z = y * y
    v = z * y
    s = y + v * (S1 + z * (S2 + z * (S3 + z * (S4 + z * (S5 + z * S6)))))
    rc = z * (C1 + z * (C2 + z * (C3 + z * (C4 + z * (C5 + z * C6)))))
    hz = 0.5 * z
    wc = 1.0 - hz
    c = wc + (((1.0 - wc) - hz) + z * rc)
    k = np.int64(min(1e9, max(-1e9, fn))) & 3
    odd = float(k & 1)
    sn = (c * odd + s * (1.0 - odd)) * (1.0 - 2.0 * float((k >> 1) & 1))
    cs = (s * odd + c * (1.0 - odd)) * (1.0 - 2.0 * float(((k + 1) >> 1) & 1))
    over = np.sqrt(-max(0.0, abs(x) - XMAX))
    return sn + over, cs + over
'''


def maxabs(name: str, size: int) -> str:
    """``name(x)``: max |x_k| of a tuple of ``size`` (NaN is not propagated: the caller's
    finiteness test of its results catches it)."""
    lines = [f"def {name}(x):", "    m0 = abs(x[0])"]
    lines += [f"    m{k} = max(m{k - 1}, abs(x[{k}]))" for k in range(1, size)]
    lines.append(f"    return m{size - 1}")
    return "\n".join(lines) + "\n"


def solve_k(k: int) -> str:
    """``SOLVE<k>(A, b)``: Gaussian elimination with partial pivoting on a k x k tuple
    system, unrolled, the row swap by arithmetic selects (exact for finite entries). The
    operations of numba_source's SOLVE in its order (pivot: the first row of largest |a|)."""
    L = [f"def SOLVE{k}(A, b):"]
    for i in range(k):
        for j in range(k):
            L.append(f"    a{i}_{j} = A[{i}][{j}]")
        L.append(f"    x{i} = b[{i}]")
    for c in range(k - 1):
        L += [f"    best = abs(a{c}_{c})", f"    piv = {c}"]
        for r in range(c + 1, k):  # the first row of largest |a| in column c
            L += [f"    sw = abs(a{r}_{c}) > best", f"    best = max(best, abs(a{r}_{c}))", f"    piv = piv + ({r} - piv) * sw"]
        for r in range(c + 1, k):
            L.append(f"    p{r} = (piv == {r}) * 1.0")
        for j in [*(f"a{{}}_{j}" for j in range(c, k)), "x{}"]:  # swap rows c and piv
            cj = j.format(c)
            pick = f"{cj} * (1.0 - " + " - ".join(f"p{r}" for r in range(c + 1, k)) + ")"
            pick += "".join(f" + {j.format(r)} * p{r}" for r in range(c + 1, k))
            L += [f"    old = {cj}", f"    {cj} = {pick}"]
            L += [f"    {j.format(r)} = old * p{r} + {j.format(r)} * (1.0 - p{r})" for r in range(c + 1, k)]
        L.append(f"    inv = 1.0 / a{c}_{c}")
        for r in range(c + 1, k):
            L.append(f"    f = a{r}_{c} * inv")
            for j in range(c, k):
                L.append(f"    a{r}_{j} = a{r}_{j} - f * a{c}_{j}")
            L.append(f"    x{r} = x{r} - f * x{c}")
    for i in range(k - 1, -1, -1):
        acc = f"x{i}" + "".join(f" - a{i}_{j} * o{j}" for j in range(i + 1, k))
        L.append(f"    o{i} = ({acc}) / a{i}_{i}")
    L.append(f"    return {_tup(f'o{i}' for i in range(k))}")
    return "\n".join(L) + "\n"
