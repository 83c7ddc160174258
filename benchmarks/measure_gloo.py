"""Measure Gloo's host path: what one Gloo TCP pair carries between two processes, against a raw TCP
stream, on this machine's loopback (the cross-vendor model's host stream, ``comm/cross_vendor.py``).

Gloo moves CPU tensors only: PyTorch's ``ProcessGroupGloo`` sends and receives through one TCP
socket per pair of processes, and reduces on the host. Loopback leaves the NIC out, so this measures
what the host's own work (the kernel's socket copies, Gloo's framing and completion) allows one
stream, the bound a faster NIC cannot lift.

Needs PyTorch with Gloo (not a commodel dependency): ``pip install torch``, then
``python benchmarks/measure_gloo.py``. Prints, per message size, the one-way rate of a Gloo
send/recv ping-pong, of a 2-rank Gloo allreduce (algorithm bandwidth), and of a raw socket stream.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

SIZES_MIB = (4, 16, 64, 256)
REPEATS = 5


def _gloo_worker(rank: int, port: int, results: dict) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    for mib in SIZES_MIB:
        x = torch.ones(mib * 2**20 // 4, dtype=torch.float32)
        best_p2p = best_ar = float("inf")
        for _ in range(REPEATS):
            dist.barrier()
            start = time.perf_counter()
            if rank == 0:
                dist.send(x, 1)
                dist.recv(x, 1)
            else:
                dist.recv(x, 0)
                dist.send(x, 0)
            best_p2p = min(best_p2p, (time.perf_counter() - start) / 2)
            dist.barrier()
            start = time.perf_counter()
            dist.all_reduce(x)
            best_ar = min(best_ar, time.perf_counter() - start)
        if rank == 0:
            results[mib] = (mib * 2**20 / best_p2p, mib * 2**20 / best_ar)
    dist.destroy_process_group()


def gloo_rates() -> dict[int, tuple[float, float]]:
    """{MiB: (send/recv bytes/s one way, allreduce algorithm bytes/s)} of two Gloo processes."""
    import torch.multiprocessing as mp

    port = _free_port()
    manager = mp.Manager()
    results = manager.dict()
    mp.spawn(_gloo_worker, args=(port, results), nprocs=2, join=True)
    return dict(results)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def socket_rate(nbytes: int) -> float:
    """Bytes/s of one raw TCP stream on loopback (``sendall`` into ``recv_into``), best of
    :data:`REPEATS`."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    payload = memoryview(bytearray(nbytes))

    def sink() -> None:
        conn, _ = server.accept()
        buffer = memoryview(bytearray(nbytes))
        for _ in range(REPEATS):
            got = 0
            while got < nbytes:
                got += conn.recv_into(buffer[got:])
            conn.sendall(b"k")
        conn.close()

    thread = threading.Thread(target=sink)
    thread.start()
    client = socket.create_connection(server.getsockname())
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        client.sendall(payload)
        client.recv(1)
        best = min(best, time.perf_counter() - start)
    client.close()
    thread.join()
    server.close()
    return nbytes / best


def main() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        sys.exit("measure_gloo needs PyTorch with Gloo: pip install torch")
    print(f"{os.cpu_count()} CPUs; one Gloo pair and one raw TCP stream on loopback, best of {REPEATS}")
    print(f"{'MiB':>6} {'gloo send/recv GB/s':>20} {'gloo allreduce GB/s':>20} {'raw socket GB/s':>16}")
    gloo = gloo_rates()
    for mib in SIZES_MIB:
        p2p, ar = gloo[mib]
        print(f"{mib:>6} {p2p / 1e9:>20.2f} {ar / 1e9:>20.2f} {socket_rate(mib * 2**20) / 1e9:>16.2f}")


if __name__ == "__main__":
    main()
