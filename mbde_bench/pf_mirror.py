"""The mirror a scenario's readings cannot see, for the PF acquisition table.

When the readings of a scenario are the same for the true motion and its mirror image and
the forces the model does not know explain the mirrored motion (paper 004's slider-crank:
one accelerometer along the track, the motor torque unknown; :mod:`mbde_core.estimators.
assess.symmetry`; or a reflection of the driven angle a rod gyroscope cannot see,
:mod:`~mbde_core.estimators.assess.coordinate_mirror`), no filter started without the
initial state can know which of the two it follows: ``mbde replay``'s suitability line
says so at the start. Scored against the truth alone such a scenario is "never acquired"
whatever the filter does; :func:`mirrored_truth` gives the mirrored motion so that a seed
can be scored against it too (:func:`mbde_bench.pf_acquisition.seed_row`: ``on_mirror``),
which tells a filter that follows the mirror (acquired up to the unobservable sign) from
one that follows nothing.

Unknown forces: the scenario's speed controller and ``type: motor`` loads
(:func:`~mbde_core.estimators.options.rule.scenario_context`) on coordinates no effort
sensor reads.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mbde_core.engine import kinematics
from mbde_core.estimators.assess.coordinate_mirror import coordinate_mirror
from mbde_core.estimators.assess.symmetry import mirror_ambiguity
from mbde_core.estimators.options.rule import scenario_context


def unknown_force_limits(sc) -> np.ndarray | None:
    """(g,) the limits of the forces the model does not know per independent coordinate (0:
    none, or read by an effort sensor), or None without any."""
    ctx = scenario_context(sc)
    if ctx is None:
        return None
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    fl = np.array(ctx["force_limits"], dtype=float)
    ind = list(np.asarray(mech.independent))
    for s in getattr(sensors, "inputs", ()):
        if int(s.coordinate) in ind:
            fl[ind.index(int(s.coordinate))] = 0.0
    return fl if fl.any() else None


def scenario_mirror(sc):
    """("mirror" | "coordinate", the mirror object) the scenario's readings cannot tell apart
    from the truth (module doc), or None."""
    mech, sensors = sc.estimator_mechanism(), sc.estimator_sensors()
    fl = unknown_force_limits(sc)
    everywhere = fl is not None and bool(np.all(fl > 0))
    m = mirror_ambiguity(mech, sensors, everywhere)
    if m is not None:
        return "mirror", m
    cm = coordinate_mirror(mech, sensors, fl if everywhere else None)
    return None if cm is None else ("coordinate", cm)


def mirrored_truth(truth, kind_mirror):
    """A stand-in for ``truth`` (:class:`mbde_bench.common.TruthRecord`: t, q, z, zd, zdd,
    scenario) moving as the mirror: the whole linkage reflected (``mirror``: q, its rates,
    the angles 2 phi_L - theta) or the independent angles z -> 2 alpha - z with their rates
    reversed (``coordinate``: q assembled on the truth's branch)."""
    kind, m = kind_mirror
    mech = truth.scenario.estimator_mechanism()
    iz = np.asarray(mech.independent)
    if kind == "mirror":
        q, qd, qdd = m.apply(mech, truth.q, truth.qd, truth.qdd)
        z, zd, zdd = q[:, iz], qd[:, iz], qdd[:, iz]
    else:
        z, zd, zdd = 2 * m.alpha - truth.z, -truth.zd, -truth.zdd
        q, ok = kinematics.solve_position(mech, z, truth.q.copy())
        if not np.all(ok):
            q = truth.q
    return SimpleNamespace(t=truth.t, q=q, z=z, zd=zd, zdd=zdd, scenario=truth.scenario)
