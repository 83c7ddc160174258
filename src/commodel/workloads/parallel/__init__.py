"""Parallel layouts (tensor, pipeline, context, data, expert) as arrays, the rules that make one
valid, Megatron-Core's pipeline layouts, and the communication groups a layout forms."""
