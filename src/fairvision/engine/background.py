"""A map started now and read later: the pool works while this thread does something else.

:class:`StartedMap` reads a map (:func:`fairvision.engine.imap`) in a helper thread, which sends chunks to the
workers and queues each :class:`~fairvision.engine.pool.Outcome` as it arrives; iterating the map hands them on here, in
the caller's thread. A command whose items are known before its slow set-up (the skin measurement knows the
images of a folder before it has imported pandas to build its table) starts the map first, so the workers
measure while the set-up runs.

Give it a map on workers forked already (:meth:`fairvision.engine.WarmPool.imap`): a worker forked from the
helper thread while the caller's thread is in the middle of an import would inherit that module half-imported,
with its import lock held by a thread the child does not have.
"""

from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

from fairvision.engine.pool import Outcome

_END = object()


class _Raised:
    def __init__(self, exc: BaseException):
        self.exc = exc


class StartedMap:
    """A map's outcomes (the iterator of :func:`fairvision.engine.imap` or
    :meth:`fairvision.engine.WarmPool.imap`), read at once by a helper thread.

    Parameters
    ----------
    outcomes : iterator of Outcome
        The map, not started yet (a generator: it starts in the helper thread, which alone reads it).
    route : callable, optional
        Called in the helper thread with each outcome as it arrives; an outcome for which it returns True is
        taken care of there (handed on to other work at once) and not queued.

    Iterating yields the outcomes in the order they arrived (``ordered`` as given to ``imap``); an exception of
    the map is raised there. :meth:`close` stops the map (the chunks running finish) and waits for the thread.
    """

    def __init__(self, outcomes: Iterator[Outcome], *, route: Callable[[Outcome], bool] | None = None):
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._route = route
        self._thread = threading.Thread(target=self._run, args=(outcomes,), daemon=True, name="fairvision-started-map")
        self._thread.start()

    def _run(self, outcomes: Iterator[Outcome]) -> None:
        try:
            for outcome in outcomes:
                if self._route is None or not self._route(outcome):
                    self._queue.put(outcome)
                if self._stop.is_set():
                    break
        except BaseException as exc:  # noqa: BLE001 - handed to the reading thread
            self._queue.put(_Raised(exc))
        finally:
            close = getattr(outcomes, "close", None)
            if close is not None:
                close()  # a generator: ends its pool
            self._queue.put(_END)

    def __iter__(self) -> Iterator[Outcome]:
        while True:
            item = self._queue.get()
            if item is _END:
                self._queue.put(_END)  # a second iteration ends at once
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item

    def close(self) -> None:
        """Stop the map (items not started are dropped) and wait for its thread."""
        self._stop.set()
        self._thread.join()

    def __enter__(self) -> StartedMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
