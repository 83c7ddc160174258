"""Megatron-Bridge's own model-FLOP count, with which its performance tables turn tokens/s into model
TFLOP/s (``training/utils/flop_utils.py``, ``num_floating_point_operations``, release 0.3.1).

A row that gives both figures pins what its text leaves out: the FLOPs per token they imply must be
the count of the job the row runs. gpt-oss-120b's rows imply 8192-token sequences (the model's own is
4096) and DeepSeek-V3's no prediction module, which is how ``data/runs.toml`` came to set them;
:func:`flop_count_note` makes ``commodel validate`` say so for any row whose job disagrees.
"""

from __future__ import annotations

import re

from commodel.pricing.training_job import TrainingJob
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.model.schema import Transformer

#: How far (relative) a job's count may sit from what its row's figures imply before the row notes it.
FLOP_COUNT_TOLERANCE = 0.01

_REPORTED = re.compile(r"\(([\d.]+) model TFLOP/s")


def flops_per_token(net: Transformer, seq: int, mtp: int = 0, tp: int = 1) -> float:
    """Megatron-Bridge's model FLOPs per token of ``net`` trained on ``seq``-token sequences with
    ``mtp`` prediction modules at tensor parallelism ``tp``.

    ``12 h g (f_dense (L - m) + (f_e (k + shared)) m)`` for the MLPs, with the layers ``L`` and the MoE
    layers ``m`` counting the prediction modules and the GLU factor ``g`` 1.5 for SwiGLU only (1 for
    gpt-oss's quick-GeGLU); ``12 L h^2 (1 + G/H + s/(2h)) q/h`` for MHA and GQA (``q`` = heads x head
    dim; sliding windows not counted), or its multi-head latent attention branch; ``6 mtp (3h + 2h^2)``
    for the prediction modules' norms and projections; ``6 h V (mtp + 1)`` for the logits, ``V``
    padded to a multiple of ``128 tp``."""
    h, moe, layers = net.hidden, net.moe, net.layers + mtp
    moe_layers = net.moe_layers + mtp if moe is not None else 0
    expert = moe.expert_ffn_hidden * (moe.top_k + moe.shared_experts) if moe is not None else 0
    swiglu = net.gated_mlp and net.activation in (None, "silu")
    mlp = 12 * h * (1.5 if swiglu else 1.0) * (net.ffn_hidden * (layers - moe_layers) + expert * moe_layers)
    if net.mla is None:
        q = net.heads * net.d_head
        attention = 12 * layers * h * h * (1 + net.n_kv_heads / net.heads + seq / h / 2) * q / h
    else:
        m, heads = net.mla, net.heads
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        attention = (
            6
            * layers
            * (
                m.q_lora_rank * (h + heads * qk + 1)
                + m.kv_lora_rank * (h + heads * (m.qk_nope_head_dim + m.v_head_dim) + 1)
                + h * m.qk_rope_head_dim
                + heads * m.v_head_dim * h
                + seq * heads * (qk + m.v_head_dim) / 2
            )
        )
    vocab = -(-net.vocab // (128 * tp)) * 128 * tp
    return mlp + attention + 6 * mtp * (3 * h + 2 * h * h) + 6 * h * vocab * (mtp + 1)


def reported_flops_per_token(source: str, tokens_per_s: float) -> float | None:
    """FLOPs per token a row's figures imply: the model TFLOP/s its source text gives ("(N model
    TFLOP/s"), over its tokens/s; None where the text gives none."""
    found = _REPORTED.search(source)
    return float(found.group(1)) * 1e12 / tokens_per_s if found else None


def flop_count_note(job: TrainingJob, source: str, tokens_per_s: float) -> str:
    """A note where Megatron-Bridge's count of ``job`` misses what its row's figures imply by more
    than :data:`FLOP_COUNT_TOLERANCE` ("" where it meets them or the row gives no TFLOP/s)."""
    reported = reported_flops_per_token(source, tokens_per_s)
    if reported is None:
        return ""
    net = get_model(job.model)
    counted = flops_per_token(net, job.seq or net.seq, job.mtp_layers, job.tp)
    if abs(counted / reported - 1) <= FLOP_COUNT_TOLERANCE:
        return ""
    return (
        f"its figures imply {reported / 1e9:.2f} GFLOP per token where Megatron-Bridge's count of the job "
        f"gives {counted / 1e9:.2f}: a setting the row does not state differs (sequence, prediction modules)"
    )
