"""Text of the compiled placement kernel, appended to each mechanism's numba module
(:mod:`mbde_core.engine.numba_source`): particles moved to new independent coordinates z
(the PF's regularisation, :mod:`mbde_core.estimators.particle.resampling`) are placed by the
position problem Phi(q) = 0 at z from a guess (Newton: the module's ``position``, the rule of
:func:`mbde_core.engine.kinematics.solve_position`), then R(q) and qd = R zd (no drivers).
``place_range`` releases the GIL: the caller's threads each take a contiguous range."""


def place_text(n: int, g: int) -> str:
    """The kernel's text for n coordinates and g independent ones (stores written out, as
    the module's ``store``)."""
    stores = [f"        oq[{i}, p] = q[{i}]; oqd[{i}, p] = qd[{i}]" for i in range(n)]
    stores += [f"        orr[{i * g + k}, p] = R[{i}][{k}]" for i in range(n) for k in range(g)]
    return HEAD + "\n".join(stores) + "\n"


HEAD = '''

@njit(nogil=True, **OPTS)
def place_range(Z, ZD, GUESS, oq, oqd, orr, ok, bad, start, stop):
    """Particles start .. stop - 1 (columns of the batch-last Z, ZD (g, N), GUESS (n, N)):
    q by the position problem at z from the guess, R there (into orr (n g, N)) and
    qd = R zd; ok: converged; bad: a non-finite Newton step or result."""
    for p in range(start, stop):
        q, okp, badp, tr, J = position(col_g(Z, p), col_n(GUESS, p))
        R = rmatrix(J, tr)
        qd = rmul(R, col_g(ZD, p))
        ok[p] = okp
        bad[p] = badp or not math.isfinite(qsum(qd))
'''
