"""Workloads, by job kind: the transformer (:mod:`~commodel.workloads.model`), its parallel layouts
(:mod:`~commodel.workloads.parallel`), one layer on a GPU (:mod:`~commodel.workloads.layer`),
mixture-of-experts (:mod:`~commodel.workloads.moe`), the training step
(:mod:`~commodel.workloads.training`), serving (:mod:`~commodel.workloads.serving`) and HPC stencils
(:mod:`~commodel.workloads.hpc`). They compose the communication and computation models, never
re-derive them."""
