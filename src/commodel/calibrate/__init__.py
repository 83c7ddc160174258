"""Calibration from the user's own runs: a parser per log format (nccl-tests, Megatron-LM,
torchtitan, trtllm-bench, vLLM, SGLang), each returning the jobs it ran and what it measured, and
one fitter (:mod:`commodel.calibrate.fit`) that moves the few constants those jobs depend on, inside
their stated uncertainty, and writes a hardware overlay.

It sits above ``validate`` (a constant's uncertainty comes from ``commodel validate``'s errors) and
``pricing`` (a training or serving log is priced as its job)."""
