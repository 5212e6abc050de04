"""Offline joint state and parameter identification (paper 001): ``mbde identify``.

Modules (lower to upper):

- :mod:`.keypath`          identifiable parameters of a mechanism YAML by key path, bounds;
- :mod:`.model`            ParameterizedMechanism: the mechanism at parameters p, dM/dp,
                           dQ/dp and the analytic sensitivity dzdd/dp;
- :mod:`.problem`          JointProblem: the smoother's rows (mbde_core.trajectory) of
                           several recordings plus dense parameter columns;
- :mod:`.projection`       the parameters' Jacobian with the states projected out (covariance,
                           rank, leverages);
- :mod:`.noise`            noise variance factors with redundancy numbers;
- :mod:`.identifiability`  null directions of the parameters;
- :mod:`.initial`          paper 001's low-pass initial guess from encoders;
- :mod:`.identify`         the driver (initial guess, identifiability, LM passes, noise search);
- :mod:`.config`           the ``identification:`` options;
- :mod:`.calibrated`, :mod:`.outputs`  calibrated.yaml, identification.json, plots;
- :mod:`.synthetic`        recordings with known parameters (tests, ``mbde bench identify``).
"""
