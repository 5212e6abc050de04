"""The particle filters (paper 000, Algorithm 1; paper 002 sec. 3 for the VI proposal).

:mod:`.filter` is the particle filter read top-down; its parts: the prior and branch
atlas (:mod:`.prior`), the proposal (:mod:`.proposal`), propagation of the cloud
(:mod:`.propagate`, :mod:`.compiled`), the update with its likelihood gate and held
readings (:mod:`.update`, :mod:`.gate`, :mod:`.hold`), resampling and regularisation
(:mod:`.resample`, :mod:`.resampling`, :mod:`.regularise`), lock detection and recovery
(:mod:`.lock`, :mod:`.inject`), the Gaussian follower (:mod:`.refine`), the outputs
(:mod:`.outputs`), its options and mechanism-derived defaults (:mod:`.options`,
:mod:`.scales`). :mod:`.vipf` is the VI-PF.
"""
