"""Native kernels for the per-entry loops of the keyed-state walk (numba, optional), and their dispatch."""
