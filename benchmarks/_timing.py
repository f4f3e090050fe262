"""Shared timing helpers for the benchmarks: threads pinned, CPU and wall time, interleaved runs, medians.

The machines these benchmarks run on are often shared, so

- every side runs with the same thread count (``pinned``: BLAS and OpenMP through threadpoolctl, OpenCV
  through ``cv2.setNumThreads``), entered AFTER the libraries are imported (threadpoolctl only sees
  libraries already loaded);
- CPU time (``time.process_time``: this process, all its threads) is reported next to wall time; on a
  loaded machine wall time mostly measures the other processes;
- the candidates run interleaved (A, B, A, B, ...), so a burst of load hits both, and the median of the
  runs is reported;
- ``load_note`` prints the load average, so that a reader knows the absolute times came from a loaded
  machine.
"""

from __future__ import annotations

import contextlib
import os
import time
import tracemalloc
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Timing:
    """CPU and wall seconds of every run of one candidate, and its last result."""

    cpu: list = field(default_factory=list)
    wall: list = field(default_factory=list)
    result: object = None

    @property
    def cpu_median(self) -> float:
        return _median(self.cpu)

    @property
    def wall_median(self) -> float:
        return _median(self.wall)

    def line(self, unit: str = "s") -> str:
        f = 1000.0 if unit == "ms" else 1.0
        return (f"CPU {self.cpu_median * f:.3f} {unit}, wall {self.wall_median * f:.3f} {unit} "
                f"(median of {len(self.cpu)}; CPU min {min(self.cpu) * f:.3f}, max {max(self.cpu) * f:.3f})")


def _median(xs) -> float:
    s = sorted(xs)
    m = len(s) // 2
    return s[m] if len(s) % 2 else 0.5 * (s[m - 1] + s[m])


@contextlib.contextmanager
def pinned(threads: int = 1):
    """BLAS / OpenMP (threadpoolctl) and OpenCV limited to ``threads`` for the duration."""
    from threadpoolctl import threadpool_limits

    cv2 = None
    try:
        import cv2
    except ImportError:
        pass
    old = cv2.getNumThreads() if cv2 is not None else None
    with threadpool_limits(limits=threads):
        if cv2 is not None:
            cv2.setNumThreads(threads)
        try:
            yield
        finally:
            if cv2 is not None:
                cv2.setNumThreads(old)


def interleaved(candidates: dict[str, Callable[[], object]], repeats: int) -> dict[str, Timing]:
    """Run every candidate ``repeats`` times, interleaved (A, B, A, B, ...); CPU and wall time of each run."""
    out = {name: Timing() for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            c, w = time.process_time(), time.perf_counter()
            res = fn()
            out[name].wall.append(time.perf_counter() - w)
            out[name].cpu.append(time.process_time() - c)
            out[name].result = res
    return out


def peak_bytes(fn: Callable[[], object]) -> int:
    """Peak memory allocated through Python and numpy (tracemalloc) while ``fn`` runs, above what was
    allocated before it (BLAS work buffers allocated by the library itself are not seen)."""
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def load_note() -> str:
    """The machine's load, to print next to absolute times."""
    one, five, _ = os.getloadavg()
    return (f"load average {one:.1f} (5 min {five:.1f}) on {os.cpu_count()} cores: absolute times come from a "
            f"{'loaded' if one > 0.5 * (os.cpu_count() or 1) else 'quiet'} machine; compare the ratios")


def subjects(n_rows: int, per_subject: int = 4, seed: int = 0) -> tuple[np.random.Generator, int, np.ndarray]:
    """The synthetic cohort several benchmarks draw: a seeded generator, the number of subjects
    (``n_rows // per_subject``) and the subject code of every row (``per_subject`` consecutive rows a subject).
    Draw one value a subject with ``rng.normal(..., n_subjects)[codes]``."""
    rng = np.random.default_rng(seed)
    n_subjects = n_rows // per_subject
    return rng, n_subjects, np.repeat(np.arange(n_subjects), per_subject)
