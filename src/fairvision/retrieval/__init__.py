"""Deprecated: the retrieval facade, kept as aliases because the README documented it.

The pieces live beside the rest of fairvision now:

- readers: :func:`fairvision.io.retrieval.read_results`,
  :func:`fairvision.io.retrieval.read_items`,
  :func:`fairvision.io.embeddings.read_embeddings`;
- k-NN search: :func:`fairvision.stats.knn.knn_search` (docs/METHODS.md §8.4);
- parity test of a results table against an item table:
  :func:`fairvision.audits.retrieval.parity_from_results` (the old
  ``fairvision.retrieval.parity_test``; the array-level test is
  :func:`fairvision.stats.parity.parity_test`, docs/METHODS.md §8.1, §8.2);
- power analysis: :mod:`fairvision.stats.power` (docs/METHODS.md §8.3).

Every name below still works and emits a :class:`DeprecationWarning` naming
its new home.
"""

from __future__ import annotations

import importlib
import warnings

# old name -> (module, name there)
_MOVED = {
    "read_results": ("fairvision.io.retrieval", "read_results"),
    "read_items": ("fairvision.io.retrieval", "read_items"),
    "read_embeddings": ("fairvision.io.embeddings", "read_embeddings"),
    "knn_search": ("fairvision.stats.knn", "knn_search"),
    "parity_test": ("fairvision.audits.retrieval", "parity_from_results"),
    "ParityResult": ("fairvision.stats.parity", "ParityResult"),
    "power": ("fairvision.stats.power", "power"),
    "power_all": ("fairvision.stats.power", "power_all"),
    "power_grid": ("fairvision.stats.power", "power_grid"),
    "detectable_nrr": ("fairvision.stats.power", "detectable_nrr"),
    "detectable_curve": ("fairvision.stats.power", "detectable_curve"),
    "catalog_adequacy": ("fairvision.stats.power", "catalog_adequacy"),
    "PAPER_P_Z": ("fairvision.stats.power", "PAPER_P_Z"),
}

__all__ = sorted(_MOVED)


def __getattr__(name: str):
    try:
        module, new = _MOVED[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    warnings.warn(f"fairvision.retrieval.{name} is deprecated; use {module}.{new}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), new)


def __dir__():
    return sorted(set(globals()) | set(_MOVED))
