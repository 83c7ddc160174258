"""Power, energy, carbon and cost of running a training step on a cluster.

- GPU power: ``P_gpu = P_idle + (TDP - P_idle) x busy``, with ``busy`` the share of the step the GPU
  computes (communication waits and pipeline bubbles draw about idle power). Idle and TDP come from
  the GPU record.
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

from commodel.hardware.cluster import Cluster

J_PER_KWH = 3.6e6

#: Share of its rated power the rest of a node draws under a training load. Calibrated on measurement
#: h100-node-power (8.4 kW for an 8 x H100 node in training, rated 10.2 kW): with the GPUs at the
#: power the model gives them for a single-node training job (647 W), the rest draws 0.70 x 4.6 kW.
NODE_OTHER_LOAD = 0.70


def gpu_power_W(cluster: Cluster, busy: ArrayLike) -> np.ndarray:
    """Average power of one GPU that computes a ``busy`` share of the time."""
    gpu = cluster.gpu
    idle, tdp = gpu.idle_power.value, gpu.tdp.value
    return idle + (tdp - idle) * np.clip(np.asarray(busy, dtype=float), 0.0, 1.0)


def node_power_W(cluster: Cluster, busy: ArrayLike) -> np.ndarray:
    """Power of one node whose GPUs compute a ``busy`` share of the time (network switches excluded)."""
    other = NODE_OTHER_LOAD * cluster.system.node_other_power.value
    return cluster.gpus_per_node * gpu_power_W(cluster, busy) + other


def it_power_W(cluster: Cluster, busy: ArrayLike, nodes: ArrayLike) -> np.ndarray:
    """IT power of ``nodes`` nodes: their GPUs, the rest of each node, and the switch ports they use."""
    endpoint = cluster.scale_out.endpoint_power
    ports = cluster.switch_ports_per_nic(nodes) / 3  # endpoint_power is three ports
    network = cluster.system.scale_out.nics_per_node.value * (endpoint.value if endpoint else 0.0) * ports
    return np.asarray(nodes, dtype=float) * (node_power_W(cluster, busy) + network)


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
    """Facility energy (J and MWh), carbon (t CO2) and cost (USD) of running ``seconds``."""
    it_energy = np.asarray(it_power, dtype=float) * np.asarray(seconds, dtype=float)
    facility = it_energy * np.asarray(pue, dtype=float)
    kwh = facility / J_PER_KWH
    return {
        "energy_J": facility,
        "energy_MWh": kwh / 1e3,
        "co2_t": kwh * np.asarray(carbon_g_per_kWh, dtype=float) / 1e6,
        "cost_usd": np.asarray(gpus, dtype=float)
        * np.asarray(seconds, dtype=float)
        / 3600
        * np.asarray(price_per_gpu_hour, dtype=float),
    }
