"""The transformer a job runs: its record (``workloads/*.toml`` or a Hugging Face ``config.json``), its
parameters, FLOPs and activations, and the submodules that can be recomputed."""
