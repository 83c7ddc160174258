"""The sections of a GPU record beyond its datasheet numbers: one SM's resident limits, the GEMM
library's tiles, and how its HBM and DeepEP's kernels behave when communication runs beside compute
(:class:`~commodel.hardware.schema.GPU`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import StringConstraints, field_validator, model_validator

from commodel.records import ByteSize, Count, Duration, Fraction, Sourced, Strict


class Multiprocessor(Strict):
    """What one SM (CU on AMD) can hold at once, as the occupancy calculator counts it: resident
    ``threads``, ``blocks`` (work-groups), ``shared_memory`` (LDS on AMD) and 32-bit ``registers``;
    and ``memory_latency``, how long a load from HBM takes to return (what resident blocks hide)."""

    threads: Count
    blocks: Count
    shared_memory: ByteSize
    registers: Count
    memory_latency: Duration


#: The most HBM bytes a collective can move per byte it sends or receives: the byte read where it
#: starts, written into and read out of a staging FIFO, and written where it lands.
MAX_HBM_PER_WIRE_BYTE = 4.0


class MemoryContention(Strict):
    """How a GPU's HBM serves a collective running beside compute
    (:mod:`commodel.overlap.interference`): ``hbm_per_wire_byte``, the HBM bytes a collective moves
    per byte it sends or receives (its CTAs read what they send and write what they receive through
    the library's staging FIFOs: 1 to 1.5; NCCL's maintainer counts a 300 GB/s busbw, 600 GB/s sent
    and received, as 2-3x that in memory bandwidth, NVIDIA/nccl#1428), and ``load_ceiling``, the HBM
    load beyond which memory latency stops rising (the controllers' queues are full and more demand
    only divides the bandwidth; latency at most ``1 / (1 - R)``). Both calibrated on measurement
    ``nv1428-a100-gemm`` (A100) and taken for every GPU that states none; ``commodel calibrate`` can
    fit them to a user's runs inside their ranges."""

    hbm_per_wire_byte: Sourced = Sourced(
        value=1.5,
        range=(1.0, 1.5),
        source="calibrated: nv1428-a100-gemm, at the top of the range its derivation allows (the row asks for more)",
    )
    load_ceiling: Fraction = Fraction(
        value=0.6,
        range=(0.5, 0.8),
        source=(
            "calibrated: nv1428-a100-gemm, which bounds it from below only (its error is least for any ceiling "
            "at or above its two sides' summed load, 0.59); at least 0.5 for a co-running GEMM to slow a "
            "latency-bound send/recv up to 2x (NVIDIA/nccl#1433)"
        ),
    )

    @model_validator(mode="after")
    def _physical(self) -> MemoryContention:
        """Each value, and its range's top (a range holds its value), within what can be true."""
        per_wire, ceiling = (top(n) for n in (self.hbm_per_wire_byte, self.load_ceiling))
        if per_wire > MAX_HBM_PER_WIRE_BYTE:
            raise ValueError(
                f"hbm_per_wire_byte {per_wire:g} (with its range) must be at most {MAX_HBM_PER_WIRE_BYTE:g}: "
                "a byte on the wire is read, staged through a FIFO and written, no more"
            )
        if ceiling >= 1:
            raise ValueError(
                f"load_ceiling {ceiling:g} (with its range) must be below 1: the latency it caps, 1 / (1 - R), "
                "must stay finite"
            )
        return self


def top(number: Sourced) -> float:
    """The largest value ``number`` may take: its range's top, else its value."""
    return number.range[1] if number.range else number.value


class ExpertDispatch(Strict):
    """What DeepEP's kernels sustain on a GPU (:mod:`commodel.workloads.moe.dispatch`):
    ``nvlink_share``, the share of the GPU's achievable NVLink rate its high-throughput kernels
    reach (their SMs copy tokens through per-channel ring buffers with head and tail flags,
    flow-controlled, where the network leg is the NIC's own DMA), and ``low_latency_call``, what a
    low-latency call takes beyond its bytes and its put (a send phase, each token cast to FP8 or each
    expert output weighted, and a receive phase that waits for every peer's count signal). Both
    calibrated on DeepEP's H800 table and taken for every GPU that states none; ``commodel
    calibrate`` can fit them to a user's runs inside their ranges."""

    nvlink_share: Fraction = Fraction(
        value=0.84,
        source=(
            "calibrated: measurement deepep-ht-ep8-dispatch (153 GB/s of received tokens inside one H800 node, "
            "where the forwarded copies at the full 160 GB/s would give 182 GB/s)"
        ),
    )
    low_latency_call: Duration = Duration(
        value=35.6e-6,
        range=(26e-6, 73e-6),
        source=(
            "calibrated: measurement deepep-ll-ep8-dispatch (77 us, of which the model's NVLink bytes take 41.4 us); "
            "the range is the residual of every other row of DeepEP's table, 8 to 256 GPUs, dispatch and combine"
        ),
    )


class GemmTiles(Strict):
    """The output tiles (rows x cols) a GEMM library's large-GEMM kernels come in on a GPU, with the
    source that lists them: the library runs each GEMM at the one whose waves take least time."""

    value: tuple[tuple[int, int], ...]
    source: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]

    @model_validator(mode="before")
    @classmethod
    def _table(cls, data: object) -> object:
        if not isinstance(data, dict):
            raise ValueError('expected a table {value = [[rows, cols], ...], source = "..."}')
        return data

    @field_validator("value")
    @classmethod
    def _tiles(cls, v: tuple[tuple[int, int], ...]) -> tuple[tuple[int, int], ...]:
        if not v:
            raise ValueError("needs at least one tile [rows, cols]")
        if any(side < 16 or side % 16 for tile in v for side in tile):
            raise ValueError(f"tile sides must be positive multiples of 16, got {[list(t) for t in v]}")
        return v
