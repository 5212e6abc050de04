"""The estimator stage: feeds one estimator time-stamped readings on a fixed step, with
its guards against faulty readings and clocks, and its recovery (re-acquisition,
multi-start bank). The same code runs in ``mbde replay`` and in the live node.
"""
