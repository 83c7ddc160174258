"""The MoE dispatch job (``commodel comm dispatch``'s options, the ``moe_dispatch`` evaluator's
inputs): one expert-parallel dispatch and one combine per GPU as DeepEP's kernels run them
(:func:`commodel.workloads.moe.dispatch.exchange`), reported as DeepEP's own tests report them: the
time of each call, what binds it, and its NVLink and RDMA bandwidths as the tests count them
(:func:`~commodel.workloads.moe.dispatch.received_bandwidths`).

Dispatch sends FP8 elements with their per-128 scales, combine BF16 ones
(:data:`~commodel.workloads.moe.dispatch.DISPATCH_BYTES`, ``COMBINE_BYTES``), as DeepEP's tests do.
A scheme the fabric's NIC cannot run across nodes is a row with ``valid = False`` and the reason in
``problem``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import numpy as np
from numpy.typing import ArrayLike
from pydantic import Field

from commodel.comm.initiation import SCHEMES, check_scheme, path_of
from commodel.hardware import HardwareDB, nodes_for
from commodel.hardware import cluster as make_cluster
from commodel.hardware.cluster import Cluster, check_held
from commodel.pricing.evaluator import Evaluator
from commodel.pricing.job import (
    MAX_GPUS,
    MODEL,
    SYSTEM,
    Choices,
    Job,
    Oversubscription,
    PodGpus,
    TraysPerRack,
    cluster_shape,
)
from commodel.workloads.model.catalog import model as get_model
from commodel.workloads.moe.dispatch import (
    COMBINE_BYTES,
    DISPATCH_BYTES,
    MODES,
    exchange,
    received_bandwidths,
)

if TYPE_CHECKING:
    import pandas as pd

#: Bytes per element of each call.
ELEMENT_BYTES = {"dispatch": DISPATCH_BYTES, "combine": COMBINE_BYTES}
#: The resources a call's time is the largest of, and their columns.
TERMS = {"message issue": "issue", "network": "network", "NVLink": "nvlink"}


class DispatchJob(Job):
    """DeepEP's dispatch and combine of one MoE layer: which model, where, how many tokens, which
    kernels, and who drives the messages across nodes."""

    noun = "moe_dispatch"
    model: Annotated[str, MODEL] = Field(
        "deepseek-v3", description="A mixture-of-experts model (workloads/) or file."
    )
    system: Annotated[str, SYSTEM] = Field(
        "dgx-h100", description="System (node) name from the hardware database."
    )
    ep: int = Field(
        8, ge=1, le=MAX_GPUS, description="Expert-parallel GPUs (DeepEP's ranks): within one scale-up domain, "
        "or whole domains."
    )  # fmt: skip
    tokens: float = Field(128, ge=1, le=2**31, description="Tokens per GPU per call (DeepEP's num_tokens).")
    mode: Annotated[str, Choices("DeepEP mode", MODES)] = Field(
        "low-latency", description="low-latency (decode: one RDMA write per token copy) or high-throughput "
        "(prefill and training: one network copy per node, forwarded over NVLink)."
    )  # fmt: skip
    scheme: Annotated[str, Choices("initiation scheme", SCHEMES)] = Field(
        "kernel-initiated", description="Who drives the messages across nodes: kernel-initiated (NVSHMEM "
        "IBGDA, NCCL GIN's GDAKI), proxy (GIN's proxy thread), ..."
    )  # fmt: skip
    shared_queues: bool = Field(
        True, description="The GPU threads share the send queues, each put reserving its slot (NVSHMEM IBGDA, "
        "DeepEP's own transport); off: a queue per context (NCCL GIN's GDAKI)."
    )  # fmt: skip
    pod_gpus: PodGpus = None
    oversubscription: Oversubscription = None
    trays_per_rack: TraysPerRack = None


def dispatch_cluster(job: DispatchJob, db: HardwareDB | None = None) -> Cluster:
    """Just enough nodes of the job's system for its expert-parallel GPUs, shaped as the job states; a
    scheme the scale-out NIC cannot run across nodes is an error naming what it lacks."""
    where = make_cluster(job.system, nodes_for(job.system, job.ep, db), db, **cluster_shape(dict(job)))
    if job.ep > where.domain_gpus:
        check_scheme(job.scheme, path_of(where))
    return where


def dispatch_rows(
    job: DispatchJob, tokens: ArrayLike | None = None, db: HardwareDB | None = None
) -> list[dict[str, object]]:
    """One dispatch and one combine for each token count (default: the job's), on ``db`` (default:
    the hardware database in use), a row each: tokens, call, time (us), what binds it, each resource's
    time (us) and the bandwidths DeepEP's tests print (GB/s); token counts whose activations no GPU
    holds are an error."""
    net, where = get_model(job.model), dispatch_cluster(job, db)
    counts = np.atleast_1d(job.tokens if tokens is None else tokens).astype(float)
    most = float(counts.max())  # a GPU holds at least its tokens' activations, as the combine returns them
    check_held(where.gpu, most * net.hidden * max(ELEMENT_BYTES.values()), f"{most:,.0f} tokens' activations")
    rows = []
    for count in counts:
        for call, element in ELEMENT_BYTES.items():
            r = exchange(job.mode, job.scheme, net, where, job.ep, count, element, job.shared_queues)
            seconds = r["time_s"]
            terms = {f"{TERMS[k]}_us": 1e6 * r[f"{k}_s"] for k in TERMS if f"{k}_s" in r}
            rows.append({
                "tokens": count, "call": call, "time_us": 1e6 * seconds, "binding": r["binding"], **terms,
                **{f"{k}_GBps": v for k, v in received_bandwidths(
                    net.moe, net.hidden, count, job.ep, job.ep / r["group_gpus"], element, seconds).items()},
            })  # fmt: skip
    return rows


def price_dispatch(
    job: DispatchJob, tokens: ArrayLike | None = None, db: HardwareDB | None = None
) -> pd.DataFrame:
    """:func:`dispatch_rows` as a DataFrame."""
    import pandas as pd  # slow: pandas (0.2 s), for this table only (comm schemes shares the module)

    return pd.DataFrame(dispatch_rows(job, tokens, db))


def _layer(row: object) -> dict:
    """One sweep row: the dispatch and combine of its job, their sum, and what binds the combine."""
    job = DispatchJob.model_construct(**vars(row) | {"ep": int(row.ep)})  # checked as a table
    frame = price_dispatch(job).set_index("call")
    dispatch, combine = frame.loc["dispatch"], frame.loc["combine"]
    return {"dispatch_us": dispatch.time_us, "combine_us": combine.time_us,
            "total_us": dispatch.time_us + combine.time_us, "binding": combine.binding}  # fmt: skip


OUTPUTS = ("dispatch_us", "combine_us", "total_us", "binding", "problem", "valid")


def moe_dispatch() -> Evaluator:
    return Evaluator.row_by_row(
        "moe_dispatch",
        "a MoE layer's DeepEP-style dispatch and combine per GPU over an initiation scheme",
        DispatchJob, OUTPUTS, _layer, ("problem", "binding"),
    )  # fmt: skip
