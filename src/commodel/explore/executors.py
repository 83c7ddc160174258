"""Where chunks are evaluated: in this process, or on a Dask cluster (a LocalCluster by default).

Both run the same top-level function on the same chunk indices, so their results are identical;
the driver writes every finished chunk to disk, in whatever order chunks finish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pandas as pd

from commodel.errors import CommodelError, unknown

EXECUTORS = ("local", "dask")

#: Seconds to wait for a Dask scheduler to answer before giving up.
CONNECT_TIMEOUT_S = 5
ChunkFunction = Callable[[str, int], pd.DataFrame]


def run_local(fn: ChunkFunction, spec_json: str, indices: list[int]) -> Iterator[tuple[int, pd.DataFrame]]:
    for index in indices:
        yield index, fn(spec_json, index)


@contextmanager
def dask_client(scheduler: str | None):
    """A client for ``scheduler`` (an address), or for a LocalCluster started (and stopped) here."""
    from dask.distributed import Client, LocalCluster  # optional and slow: Dask only with --executor dask

    if scheduler:
        try:
            client = Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except ValueError as exc:  # not an address: distributed says why
            raise CommodelError(f"--scheduler {scheduler}: not a Dask scheduler address ({exc})") from None
        except (OSError, TimeoutError) as exc:
            raise CommodelError(
                f"no Dask scheduler answered at {scheduler} within {CONNECT_TIMEOUT_S} s ({type(exc).__name__})"
            ) from None
        with client:
            yield client
    else:
        with (
            LocalCluster(
                n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster) as client,
        ):
            yield client


def run_dask(
    fn: ChunkFunction, spec_json: str, indices: list[int], scheduler: str | None
) -> Iterator[tuple[int, pd.DataFrame]]:
    from dask.distributed import as_completed  # optional and slow: Dask only with --executor dask

    with dask_client(scheduler) as client:
        futures = {client.submit(fn, spec_json, i, pure=False): i for i in indices}
        for future in as_completed(futures):
            yield futures[future], future.result()


def execute(
    executor: str, fn: ChunkFunction, spec_json: str, indices: list[int], scheduler: str | None = None
) -> Iterator[tuple[int, pd.DataFrame]]:
    """``(chunk index, result)`` for every index, from the chosen executor."""
    if executor == "local":
        return run_local(fn, spec_json, indices)
    if executor == "dask":
        return run_dask(fn, spec_json, indices, scheduler)
    raise unknown("executor", executor, EXECUTORS)
