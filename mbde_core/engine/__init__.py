"""Multibody engine: kinematics, branches, dynamics, inverse dynamics and integrators."""
