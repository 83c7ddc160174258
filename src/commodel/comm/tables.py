"""NCCL's and RCCL's own tuning constants, as their tuners hold them (data only, no logic).

Source for every table: the project's digest of NCCL 2.30.7 (NVIDIA/nccl @ 5067397,
``src/graph/tuning.cc``, ``search.cc``, ``connect.cc``, ``enqueue.cc``, ``transport/nvls.cc``,
``include/device.h``) and RCCL 2.21.5 (ROCm/rccl @ 0cbce2a, ``src/graph/tuning.cc``). The section
numbers below are the digest's. Units: microseconds and GB/s (1e9 B/s) as NCCL keeps them; the
models convert to seconds and bytes/s where they read a table.

Indices: algorithms in :data:`ALGOS` order (NCCL's TREE, RING, COLLNET_DIRECT, COLLNET_CHAIN, NVLS,
NVLS_TREE, PAT), protocols in :data:`PROTOCOLS` order (LL, LL128, SIMPLE), architectures in
:data:`ARCHS` order (NCCL's index from the minimum compute capability), scale = 0 for one node, 1 for
two, 2 for three or more (the tables' N1, N2, N4 columns).
"""

from __future__ import annotations

import numpy as np

from commodel.hardware.schema import ARCHITECTURES

ALGOS = ("tree", "ring", "collnet-direct", "collnet-chain", "nvls", "nvls-tree", "pat")
PROTOCOLS = ("ll", "ll128", "simple")
ARCHS = ARCHITECTURES["nvidia"]
LINK_CLASSES = ("nvlink", "pci", "net")

# --- 2.1 base latency baseLat[algo][proto] (us) --------------------------------------------------
BASE_LAT = np.array(
    [
        [6.8, 14.0, 8.4],  # tree
        [6.6, 14.0, 8.4],  # ring
        [0.0, 0.0, 0.0],  # collnet direct
        [0.0, 0.0, 0.0],  # collnet chain
        [0.0, 0.0, 0.0],  # nvls
        [0.0, 0.0, 0.0],  # nvls tree
        [8.0, 8.0, 8.0],  # pat
    ]
)

# --- 2.2 hardware latency hwLat[link][algo][proto] (us) ------------------------------------------
HW_LAT = np.array(
    [
        [  # NVLink
            [0.6, 1.25, 4.0],
            [0.6, 1.9, 3.4],
            [0.0, 0.0, 3.7],
            [0.0, 0.0, 2.8],
            [0.0, 0.0, 25.0],
            [0.0, 0.0, 25.0],
            [0.0, 0.0, 4.0],
        ],
        [  # PCI
            [1.0, 1.9, 4.0],
            [1.0, 2.5, 5.7],
            [0.0, 0.0, 3.7],
            [0.0, 0.0, 2.8],
            [0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0],
            [0.0, 0.0, 4.0],
        ],
        [  # NET
            [5.0, 8.5, 14.0],
            [2.7, 4.0, 14.0],
            [0.0, 0.0, 31.0],
            [0.0, 0.0, 30.0],
            [0.0, 0.0, 18.0],
            [0.0, 0.0, 20.9],
            [0.0, 0.0, 14.0],
        ],
    ]
)

# --- 2.4 llMaxBws[row][scale] (GB/s): row = arch on one node, CPU vendor (0 Intel, 1 AMD) beyond ---
LL_MAX_BW = np.array([[39.0, 39.0, 20.4], [87.7, 22.5, 19.0], [141.0, 45.0, 35.0], [282.0, 90.0, 70.0]])

# --- 2.5 per-channel caps [arch][scale] (GB/s per graph channel) --------------------------------
PER_CH_MAX_RING_LL128 = np.array([[20.0] * 3, [20.0] * 3, [36.7] * 3, [40.0] * 3])
PER_CH_MAX_TREE_LL128 = np.array(
    [[20.0, 20.0, 20.0], [20.0, 20.0, 20.0], [36.7, 36.7, 29.0], [55.6, 31.67, 20.0]]
)
PER_CH_MAX_TREE = np.array([[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [38.7, 41.4, 36.0], [70.0, 42.8, 24.0]])
PER_CH_MAX_NVLS_TREE = np.array(
    [[26.5, 18.5, 10.0], [24.0, 23.6, 17.8], [0.0, 57.7, 45.5], [0.0, 96.0, 80.0]]
)

# --- 2.6 nvlsEfficiency[arch] -------------------------------------------------------------------
NVLS_EFFICIENCY = np.array([0.0, 0.0, 0.85, 0.74])

# --- 2.8 treeCorrectionFactor[proto][logSize], logSize = floor(log2(nBytes / 64)), 0..23 ---------
TREE_CORRECTION = np.array(
    [
        [1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.7, 0.7, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0],
        [1.0, 1.0, 1.0, 1.0, 1.0, 0.9, 0.8, 0.8, 0.8, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.8, 0.9, 0.9, 0.9, 0.9, 1.0, 1.0, 1.0],
        [0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8, 0.7, 0.7, 0.8, 0.9, 0.9, 0.9],
    ]
)  # fmt: skip

# --- 1.1 / 2.9 / 2.10 scalar rules ---------------------------------------------------------------
RING_PLATEAU = {"pre_ampere": 1.9, "ampere_or_later": 1.4}  # ring Simple AllReduce latency, nNodes > 1
NET_OVERHEAD_US = {"intel": 1.0, "amd": 2.0}  # x3 for Simple; floor on multi-node ring intra latency
MAX_DEV_WORK_BATCH_COLLS = 8  # non-ring algorithms pay latency once per 8 aggregated ops

# --- 3.1 NVLink bandwidth per link as NCCL's topology sees it (GB/s) by arch --------------------
NVLINK_LINK_BW = np.array([20.0, 20.0, 20.6, 40.1])

# --- 3.2 search speed arrays (GB/s per channel, tried from high to low) ----------------------------
SPEEDS_INTRA = {
    "pre_hopper": (40, 30, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3),
    "hopper": (60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3),
    "blackwell": (90, 80, 70, 60, 50, 45, 40, 30, 24, 20, 19, 18),
    "amd": (48, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12),
}
SPEEDS_INTER = {
    "pre_hopper": (48, 30, 28, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12),
    "hopper": (48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12),
    "blackwell": (96, 86, 80, 48, 45.1, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3, 2.4, 1.2, 0.24, 0.12),
    "amd": (48, 24, 20, 18, 15, 12, 10, 9, 7, 6, 5, 4, 3, 2.4, 1.2, 0.24, 0.12),
}
MAX_RING_GRAPH_CHANNELS = 32  # MAXCHANNELS / 2
MAX_CHANNELS = 64

# --- 3.5 NVLS channels ---------------------------------------------------------------------------
NVLS_CHANNELS = {"hopper": 16, "blackwell_single": 24, "blackwell_multi": 32}

# --- 3.6 run-time channel reduction: max threads and bytes per thread per (algo, proto) ------------
MAX_THREADS = {"ll": 512, "ll128": 640, "simple": 512}
THREAD_THRESHOLD = {"ll": 8, "ll128": 8, "simple": 64}  # ring LL: 8 x nRanks

# --- 4.1 protocol constants ----------------------------------------------------------------------
NCCL_STEPS = 8
LL_USEFUL = 8 / 16  # 8 data bytes per 16-byte line
LL128_USEFUL = 120 / 128  # 15 data words per 16
SIMPLE_STEP_BYTES = 512 * 1024  # 4 MiB buffer / 8 steps
LL_CHUNK_BYTES = 32 * 1024  # one LL step of data
LL128_CHUNK_BYTES = 576_000  # one LL128 step of data
SIMPLE_CHUNK_STEPS = {"allreduce": 4, "allgather": 4, "reducescatter": 4, "broadcast": 1, "reduce": 1}
TREE_SIMPLE_CHUNK_BYTES = 512 * 1024

# --- 4.3 NVLS chunk regimes: (message below k x ops x chunk and chunk above c) -> c -------------
NVLS_CHUNK_DEFAULT = 128 * 1024
NVLS_CHUNK_STEPS = ((64, 64 * 1024), (8, 32 * 1024), (2, 16 * 1024))
NVLS_TREE_CHUNK_STEPS = ((32, 256 * 1024), (16, 128 * 1024), (4, 64 * 1024), (1, 32 * 1024))

# --- 7 RCCL (AMD builds) -------------------------------------------------------------------------
RCCL_BASE_LAT = np.array([12.0, 12.0, 17.0])  # tree, ring and collnet: LL, LL128, Simple
#: RCCL tuning model 5 (8-GPU fully connected xGMI platforms) and model 0 (default): hwLat rows of
#: the NVLink (= xGMI) and NET classes for tree and ring, LL / LL128 / Simple.
RCCL_HW_LAT = {
    5: {"nvlink": {"tree": (0.9, 0.0, 2.3), "ring": (0.8, 0.0, 2.1)},
        "net": {"tree": (10.5, 0.0, 25.0), "ring": (9.5, 0.0, 320.0)}},
    0: {"nvlink": {"tree": (0.8, 1.4, 2.5), "ring": (0.8, 2.2, 3.6)},
        "net": {"tree": (11.8, 18.2, 20.8), "ring": (9.5, 19.8, 15.1)}},
}  # fmt: skip
#: RCCL bwRatio (nNodes <= 2, > 2) for tree and ring Simple (LL128 off in model 5).
RCCL_BW_RATIO = {5: {"tree": (0.11, 0.59), "ring": (1.0, 1.0)}, 0: {"tree": (0.91, 0.95), "ring": (1.0, 1.0)}}
#: RCCL tuning model 5's size-dependent correction factors (digest 7.2), by protocol (LL, LL128,
#: Simple) and ``log2(nBytes / 64)`` from 64 B to 4 GiB (27 entries; larger sizes take the last):
#: tree for every collective, ring for calls across nodes. Model 0's are not in the digest.
RCCL_TREE_CORRECTION = np.array(
    [
        [0.1] * 6 + [1.0] * 5 + [0.6, 1.0, 0.9, 1.0, 1.0] + [0.1] * 11,
        [0.0] * 27,
        [0.1] * 15 + [0.7] + [1.0] * 10 + [0.8],
    ]
)
RCCL_RING_CORRECTION = np.array(
    [
        [0.1] * 11 + [1.0, 0.2, 1.0, 0.4, 0.4, 0.1, 0.2, 0.2] + [0.1] * 8,
        [0.0] * 27,
        [0.1] * 23 + [0.8, 1.0, 1.0, 1.0],
    ]
)
#: RCCL's ring LL broadcast and reduce bandwidth on one gfx94x (MI300) node (digest 7.1).
RCCL_RING_LL_ROOTED_SINGLE_NODE = 1.65
RCCL_LL128_USEFUL = 56 / 64  # 64-byte lines: 7 data words + 1 flag
XGMI_LINK_BW = {"cdna2": 36.0, "cdna3": 48.0}  # RCCL's xGMI speed per link (GB/s)
