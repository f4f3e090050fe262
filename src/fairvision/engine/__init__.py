"""Parallel execution and resumable results.

:func:`imap` / :func:`map_items` run a picklable function over items on one of
two engines (:mod:`fairvision.engine.dispatch`): ``local``, a process pool on
this machine (:mod:`fairvision.engine.pool`: chunking, ordered or unordered
results, a progress callback, per-item failures captured as :class:`Failure`
values, and a worker initialiser that builds a model once per process), or
``ray``, the same contract on Ray actors that each process keeps and reuses
across calls, with batches sized by work (:mod:`fairvision.engine.ray_engine`, an
optional extra; :func:`fairvision.engine.ray_engine.close_pools` ends them).
:mod:`fairvision.engine.cache` makes the content keys and code signatures under
which the results store (:mod:`fairvision.io.store`) keeps finished items, so an
interrupted batch run resumes where it stopped.
"""

from fairvision.engine.cache import content_key, file_signature, source_signature
from fairvision.engine.dispatch import ENGINES, ExecutionSettings, check_engine, imap, map_items
from fairvision.engine.pool import Failure, Outcome, default_workers, limit_threads

__all__ = ["ENGINES", "ExecutionSettings", "Failure", "Outcome", "check_engine", "content_key", "default_workers",
           "file_signature", "imap", "limit_threads", "map_items", "source_signature"]
