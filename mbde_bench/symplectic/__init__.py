"""Structure-preserving linear filtering (paper 002 sec. 6) and the stochastic harmonic
oscillator of its examples 2.1, 3.1 and 6.1.

- :mod:`riccati`: the state-adjoint (Hamiltonian) form of the Kalman-Bucy Riccati equation,
  its symplectic Euler one-step map (eq. 15), the covariance update of Theorem 6.1
  (eq. 16), Algorithm 6.1 (symplectic state and covariance updates) and the filters it is
  compared with (discrete Kalman filter, Euler-discretised Riccati equation);
- :mod:`oscillator`: particle clouds of dq = p dt + sigma dW1, dp = -q dt + gamma dW2
  propagated by Euler-Maruyama (RK1), symplectic Euler (eq. 5), the midpoint rule (eq. 6)
  and the exact Gaussian transition.
"""
