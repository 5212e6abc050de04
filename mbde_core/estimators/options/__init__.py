"""Estimator options: the schema (defaults, validation), and the default-tuning rule that
turns ``auto`` into numbers from the mechanism's and the sensors' scales.
"""
