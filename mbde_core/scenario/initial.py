"""The initial state of a scenario: read from its ``initial_state`` section and assembled on
the truth model (on the requested assembly branch), and the estimator's initial state with
the scenario's model errors, assembled on the estimator's model.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbde_core.config.yamlnode import Node
from mbde_core.engine import kinematics
from mbde_core.engine.branches import BranchTool
from mbde_core.model.mechanism import Mechanism
from mbde_core.scenario.model_errors import ModelErrors

INITIAL_KEYS = ("position", "velocity", "release_from", "branch")


@dataclass(frozen=True)
class InitialState:
    """An assembled initial state: q, qd (n,), z, zd (g,), branch label."""

    q: np.ndarray
    qd: np.ndarray
    z: np.ndarray
    zd: np.ndarray
    branch: int


def read_initial_state(node: Node, truth: Mechanism, variables: dict[str, float]) -> InitialState:
    """The scenario's ``initial_state`` (position or release_from, velocity, branch) assembled on
    the truth model; its defaults: the mechanism file's configuration and velocity."""
    g = truth.dof
    z = truth.q0[truth.independent].copy()
    zd = truth.qd0[truth.independent].copy()
    branch = 0
    moved = False
    if node.value is not None:
        node.mapping(optional=INITIAL_KEYS)
        if node.has("release_from") and (node.has("position") or node.has("velocity")):
            raise node.error("give either 'release_from' or 'position'/'velocity', not both")
        pos_key = "release_from" if node.has("release_from") else "position"
        for key, target in ((pos_key, z), ("velocity", zd)):
            if node.get(key).value is None:
                continue
            for name, child in node.get(key).items():
                if name not in truth.independent_names:
                    raise child.error(f"not an independent coordinate (independent: {', '.join(truth.independent_names)})")
                target[truth.independent_names.index(name)] = child.number(variables)
                moved = moved or key == pos_key
        if node.has("release_from"):
            zd = np.zeros(g)
        if node.has("branch"):
            branch = node.get("branch").number(integer=True, nonnegative=True)
            moved = moved or branch != 0
    if not moved:
        q = truth.q0.copy()
    else:
        q, ok = assemble(truth, z, branch)
        if not ok:
            where = node.get("branch") if node.has("branch") else node
            raise where.error(no_assembly(truth, z, branch))
    qd = kinematics.velocity(truth, q, zd)
    return InitialState(q, qd, q[truth.independent].copy(), zd.copy(), int(branch))


def estimator_initial_state(node: Node, est: Mechanism, init: InitialState, errors: ModelErrors) -> InitialState:
    """The true initial state ``init`` plus the initial-state model errors, assembled on the
    estimator's model ``est`` (node: the scenario's model_errors, for messages)."""
    z = init.z.copy()
    zd = init.zd.copy()
    for k, name in enumerate(est.independent_names):
        z[k] += errors.initial_position.get(name, 0.0)
        zd[k] += errors.initial_velocity.get(name, 0.0)
    if np.allclose(z, est.q0[est.independent], rtol=0, atol=0) and init.branch == 0:
        q = est.q0.copy()
    else:
        q, ok = assemble(est, z, init.branch)
        if not ok:
            raise node.error("estimator initial state: " + no_assembly(est, z, init.branch))
    qd = kinematics.velocity(est, q, zd)
    return InitialState(q, qd, q[est.independent].copy(), zd, init.branch)


def assemble(mech: Mechanism, z: np.ndarray, branch: int):
    """(q, ok): the configuration at independent coordinates z on branch label ``branch``."""
    bt = BranchTool(mech)
    q, ok = bt.assemble(np.asarray(z, dtype=float)[None], np.array([branch]), starts=48)
    return q[0], bool(ok[0])


def no_assembly(mech: Mechanism, z: np.ndarray, branch: int) -> str:
    zs = ", ".join(f"{n} = {v:.6g}" for n, v in zip(mech.independent_names, z))
    _, labels = BranchTool(mech).enumerate(np.asarray(z, dtype=float))
    have = ", ".join(str(int(v)) for v in labels) or "none"
    return f"the mechanism cannot be assembled on branch {branch} at {zs} (branches there: {have})"
