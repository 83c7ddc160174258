"""Workloads: the transformer training step, serving, MoE dispatch, stencils and their parallel
layouts. They compose the communication and computation models, never re-derive them."""
