"""The Kalman-family observers (papers 003 and 004), one module per observer.

``ukf``, ``dekf``, ``cekf``, ``diekfpm``, ``errorekf`` (with its scalar and numba hot
paths), ``viekf`` and ``adekf`` (with its bounds and input jumps); the shared Kalman
algebra (gated update, Cholesky, innovation statistics) is :mod:`.algebra`, the
independent-coordinate model and its Jacobians :mod:`.reduced`, the machinery shared by
the [z, zd] observers :mod:`.base`, unknown inputs :mod:`.input_states` and
:mod:`.jump_hypothesis`.
"""
