"""A training step: micro-batches, data, tensor and pipeline parallelism, memory and what fits it,
the host that issues the kernels, and training across node groups of different vendors."""
