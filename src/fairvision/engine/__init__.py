"""Parallel execution: map a function over many items with worker processes.

:func:`imap` / :func:`map_items` run a picklable function over items in a
local process pool with chunking, ordered or unordered results, a progress
callback, per-item failures captured as :class:`Failure` values, and a worker
initialiser that builds a model once per process.
"""

from fairvision.engine.pool import Failure, Outcome, default_workers, imap, limit_threads, map_items

__all__ = ["Failure", "Outcome", "default_workers", "imap", "limit_threads", "map_items"]
