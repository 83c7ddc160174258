"""HPC kernels: stencils with halo exchange."""
