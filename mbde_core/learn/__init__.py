"""Offline learning with numpy/scipy only: the tanh MLP of the learned minimal-coordinate map."""
