"""Trajectory estimation as one sparse nonlinear least-squares problem (offline).

The batch smoother of paper 003 sec. 3.4 (``mbde smooth``) lives here, built from parts
that offline identification (paper 001, ``mbde identify``) reuses: residuals with
analytic sparse Jacobians, the banded normal equations with dense parameter columns, a
Levenberg-Marquardt solver and marginal covariances.

Modules (lower to upper):

- :mod:`.normal`    RowBlock (whitened residual rows and their Jacobian blocks),
                    NormalEquations (block-tridiagonal J^T J + dense parameter columns,
                    banded Cholesky, Schur complement, marginal covariances);
- :mod:`.solver`    levenberg_marquardt (in-house, banded) and scipy_trf (comparison);
- :mod:`.model`     MultibodyModel: q, qd, qdd, f = zdd of the dynamics and their exact
                    derivatives at every step (complex step through the generated kernels);
- :mod:`.readings`  readings on the time grid as arrays (bad ones counted, skipped);
- :mod:`.factors`   the factors of paper 003 eq. 23: prior, eom, integrator, observations;
- :mod:`.problem`   SmootherProblem: the factors over the states of a grid;
- :mod:`.inputs`    generalized-force inputs: unknown torques as states, measured ones as factors;
- :mod:`.calibration`, :mod:`.noise`  noise levels from the data (variance components),
                    the goodness-of-fit verdict;
- :mod:`.config`    the ``smoother:`` options;
- :mod:`.smoother`  BatchSmoother (initial guess from a forward filter, solve, covariances)
                    and SmoothedTrajectory;
- :mod:`.windowed`  long runs in overlapping windows with a marginalised past (bounded memory).

API contract for reuse (kept stable; changes are announced in commit messages)
------------------------------------------------------------------------------
States: N blocks of b values, X (N, b); the smoother uses x_i = [z_i, zd_i, zdd_i]
(b = 3g), with m input states after them (b = 3g + m), on the grid t_i = t0 + i dt.
Global parameters: p (P,), P >= 0.

``RowBlock(name, idx (K,), r (K, d), Ji (K, d, b), Jn=None | (K, d, b), Jp=None | (K, d, P))``
    K groups of d *whitened* residual rows (cost = 1/2 sum r^2); group k depends on
    x_{idx[k]} (Ji), on x_{idx[k]+1} if Jn is given, and on p if Jp is given. Any mix
    of RowBlocks gives a Jacobian that is block-bidiagonal in the states plus P dense
    columns (paper 001 eq. 3.25). Append parameter columns by setting ``Jp`` on the rows
    that depend on p (rows without Jp do not).

Problem protocol (any object):
    ``N``, ``b``, ``P`` (ints);
    ``evaluate(X, p) -> list[RowBlock]`` (residuals *and* Jacobians at (X, p); return an
    infinite residual to reject a trial point);
    optional ``accept(X, p)``: called after each accepted step (and at the start);
    optional ``retract(X, dX, p, dp) -> (X', p')``: how a step is applied (e.g. clip p
    to box bounds); default X + dX, p + dp.

``levenberg_marquardt(problem, X0, p0=None, options=LMOptions()) -> LMResult``
    LMResult: X, p, cost, initial_cost, iterations, evaluations, status, history,
    rows (at the solution), normal (NormalEquations at the solution, factored undamped),
    wall_time. ``normal.marginals()`` (N, b, b): diagonal blocks of the inverse
    information (parameters' uncertainty included); ``normal.parameter_covariance()``
    (P, P): S^-1 of the Schur complement (paper 001 eq. 3.31).

``SmootherProblem(model, readings, sigma_a, prior_mean, prior_sqrt_info, scheme,
relaxation, q_guess, first_eom, inputs, input_mean, direct)``: P = 0; its ``evaluate``
returns the RowBlocks named ``prior``, ``eom``, ``integrator``, ``obs:<sensor>`` (and
``input_walk``, ``input_prior``, ``input:<sensor>`` with input states), and keeps the
model's StepEval of the last accepted iterate in ``.ev``; ``direct``: known forces
without states (identification's recorded control signals). To identify parameters, wrap it: set ``P``, call its
``evaluate`` with the model of the current p, and attach ``Jp`` to the rows.
``MultibodyModel(mech, sensors).evaluate(t, X, q_guess, E=None, U=None) -> StepEval``
(q, qd, qdd, f, F = df/d[z, zd], tangent maps Tq, Tqd, Tqdd = d(q, qd, qdd)/dx, ok, and
with inputs U on the coordinates of E: f + G U and G = dzdd/du) and
``observe(sensor, ev, idx) -> (h, dh/dx)``.
"""
from mbde_core.trajectory.normal import NormalEquations, RowBlock, total_cost
from mbde_core.trajectory.solver import LMOptions, LMResult, levenberg_marquardt

__all__ = ["LMOptions", "LMResult", "NormalEquations", "RowBlock", "levenberg_marquardt", "total_cost"]
