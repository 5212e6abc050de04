"""Mechanism YAML texts that several tests share (no loads: each test appends its own)."""

# the slider-crank of issue 42, of no paper: crank 0.1 m, rod 0.35 m, slider track offset 0.04 m
USER_SLIDER_CRANK = """
parameters: {L1: 0.10, L2: 0.35, e: 0.04}
points:
  - {name: A, x: 0, y: 0, fixed: true}
  - {name: P1, x: L1, y: 0}
  - {name: P2, x: L1 + sqrt(L2^2 - e^2), y: e}
planar_bodies:
  - {name: crank, points: [A, P1], length: L1, mass: 0.4, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
  - {name: rod, points: [P1, P2], length: L2, mass: 0.3, I0: (1/3)*mass*length^2, cog: [0.5*length, 0]}
sliders:
  - {name: slider, point: P2, origin: [0, e], direction: [1, 0], mass: 0.5}
relative_coordinates:
  - {name: theta, type: RelativeAngleAbsoluteDOF, points: [A, P1]}
independent_coordinates: [theta]
"""
