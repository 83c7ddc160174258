"""Serving: an inference engine's prefill and decode iterations, a replica's memory and the batch it
holds, prefill/decode disaggregation and SLO-bound batches."""
