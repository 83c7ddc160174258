"""Power, energy, carbon and cost of running a training step on a cluster.

- GPU power, the energy roofline (Choi, Dukhan, Liu and Vuduc, IPDPS 2013: energy = idle power x time
  + energy per FLOP x FLOPs + energy per byte x bytes), capped at TDP:
  ``P_gpu = P_idle + min(TDP - P_idle, (TDP - P_idle) x busy + e_HBM x B)``. ``busy`` is the share of
  the time the GPU runs compute-bound kernels: a tensor-core GEMM at its roofline draws the whole
  TDP (H100 and B200 GEMMs run at their power limit), so a compute-bound second costs
  ``TDP - P_idle`` above idle. ``B`` is the mean HBM traffic (bytes/s) of the memory-bound kernels at
  :data:`~commodel.compute.power.HBM_J_PER_BYTE` each: a memory-bound decode reading its weights at 3 TB/s on an H100 draws
  about 290 W, not its 700 W TDP. Communication waits and pipeline bubbles draw idle power. Idle
  and TDP come from the GPU record; a GPU run under a lower power limit draws at most that limit.
- Node power: ``gpus_per_node x P_gpu + NODE_OTHER_LOAD x node_other_power`` (CPUs, memory, NICs,
  NVSwitches, fans, supply losses; rated value from the system record).
- Network: ``nics_per_node x endpoint_power x ports / 3`` per node: the switch ports each NIC needs
  (3 in a non-blocking pod, ``3 + 2 / o`` above it: :meth:`Cluster.switch_ports_per_nic`), at the
  record's power of three ports; its capital cost, ``nics x ports x port_cost``.
- Facility: ``E_facility = PUE x E_IT`` (PUE = facility energy / IT energy).
- Carbon: ``kg CO2 = kWh x intensity / 1000``; cost: GPU-hours x price per GPU-hour.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from commodel.compute.power import HBM_J_PER_BYTE
from commodel.hardware.cluster import Cluster

J_PER_KWH = 3.6e6

#: Share of its rated power the rest of a node draws under a training load. Calibrated on measurement
#: h100-node-power (8.4 kW for an 8 x H100 node in training, rated 10.2 kW): with the GPUs at the
#: power the model gives them for a single-node training job (561 W), the rest draws 0.851 x 4.6 kW.
NODE_OTHER_LOAD = 0.851


def gpu_power_W(cluster: Cluster, busy: ArrayLike, hbm_Bps: ArrayLike = 0.0) -> np.ndarray:
    """Average power of one GPU that runs compute-bound kernels a ``busy`` share of the time and
    moves a mean ``hbm_Bps`` bytes/s through memory-bound ones (module docstring)."""
    gpu = cluster.gpu
    idle, tdp = gpu.idle_power.value, gpu.board_power
    compute = (tdp - idle) * np.clip(np.asarray(busy, dtype=float), 0.0, 1.0)
    memory = HBM_J_PER_BYTE * np.maximum(np.asarray(hbm_Bps, dtype=float), 0.0)
    return idle + np.minimum(tdp - idle, compute + memory)


def node_power_W(cluster: Cluster, busy: ArrayLike, hbm_Bps: ArrayLike = 0.0) -> np.ndarray:
    """Power of one node whose GPUs draw :func:`gpu_power_W` (network switches excluded)."""
    other = NODE_OTHER_LOAD * cluster.system.node_other_power.value
    return cluster.gpus_per_node * gpu_power_W(cluster, busy, hbm_Bps) + other


def it_power_W(cluster: Cluster, busy: ArrayLike, nodes: ArrayLike, hbm_Bps: ArrayLike = 0.0) -> np.ndarray:
    """IT power of ``nodes`` nodes: their GPUs, the rest of each node, and the switch ports they use."""
    endpoint = cluster.scale_out.endpoint_power
    ports = cluster.switch_ports_per_nic(nodes) / 3  # endpoint_power is three ports
    network = cluster.system.scale_out.nics_per_node.value * (endpoint.value if endpoint else 0.0) * ports
    return np.asarray(nodes, dtype=float) * (node_power_W(cluster, busy, hbm_Bps) + network)


def network_capex_usd(cluster: Cluster, nodes: ArrayLike) -> np.ndarray:
    """Capital cost of the switch ports (with optics) ``nodes`` nodes' NICs use; NaN where the
    scale-out record states no ``port_cost``."""
    cost = cluster.scale_out.port_cost
    nics = np.asarray(nodes, dtype=float) * cluster.system.scale_out.nics_per_node.value
    return nics * cluster.switch_ports_per_nic(nodes) * (cost.value if cost else np.nan)


def energy_costs(
    it_power: ArrayLike,
    seconds: ArrayLike,
    gpus: ArrayLike,
    pue: ArrayLike = 1.0,
    carbon_g_per_kWh: ArrayLike = 0.0,
    price_per_gpu_hour: ArrayLike = 0.0,
) -> dict[str, np.ndarray]:
    """Facility energy (J and MWh), carbon (t CO2) and cost (USD) of running ``seconds``; carbon and
    cost are 0 where no intensity or price is given, even for a job that never ends (``seconds``
    infinite)."""
    it_energy = np.asarray(it_power, dtype=float) * np.asarray(seconds, dtype=float)
    facility = it_energy * np.asarray(pue, dtype=float)
    kwh = facility / J_PER_KWH
    carbon, price = (np.asarray(v, dtype=float) for v in (carbon_g_per_kWh, price_per_gpu_hour))
    gpu_hours = np.asarray(gpus, dtype=float) * np.asarray(seconds, dtype=float) / 3600
    with np.errstate(invalid="ignore"):  # 0 x inf, replaced
        return {
            "energy_J": facility,
            "energy_MWh": kwh / 1e3,
            "co2_t": np.where(carbon > 0, kwh * carbon / 1e6, 0.0),
            "cost_usd": np.where(price > 0, gpu_hours * price, 0.0),
        }
