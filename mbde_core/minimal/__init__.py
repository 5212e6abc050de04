"""Minimal coordinates (paper 004 sec. 3.4): the map q_n = g_n(q_m) and the reduced model.

Here the natural coordinates q_n are the mechanism's q (n,) and the minimal coordinates
q_m are its independent coordinates z (g,). A *coordinate map* gives, for a batch of z,
q = g_n(z) and its first, second and third derivatives (:class:`~.jet.MapJet`); two
interchangeable sources:

- ``exact`` (:mod:`.exact`): the engine's position problem, R and its derivatives;
- ``learned`` (:mod:`.learned`): a small tanh MLP trained offline on the engine's
  configurations (paper 004 sec. 5.2), saved to / loaded from ``.npz``.

:mod:`.augmented` builds the ADE-KF's augmented model over x = [z, zd, a] on any map
(eqs. 28-56), :mod:`.observability` the PBH test of eqs. 57-58.
"""
from mbde_core.minimal.exact import ExactMap
from mbde_core.minimal.jet import MapJet
from mbde_core.minimal.learned import LearnedMap, train_map

__all__ = ["MapJet", "make_map"]


def make_map(mech, source: str = "exact", **kw):
    """A coordinate map of ``mech``: ``exact`` or ``learned`` (``file=`` path or
    ``options=`` training options, see :func:`mbde_core.minimal.learned.train_map`)."""
    if source == "exact":
        return ExactMap(mech, **kw)
    if source == "learned":
        path = kw.pop("file", None)
        if path:
            return LearnedMap.load(path, mech)
        return train_map(mech, **kw)[0]
    raise ValueError(f"unknown map source {source!r} (exact | learned)")
