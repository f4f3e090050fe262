"""A side pool: worker processes for items that turn up while other work runs.

:func:`fairvision.engine.pool.imap` needs its items up front. Some work only shows itself on the way: the skin
measurement's second chances (images the face mesh missed, measured again with the face detector and dlib's
68 landmarks, whose model takes 0.4 s of CPU to load) are known only when the main pool returns them. A
:class:`SidePool` takes such items one by one while the main pool is still running: its workers are forked on
the first :meth:`~SidePool.submit` (so a run that needs none starts none), each builds what it needs once, and
the results come back through :meth:`~SidePool.ready` (never waits) and :meth:`~SidePool.drain` (waits for all).
:meth:`~SidePool.start` forks the workers at once instead (they build nothing before their first item), for a
caller that submits from a helper thread: a worker forked from a helper thread while the main thread is in the
middle of an import would inherit that module half-imported, its import lock held. Submitting and reading may
happen in different threads.

The contract is :func:`~fairvision.engine.pool.imap`'s: one :class:`~fairvision.engine.pool.Outcome` per item
with the index it was submitted under, exceptions as :class:`~fairvision.engine.pool.Failure` values, workers
set up by :func:`~fairvision.engine.pool.start_worker` (quiet native stderr, native threads capped, the
initialiser), the same fork rule (``fork`` while this process has built no threaded model, else a fork server).
A worker that dies fails the items it held (``WorkerDied``); the rest go on in a fresh set of workers.
"""

from __future__ import annotations

import collections
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, Iterator, Sequence

from fairvision.engine.pool import Failure, Outcome, context_for, noop_task, one_line, run_chunk, start_worker

#: items sent to each worker ahead of its results (the rest wait here): enough that a worker never idles between
#: two polls of the caller, few enough that a dying worker fails few of them
IN_FLIGHT_PER_WORKER = 8

_DIED = "worker process died or its initialiser failed"


class _Lane:
    """One executor of the side pool and the items it holds."""

    def __init__(self, executor: ProcessPoolExecutor, workers: int):
        self.executor, self.workers = executor, workers
        self.in_flight: dict = {}  # future -> index
        self.broken = False
        self.finished = 0


class SidePool:
    """Worker processes fed item by item while the caller does other work (see the module docstring).

    Parameters
    ----------
    fn : callable
        Picklable (a module-level function): ``fn(item)`` is each item's value.
    workers : int
        Worker processes started on the first :meth:`submit` (:meth:`widen` adds more).
    initializer, initargs
        Called once in each worker before its first item.
    threads_per_worker : int or None
        Native threads each worker may use (as :func:`fairvision.engine.pool.imap`).
    start_method : {"fork", "forkserver", "spawn"}, optional
        Default: ``fork`` while this process has built no threaded model, otherwise ``forkserver``.
    preload : sequence of str
        Modules for a fork server to import once.
    """

    def __init__(
        self,
        fn: Callable[[Any], Any],
        *,
        workers: int = 1,
        initializer: Callable[..., None] | None = None,
        initargs: tuple = (),
        threads_per_worker: int | None = 1,
        start_method: str | None = None,
        preload: Sequence[str] = (),
    ):
        self.fn, self.workers = fn, max(1, int(workers))
        self._setup = (threads_per_worker, initializer, initargs)
        self._start_method, self._preload = start_method, tuple(preload)
        self._queue: collections.deque = collections.deque()  # (index, item) not sent yet
        self._lanes: list[_Lane] = []
        self._done: list[Outcome] = []
        self._fruitless = 0  # lanes in a row that broke before finishing an item
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ feeding

    def start(self) -> None:
        """Fork the workers now (with ``fork``; a fork server or ``spawn`` starts the first one)."""
        with self._lock:
            if not self._lanes:
                self._open(self.workers)
                self._lanes[-1].executor.submit(noop_task)

    def submit(self, index: int, item: Any) -> None:
        """Queue ``item`` (its outcome carries ``index``); the workers start on the first call."""
        with self._lock:
            self._queue.append((index, item))
            if not any(not lane.broken for lane in self._lanes):
                self._open(self.workers)
            self._top_up()

    def widen(self, workers: int) -> None:
        """Add ``workers`` more worker processes (each builds its models anew), e.g. for a long backlog once
        the caller's own work is done. Nothing happens before the first :meth:`submit`."""
        with self._lock:
            if workers >= 1 and self._lanes:
                self._open(int(workers))
                self._top_up()

    @property
    def backlog(self) -> int:
        """Items submitted whose outcome has not been handed back yet."""
        with self._lock:
            return len(self._queue) + sum(len(lane.in_flight) for lane in self._lanes) + len(self._done)

    def _open(self, workers: int) -> None:
        ctx = context_for(self._start_method, self._preload)
        executor = ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=start_worker,
                                       initargs=self._setup)
        self._lanes.append(_Lane(executor, workers))

    def _top_up(self) -> None:
        for lane in self._lanes:
            while self._queue and not lane.broken and len(lane.in_flight) < IN_FLIGHT_PER_WORKER * lane.workers:
                index, item = self._queue[0]
                try:
                    fut = lane.executor.submit(run_chunk, self.fn, [(index, item)])
                except BrokenProcessPool:
                    self._break(lane)
                    break
                self._queue.popleft()
                lane.in_flight[fut] = index

    def _break(self, lane: _Lane) -> None:
        """``lane`` broke: it is shut down and the queue goes on in fresh workers (twice in a row without a
        finished item: the queue fails instead, as the main pool gives up)."""
        if lane.broken:
            return
        lane.broken = True
        for index in lane.in_flight.values():  # every item it held: a broken executor fails them all
            self._done.append(Outcome(index, None, Failure(index, "WorkerDied", _DIED)))
        lane.in_flight.clear()
        lane.executor.shutdown(wait=False, cancel_futures=True)
        self._fruitless = self._fruitless + 1 if lane.finished == 0 else 0
        if any(not other.broken for other in self._lanes):
            return
        if self._fruitless >= 2:
            while self._queue:
                index, _ = self._queue.popleft()
                self._done.append(Outcome(index, None, Failure(index, "WorkerDied", _DIED)))
        elif self._queue:
            self._open(lane.workers)

    # ------------------------------------------------------------------ results

    def _collect(self, futures) -> None:
        with self._lock:
            self._collect_locked(futures)

    def _collect_locked(self, futures) -> None:
        for lane in self._lanes:
            for fut in [f for f in futures if f in lane.in_flight]:
                index = lane.in_flight.pop(fut, None)
                if index is None:  # failed with its lane, which broke meanwhile (_break)
                    continue
                try:
                    (outcome,) = fut.result()
                    lane.finished += 1
                except BrokenProcessPool:
                    outcome = Outcome(index, None, Failure(index, "WorkerDied", _DIED))
                    self._break(lane)
                except Exception as exc:  # noqa: BLE001 - an unpicklable item or result: a failure value
                    outcome = Outcome(index, None, Failure(index, type(exc).__name__, one_line(exc)))
                self._done.append(outcome)
        self._top_up()

    def ready(self) -> list[Outcome]:
        """The outcomes finished since the last call, without waiting (and more items sent to the workers)."""
        with self._lock:
            self._collect_locked([f for lane in self._lanes for f in lane.in_flight if f.done()])
            return self._take()

    def drain(self) -> Iterator[Outcome]:
        """Every outcome not handed back yet, as they finish (waits for the last)."""
        while True:
            with self._lock:
                out = self._take()
                pending = [f for lane in self._lanes for f in lane.in_flight]
                if not pending and self._queue:  # every lane broke meanwhile: fresh workers take the queue
                    self._top_up()
                    pending = [f for lane in self._lanes for f in lane.in_flight]
                if not pending:
                    while self._queue:  # nothing left that could run them
                        index, _ = self._queue.popleft()
                        self._done.append(Outcome(index, None, Failure(index, "WorkerDied", _DIED)))
                    out += self._take()
            yield from out
            if not pending:
                return
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            self._collect(done)

    def _take(self) -> list[Outcome]:
        out, self._done = self._done, []
        return out

    def close(self) -> None:
        """End the workers (items not finished are dropped)."""
        with self._lock:
            lanes, self._lanes = self._lanes, []
        for lane in lanes:
            lane.executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> SidePool:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
