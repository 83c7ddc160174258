"""How Transformer Engine's userbuffers overlap (Megatron's ``--tp-comm-overlap``) cuts a layer's
tensor-parallel GEMMs, so that the communication can run beside them.

- A GEMM that consumes a gathered input (the column GEMMs forward, the row GEMMs' input gradients
  backward) runs as a *ring exchange*: ``tp`` chunks of its rows, one per rank's slice, each as
  soon as its slice has arrived (``CommOverlapP2P``).
- A GEMM whose output is reduce-scattered forward (the row GEMMs) is *pipelined*: :data:`UB_SPLITS`
  chunks of its rows on the SMs the reduce-scatter kernels leave (:data:`UB_SMS`), each chunk's
  reduce-scatter behind the next (``CommOverlap``).
- Chunks go to :data:`UB_STREAMS` compute streams in turn, so up to that many run at once and
  their tiles share the SMs as one batched GEMM's would; fewer rows per chunk leave emptier waves.

Defaults of ``transformer_engine.pytorch.module.base.initialize_ub`` (TE 2.8): ``num_splits`` 4,
``num_sm`` 16 with ``set_sm_margin`` for pipelined reduce-scatters, ``_NUM_MAX_UB_STREAMS`` 3
(``NVTE_COMM_OVERLAP_MAX_STREAMS`` in ``comm_gemm_overlap.h``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.kernels import Kernel, gemm

#: Chunks a pipelined reduce-scatter cuts its GEMM into.
UB_SPLITS = 4
#: SMs the reduce-scatter and bulk kernels run on, which the GEMMs beside them give up.
UB_SMS = 16
#: Compute streams the chunks of one GEMM take in turn: at most this many run at once.
UB_STREAMS = 3


def chunk_groups(kernel: Kernel, chunks: ArrayLike) -> list[tuple[Kernel, np.ndarray]]:
    """``kernel`` (a GEMM) cut into ``chunks`` pieces of its rows, run :data:`UB_STREAMS` at a time:
    ``floor(c / s)`` batched GEMMs of ``s`` pieces and one of ``c mod s`` (where there is a rest),
    as (kernel, how many) pairs. One chunk is the GEMM itself."""
    if kernel.shape is None:
        raise ValueError(f"{kernel.name} is not a GEMM")
    m, n, k, b = kernel.shape
    c = np.asarray(chunks, dtype=float)
    full, rest = np.divmod(c, UB_STREAMS)
    return [
        (gemm(m / c, n, k, kernel.dtype, b * UB_STREAMS), full),
        (gemm(m / c, n, k, kernel.dtype, b * np.maximum(rest, 1)), (rest > 0).astype(float)),
    ]
