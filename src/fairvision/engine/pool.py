"""A local process pool: map a function over items with N worker processes.

Features: chunking (one task per chunk, so small items do not drown in
inter-process traffic), ordered or unordered results, a progress callback, a
per-item exception captured as a :class:`Failure` instead of ending the run, a
worker initialiser (to build a model once per process), and a bounded number
of chunks in flight so memory stays flat on big datasets.

A worker that dies in native code (a segfault in a model) breaks the pool;
the items of the chunks that were in flight become failures ("worker process
died") and the remaining items continue in a fresh pool.

With ``workers <= 1`` everything runs in the calling process (the initialiser
is called once), which is the fastest choice for short runs and for tests.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import sys
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Sequence

from fairvision.errors import FairvisionError


@dataclass(frozen=True)
class Failure:
    """An item whose function call raised.

    Attributes
    ----------
    index : int
        Position of the item in the input.
    error : str
        Exception class name.
    message : str
        One-line exception message.
    traceback : str
        Formatted traceback (from the worker process).
    """

    index: int
    error: str
    message: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"{self.error}: {self.message}" if self.message else self.error


@dataclass(frozen=True)
class Outcome:
    """Result of one item: ``value`` when ``ok``, else ``failure``."""

    index: int
    value: Any = None
    failure: Failure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def run_chunk(fn: Callable, chunk: Sequence[tuple[int, Any]]) -> list[Outcome]:
    """Call ``fn`` on each (index, item); exceptions become failures (shared by both engines)."""
    out = []
    for index, item in chunk:
        try:
            out.append(Outcome(index, fn(item)))
        except Exception as exc:  # noqa: BLE001 - per-item failures are results
            out.append(Outcome(index, None, Failure(index, type(exc).__name__, one_line(exc), traceback.format_exc())))
    return out


def limit_threads(n: int = 1) -> None:
    """Cap the native thread pools of this process (BLAS/OpenMP via threadpoolctl, OpenCV).

    A pool of N single-threaded workers uses N cores; workers whose numpy
    (OpenBLAS) and OpenCV calls each start more threads oversubscribe the
    machine: on 2 cores the skin estimator took about 90 ms of CPU per image
    with OpenBLAS's default 2 threads and 50 ms with 1, for the same wall time
    in a single process.
    """
    # for libraries loaded later (OpenCV's own pool reads OPENCV_FOR_THREADS_NUM, not OMP_NUM_THREADS)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENCV_FOR_THREADS_NUM"):
        os.environ[var] = str(n)
    try:
        from threadpoolctl import threadpool_limits  # lazy: optional, 0.1 s to import, only in workers

        threadpool_limits(limits=n)
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        pass
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        # 0 (run sequentially), not 1: the same for OpenCV, but setNumThreads(1) deadlocks in a child forked
        # after the parent's OpenCV thread pool had started, and 0 does not (tests/test_engine.py)
        cv2.setNumThreads(0 if n <= 1 else n)


def silence_native_stderr() -> None:
    """Send this process's file descriptor 2 to /dev/null.

    Native libraries (mediapipe's TensorFlow Lite and absl logging) write
    warning lines straight to fd 2 from their own threads, where Python cannot
    filter them. Worker processes report errors through their results, so
    their stderr carries nothing else; set ``FAIRVISION_NATIVE_LOGS=1`` to keep it.
    """
    if os.environ.get("FAIRVISION_NATIVE_LOGS"):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


class Reorderer:
    """Hands outcomes on as they arrive, or in input order (buffering early finishers) when ``ordered``;
    ``progress`` is called for each outcome on arrival. Shared by both engines."""

    def __init__(self, ordered: bool, progress: Callable[[Outcome], None] | None = None):
        self.ordered = ordered
        self.progress = progress
        self._pending: dict[int, Outcome] = {}
        self._next = 0

    def emit(self, outcomes: list[Outcome]) -> Iterator[Outcome]:
        for o in outcomes:
            if self.progress is not None:
                self.progress(o)
        if not self.ordered:
            yield from outcomes
            return
        for o in outcomes:
            self._pending[o.index] = o
        while self._next in self._pending:
            yield self._pending.pop(self._next)
            self._next += 1


@contextlib.contextmanager
def quiet_native_stderr() -> Iterator[None]:
    """While models run in this process: native log lines (fd 2) go to /dev/null, Python's own
    ``sys.stderr`` (errors, progress bars) still reaches the terminal through a copy of fd 2."""
    if os.environ.get("FAIRVISION_NATIVE_LOGS"):
        yield
        return
    real = sys.stderr is sys.__stderr__ and sys.__stderr__ is not None
    if real:
        sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    old = sys.stderr
    if real:
        sys.stderr = open(saved, "w", buffering=1, closefd=False, encoding=old.encoding, errors="backslashreplace")
    try:
        yield
    finally:
        if real:
            sys.stderr.flush()
            sys.stderr = old
        os.dup2(saved, 2)
        os.close(saved)


def start_worker(threads: int | None, initializer, initargs) -> None:
    """Set up a worker process (either engine): quiet native stderr, cap native threads, run the initialiser."""
    silence_native_stderr()
    if threads:
        limit_threads(threads)
    if initializer is not None:
        initializer(*initargs)


def default_workers() -> int:
    """CPUs available to this process (``os.sched_getaffinity``), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def checked_workers(workers: int | None) -> int:
    """The number of workers as an int (None or 0 mean 1); fewer than one is an error."""
    workers = int(workers or 1)
    if workers < 1:
        raise FairvisionError(f"workers must be at least 1, got {workers}")
    return workers


def auto_chunksize(n: int, workers: int) -> int:
    """Items per chunk (task or Ray batch) for ``n`` items on ``workers`` workers."""
    # about 8 chunks per worker: enough to balance load, few enough to keep IPC small
    return max(1, min(64, n // (workers * 8) or 1))


def chunk_sizes(n: int, workers: int, size: int | None = None) -> list[int]:
    """Sizes of the chunks :func:`imap` cuts ``n`` items into.

    An explicit ``size`` is taken as given (the last chunk holds the rest). Otherwise chunks are "guided":
    :func:`auto_chunksize` items each while plenty remain, then about a quarter of the remaining items per
    worker, down to single items, so that the workers run out of work together instead of one of them finishing
    a full-size last chunk while the others wait (on 540 photos and 2 workers, a 33-image chunk is about half a
    second of one idle core).
    """
    if size is not None:
        return [min(size, n - i) for i in range(0, n, size)]
    cap = auto_chunksize(n, workers)
    sizes, left = [], n
    while left > 0:
        s = max(1, min(cap, -(-left // (4 * workers))))
        sizes.append(s)
        left -= s
    return sizes


def context_for(start_method: str | None, preload: Sequence[str] = ()):
    """The multiprocessing context a pool starts its workers with: ``start_method``, or by default ``fork`` while
    this process has built no model with native threads, else a fork server (``spawn`` where there is none)."""
    if start_method is None:
        # fork is fastest, but only safe before this process started model threads
        methods = mp.get_all_start_methods()
        start_method = "forkserver" if "forkserver" in methods else "spawn"
        if "fork" in methods and not _threads_started():
            start_method = "fork"
    ctx = mp.get_context(start_method)
    if start_method == "forkserver" and preload:
        # modules imported once in the fork server, inherited by every worker it forks
        # (takes effect only if the fork server has not started yet)
        ctx.set_forkserver_preload(list(preload))
    return ctx


def noop_task() -> None:
    """A task that does nothing (it makes an executor start its workers)."""


class WarmPool:
    """Worker processes started before their items are known, for one map (:meth:`imap`).

    A command that must read its inputs before it knows all of its items (a sample table, with pandas) can start
    the workers first: they run ``initializer`` (build their models) while this process reads. With ``fork``
    every worker starts at once; with a fork server or ``spawn`` the first one does (the executor starts the
    others as work arrives). :meth:`close` ends workers that no map took (a run that failed before it got there).

    Parameters
    ----------
    workers : int
        Worker processes.
    initializer, initargs, threads_per_worker, start_method, preload
        As :func:`imap`.
    """

    def __init__(self, workers: int, *, initializer: Callable[..., None] | None = None, initargs: tuple = (),
                 threads_per_worker: int | None = 1, start_method: str | None = None, preload: Sequence[str] = ()):
        self.workers = checked_workers(workers)
        self._setup = (threads_per_worker, initializer, initargs)
        self._ctx = context_for(start_method, preload)
        self._executor: ProcessPoolExecutor | None = ProcessPoolExecutor(
            max_workers=self.workers, mp_context=self._ctx, initializer=start_worker, initargs=self._setup,
        )
        self._executor.submit(noop_task)

    def imap(self, fn: Callable[[Any], Any], items: Iterable[Any], *, chunksize: int | None = None,
             ordered: bool = True, progress: Callable[[Outcome], None] | None = None,
             max_in_flight: int | None = None) -> Iterator[Outcome]:
        """:func:`imap` on these workers (options as there; a worker that dies is replaced as there), once.
        The workers end when it is done."""
        executor, self._executor = self._executor, None
        if executor is None:
            raise FairvisionError("a WarmPool's workers serve one map; start another WarmPool")
        items = list(items)
        if not items:
            executor.shutdown(wait=False, cancel_futures=True)
            return
        yield from _pooled(fn, list(enumerate(items)), self.workers, chunksize, ordered, progress, max_in_flight,
                           ctx=self._ctx, setup=self._setup, first=executor)

    def close(self) -> None:
        """End the workers, unless a map took them."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


def _threads_started() -> bool:
    """Whether a model with native threads and locks (any mediapipe graph) was built in this process.

    Python helper threads (a progress bar's refresher) do not count: the forked
    child simply does not have them and the workers never use their locks.
    """
    cache = sys.modules.get("fairvision.vision.model_cache")  # not imported: no model was built
    return cache is not None and cache.threaded_models_built()


def imap(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    workers: int = 1,
    chunksize: int | None = None,
    ordered: bool = True,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
    progress: Callable[[Outcome], None] | None = None,
    start_method: str | None = None,
    max_in_flight: int | None = None,
    preload: Sequence[str] = (),
    threads_per_worker: int | None = 1,
    in_process: bool | None = None,
) -> Iterator[Outcome]:
    """Apply ``fn`` to every item, yielding an :class:`Outcome` per item.

    Parameters
    ----------
    fn : callable
        Picklable (a module-level function) when ``workers > 1``.
    items : iterable
        Materialised into a list (its length sets the chunk size).
    workers : int
        Worker processes; ``<= 1`` runs in this process. ``0`` or ``None``
        are not special: use :func:`default_workers` for "all CPUs".
    chunksize : int, optional
        Items per task; default guided (:func:`chunk_sizes`): about 8 chunks per worker, at most 64 items,
        then shorter chunks towards the end so that the workers finish together.
    ordered : bool
        Yield in input order (buffering early finishers) or as completed.
    initializer, initargs
        Called once in each worker before its first item (in-process mode:
        once, in this process).
    progress : callable, optional
        Called in this process with each outcome as it arrives.
    start_method : {"fork", "forkserver", "spawn"}, optional
        Default: ``fork`` when this process has built no face model (whose
        native threads make forking unsafe), otherwise ``forkserver``.
    max_in_flight : int, optional
        Chunks submitted but not finished; default ``4 * workers``.
    threads_per_worker : int or None
        Native threads (BLAS, OpenMP, OpenCV) each worker process may use;
        default 1, so N workers use N cores. None leaves them alone. Not
        applied in in-process mode.
    in_process : bool, optional
        Run in this process (default: when ``workers == 1`` or there is one
        item). False forces a pool even for one worker, e.g. to keep models
        out of this process.
    preload : sequence of str
        Modules for the fork server to import once (``forkserver`` only; with
        ``fork`` the workers inherit whatever this process imported).

    Yields
    ------
    Outcome
        ``.value`` of ``fn(item)``, or ``.failure`` describing the exception.
    """
    items = list(items)
    n = len(items)
    workers = checked_workers(workers)
    if n == 0:
        return
    indexed = list(enumerate(items))
    if in_process is None:
        in_process = workers == 1 or n == 1
    if in_process:
        with quiet_native_stderr():
            if initializer is not None:
                initializer(*initargs)
            for index, item in indexed:
                (outcome,) = run_chunk(fn, [(index, item)])
                if progress is not None:
                    progress(outcome)
                yield outcome
        return
    yield from _pooled(fn, indexed, workers, chunksize, ordered, progress, max_in_flight,
                       ctx=context_for(start_method, preload), setup=(threads_per_worker, initializer, initargs))


def _pooled(fn, indexed, workers, chunksize, ordered, progress, max_in_flight, *, ctx, setup, first=None):
    """:func:`imap` on worker processes: ``indexed`` (index, item) pairs in chunks, the workers set up by
    :func:`start_worker` with ``setup`` = ``(threads_per_worker, initializer, initargs)``; ``first``: an
    executor already started (:class:`WarmPool`) for the first set of workers."""
    n = len(indexed)
    size = int(chunksize) if chunksize else None
    if size is not None and size < 1:
        raise FairvisionError(f"chunksize must be at least 1, got {chunksize}")
    chunks, start = [], 0
    for s in chunk_sizes(n, workers, size):
        chunks.append(indexed[start : start + s])
        start += s
    limit = max_in_flight or 4 * workers
    emit = Reorderer(ordered, progress).emit
    next_chunk = 0

    fruitless = 0  # pools in a row that broke before finishing any chunk
    while next_chunk < len(chunks):
        pool, first = first, None
        if pool is None:
            pool = ProcessPoolExecutor(max_workers=min(workers, len(chunks)), mp_context=ctx,
                                       initializer=start_worker, initargs=setup)
        in_flight: dict = {}
        broken = False
        finished = 0
        try:
            while next_chunk < len(chunks) or in_flight:
                while not broken and next_chunk < len(chunks) and len(in_flight) < limit:
                    try:
                        fut = pool.submit(run_chunk, fn, chunks[next_chunk])
                    except BrokenProcessPool:
                        broken = True
                        break
                    in_flight[fut] = chunks[next_chunk]
                    next_chunk += 1
                if not in_flight:
                    break
                done, _ = wait(list(in_flight), return_when=FIRST_COMPLETED)
                for fut in done:
                    chunk = in_flight.pop(fut)
                    try:
                        outcomes = fut.result()
                        finished += 1
                    except BrokenProcessPool:
                        broken = True
                        outcomes = [
                            Outcome(i, None, Failure(i, "WorkerDied", "worker process died or its initialiser failed"))
                            for i, _ in chunk
                        ]
                    except Exception as exc:  # unpicklable result or argument
                        finished += 1
                        outcomes = [Outcome(i, None, Failure(i, type(exc).__name__, one_line(exc))) for i, _ in chunk]
                    yield from emit(outcomes)
                if broken and not in_flight:
                    break
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        fruitless = fruitless + 1 if (broken and finished == 0) else 0
        if fruitless >= 2 and next_chunk < len(chunks):
            raise FairvisionError(
                f"worker processes keep dying before finishing any work ({ctx.get_start_method()} start); "
                "run with one worker to see the error (a script that starts workers needs an "
                "'if __name__ == \"__main__\":' guard)"
            )

