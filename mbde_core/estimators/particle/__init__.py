"""The particle filters (paper 000, Algorithm 1; paper 002 sec. 3 for the VI proposal).

:mod:`.filter` is the particle filter read top-down; its parts: the particle set and how a
set is drawn and edited (:mod:`.particles`), the prior and branch atlas (:mod:`.prior`),
propagation of the cloud (:mod:`.propagate`, :mod:`.compiled`), the readings' predictions,
likelihood and gate (:mod:`.likelihood`), the proposal (:mod:`.proposal`) and the update's
weights with its held readings (:mod:`.weights`), resampling, KLD-sampling and
regularisation (:mod:`.resampling`), the lost and lock tests and the injections of fresh
hypotheses (:mod:`.recovery`), the Gaussian follower (:mod:`.refine`), the outputs
(:mod:`.outputs`), its options and mechanism-derived defaults (:mod:`.options`,
:mod:`.scales`). :mod:`.vipf` is the VI-PF.
"""
