"""Parallel execution and resumable results.

:func:`imap` / :func:`map_items` run a picklable function over items on one of
two engines (:mod:`fairvision.engine.dispatch`): ``local``, a process pool on
this machine (:mod:`fairvision.engine.pool`: chunking, ordered or unordered
results, a progress callback, per-item failures captured as :class:`Failure`
values, and a worker initialiser that builds a model once per process), or
``ray``, the same contract on Ray actors that each process keeps and reuses
across calls, with batches sized by work (:mod:`fairvision.engine.ray_engine`, an
optional extra; :func:`fairvision.engine.ray_engine.close_pools` ends them). :class:`SidePool`
(:mod:`fairvision.engine.side_pool`) takes items that turn up while a pool runs (second chances), one by one;
:class:`WarmPool` starts workers before their items are known and :class:`StartedMap`
(:mod:`fairvision.engine.background`) runs a map in a helper thread, read later.
:mod:`fairvision.engine.cache` makes the content keys and code signatures under
which the results store (:mod:`fairvision.io.store`) keeps finished items, so an
interrupted batch run resumes where it stopped.
"""

from fairvision.engine.background import StartedMap
from fairvision.engine.cache import content_key, file_signature, source_signature
from fairvision.engine.dispatch import ENGINES, ExecutionSettings, check_engine, imap, map_items
from fairvision.engine.pool import Failure, Outcome, WarmPool, default_workers, limit_threads
from fairvision.engine.side_pool import SidePool

__all__ = ["ENGINES", "ExecutionSettings", "Failure", "Outcome", "SidePool", "StartedMap", "WarmPool", "check_engine",
           "content_key", "default_workers", "file_signature", "imap", "limit_threads", "map_items",
           "source_signature"]
