"""Assessing estimates: metrics against ground truth, the suitability of a sensor set for an
estimator (checked before a run), and the mirror ambiguity of the readings.
"""
