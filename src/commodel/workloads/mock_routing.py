"""How unevenly an untrained router sends Megatron-Core's mock data to its experts.

Megatron-Bridge's performance runs train on Megatron-Core's mock dataset (``MockGPTLowLevelDataset``,
Megatron-Core 0.15): document ``j`` is the tokens ``1, 2, ..., L_j - 1`` and an end-of-document
token, ``L_j`` uniform in [1, 4096) from a seeded generator (seed 0, 100,000 documents), packed into
sequences. Token ``k`` appears once in every document longer than ``k``, so a step sees about 4K
distinct tokens, the small ones most. At initialization a layer's input is its token's embedding
plus residual branches whose output projections start ``sqrt(2 L)`` times smaller, and the router's
logits ``h W`` for one ``h`` are independent Gaussians across experts: each token sends its copies to
a uniformly random set of ``top_k`` experts, the same wherever it appears. Without forced balance or
a balancing loss (Megatron-Bridge's gpt-oss recipe), an expert's load is then the frequency of the
tokens that chose it.

:func:`mock_expert_load` draws every layer's routing (seeded) and returns the mean over layers of
the busiest expert-parallel rank's load over the mean: the ``expert_load`` of the initial routing.
Two things it leaves out pull opposite ways: the context a token's hidden state also carries (its
attention and MLP outputs, small at initialization but not nil) spreads one token's copies over more
experts, and the benchmark's iterations (50 in Megatron-Bridge's performance recipes) move the router
with no loss holding it to balance; neither is published for the runs.
"""

from __future__ import annotations

from functools import cache

import numpy as np

#: ``MockGPTLowLevelDataset``'s documents, their longest length (exclusive) and its seed.
MOCK_DOCUMENTS, MOCK_MAX_LENGTH, MOCK_SEED = 100_000, 4096, 0


@cache
def mock_token_frequencies() -> np.ndarray:
    """Each token's share of the mock stream: ids 1 to 4095 (id ``k`` once in every document longer
    than ``k``), then the end-of-document token (once per document)."""
    lengths = np.sort(np.random.default_rng(MOCK_SEED).integers(1, MOCK_MAX_LENGTH, MOCK_DOCUMENTS))
    longer = MOCK_DOCUMENTS - np.searchsorted(lengths, np.arange(1, MOCK_MAX_LENGTH), side="right")
    counts = np.append(longer, MOCK_DOCUMENTS).astype(float)
    return counts / counts.sum()


@cache
def mock_expert_load(experts: int, top_k: int, ep: int, layers: int, seed: int = 0) -> float:
    """Busiest expert-parallel rank's tokens over the mean, averaged over ``layers`` layers, when each
    token of the mock stream picks a uniformly random set of ``top_k`` of ``experts`` (module
    docstring), the experts in ``ep`` contiguous blocks; 1 with one rank."""
    if ep <= 1:
        return 1.0
    share = mock_token_frequencies()
    rng = np.random.default_rng(seed)
    busiest = []
    for _ in range(layers):
        chosen = np.argpartition(rng.random((share.size, experts)), top_k, axis=1)[:, :top_k]
        load = np.bincount(chosen.ravel(), weights=np.repeat(share, top_k), minlength=experts)
        per_rank = load.reshape(ep, experts // ep).sum(axis=1)
        busiest.append(per_rank.max() / per_rank.mean())
    return float(np.mean(busiest))
