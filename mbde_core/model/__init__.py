"""Mechanism models: YAML loading, natural coordinates, constraints, mass and loads."""
