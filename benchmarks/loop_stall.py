"""How long the event loop stalls while an AsyncStore opens against a server that never
answers (a dead proxy, a filtering firewall): the figure behind
tests/store/test_aio_open_close.py, which asserts the mechanism (the connect runs off
the loop's thread) rather than a time.

    python -m benchmarks.loop_stall [--runs N]

A task asks the loop for a 1 ms sleep over and over and records how late each wake-up
is; each run opens `AsyncStore` on a port that accepts the connection and then says
nothing, with a 1 s retry budget. Prints the worst and the p99 stall of each run in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import socket
import time

from hermes_store import aio
from hermes_store.errors import DatabaseUnavailable
from hermes_store.runtime.retry import RetryPolicy


async def _one_open(port: int) -> list[float]:
    stalls: list[float] = []
    stop = asyncio.Event()

    async def watch() -> None:
        while not stop.is_set():
            asked = time.perf_counter()
            await asyncio.sleep(0.001)
            stalls.append(time.perf_counter() - asked - 0.001)

    gc.collect()
    task = asyncio.ensure_future(watch())
    await asyncio.sleep(0.01)
    url = f"postgresql://nobody@127.0.0.1:{port}/state?connect_timeout=2"
    try:
        await aio.AsyncStore.open(url, retry=RetryPolicy(server_budget_seconds=1.0))
    except (DatabaseUnavailable, Exception):  # noqa: BLE001 (the open fails, as it must)
        pass
    stop.set()
    await task
    return stalls


def run(runs: int = 5) -> list[dict[str, float]]:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    rows = []
    try:
        port = int(listener.getsockname()[1])
        for _ in range(runs):
            stalls = sorted(asyncio.run(_one_open(port)))
            p99 = stalls[min(len(stalls) - 1, int(len(stalls) * 0.99))]
            rows.append({"worst_ms": stalls[-1] * 1000, "p99_ms": p99 * 1000})
    finally:
        listener.close()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for row in run(args.runs):
        print(json.dumps({k: round(v, 3) for k, v in row.items()}))


if __name__ == "__main__":
    main()
