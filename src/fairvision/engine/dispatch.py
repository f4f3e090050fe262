"""One execution interface, two engines: ``local`` (the process pool) and ``ray`` (Ray actors kept per process).

:func:`imap` takes the options of :func:`fairvision.engine.pool.imap` plus
``engine`` and ``address`` and yields the same :class:`Outcome` values from
either engine: failures as values, ordered or unordered, the progress callback
per outcome, the initialiser once per worker (process or Ray actor; Ray's actors,
with what their initialiser built, are reused by later calls of the same process).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Protocol

from fairvision.engine import pool, ray_engine
from fairvision.engine.pool import Outcome
from fairvision.errors import ParameterError

#: Engine names accepted by :func:`imap`.
ENGINES = ("local", "ray")


class ExecutionSettings(Protocol):
    """Where per-item work runs, as a settings object carries it: a library function below the audits that
    runs per-image work takes any object with these attributes (the audits pass their
    :class:`~fairvision.audits.settings.AuditSettings`)."""

    engine: str
    address: str | None
    workers: int


def check_engine(engine: str, address: str | None = None) -> str:
    """The engine name, lower-cased, or a ParameterError (an unknown name, or an address without ``ray``)."""
    name = str(engine or "local").lower()
    if name not in ENGINES:
        raise ParameterError("engine", f"must be one of {', '.join(ENGINES)}, not {engine!r}")
    if address and name != "ray":
        raise ParameterError("address", f"{address!r} applies only to the ray engine, not to {name!r}")
    return name


def imap(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    engine: str = "local",
    address: str | None = None,
    **options,
) -> Iterator[Outcome]:
    """Apply ``fn`` to every item on the chosen engine, yielding an :class:`Outcome` per item.

    Parameters
    ----------
    fn, items
        As :func:`fairvision.engine.pool.imap`.
    engine : {"local", "ray"}
        ``local`` (default): the process pool of this machine, no set-up.
        ``ray``: Ray actors kept per process, batches sized by work
        (:func:`fairvision.engine.ray_engine.imap`); needs the ``ray`` extra.
    address : str, optional
        Ray cluster address (``ray`` only); None starts a local Ray instance
        (or uses ``RAY_ADDRESS`` when set).
    **options
        ``workers``, ``chunksize``, ``ordered``, ``initializer``, ``initargs``,
        ``progress``, ``threads_per_worker`` for both engines; the pool-only
        ``start_method``, ``preload``, ``max_in_flight``, ``in_process`` are
        ignored by ``ray``.

    Yields
    ------
    Outcome
    """
    if check_engine(engine, address) == "ray":
        return ray_engine.imap(fn, items, address=address, **options)
    return pool.imap(fn, items, **options)


def map_items(fn: Callable[[Any], Any], items: Iterable[Any], **kw) -> list[Outcome]:
    """:func:`imap` collected into a list, in input order (see :func:`imap` for options)."""
    kw.setdefault("ordered", True)
    out = list(imap(fn, items, **kw))
    if not kw["ordered"]:
        out.sort(key=lambda o: o.index)
    return out
