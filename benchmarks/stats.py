"""Timings, percentiles and the side-by-side row every benchmark table prints."""

from __future__ import annotations

import gc
import os
import statistics
import time
from collections.abc import Callable
from typing import Any


def load_average() -> float:
    """The machine's 1-minute load average now (other processes share the cores)."""
    return os.getloadavg()[0]


def timings(fn: Callable[[int], Any], n: int, warmup: int = 3) -> list[float]:
    """`n` timings of `fn(i)` in seconds, after `warmup` calls (given negative i) and a
    garbage collection."""
    for i in range(warmup):
        fn(-1 - i)
    gc.collect()
    samples = []
    for i in range(n):
        started = time.perf_counter()
        fn(i)
        samples.append(time.perf_counter() - started)
    return samples


def percentiles(samples: list[float]) -> tuple[float, float]:
    """p50 and p95 of durations in seconds, in milliseconds."""
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return p50 * 1000, p95 * 1000


def comparison(
    operation: str, base: str, base_samples: list[float], other: str, other_samples: list[float]
) -> dict[str, Any]:
    """One table row: p50/p95 of both sides (`<side>_p50_ms` ...) and other/base ratios."""
    b50, b95 = percentiles(base_samples)
    o50, o95 = percentiles(other_samples)
    return {
        "operation": operation,
        "n": len(base_samples),
        f"{base}_p50_ms": b50,
        f"{base}_p95_ms": b95,
        f"{other}_p50_ms": o50,
        f"{other}_p95_ms": o95,
        "ratio_p50": o50 / b50 if b50 else float("inf"),
        "ratio_p95": o95 / b95 if b95 else float("inf"),
        "load": load_average(),
    }
