"""Parallel execution and resumable results.

:func:`imap` / :func:`map_items` run a picklable function over items in a
local process pool with chunking, ordered or unordered results, a progress
callback, per-item failures captured as :class:`Failure` values, and a worker
initialiser that builds a model once per process. :class:`ResultCache`
(:mod:`fairvision.engine.cache`) keeps one JSON record per finished item under
a content key, so an interrupted batch run resumes where it stopped.
"""

from fairvision.engine.cache import ResultCache, content_key, file_signature, source_signature
from fairvision.engine.pool import Failure, Outcome, default_workers, imap, limit_threads, map_items

__all__ = ["Failure", "Outcome", "ResultCache", "content_key", "default_workers", "file_signature", "imap",
           "limit_threads", "map_items", "source_signature"]
