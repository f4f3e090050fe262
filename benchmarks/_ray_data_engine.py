"""The ray engine as it was before actors were kept per process (one Ray Data dataset and new actors per
imap call, batches of about eight per actor): kept only so that ``bench_engines.py --before`` can time the old
engine against the new one in the same run. Not part of fairvision."""

from __future__ import annotations

import logging
import math
import pickle
import traceback
import warnings
from typing import Any, Callable, Iterable, Iterator

from fairvision.errors import FairvisionError
from fairvision.engine.pool import (
    Failure,
    Outcome,
    Reorderer,
    auto_chunksize,
    checked_workers,
    one_line,
    run_chunk,
    start_worker,
)

_INSTALL_HINT = "the ray engine needs Ray: install fairvision[ray] (pip install 'fairvision[ray]')"


def import_ray():
    """``(ray, ray.data)``, or a FairvisionError saying how to install them."""
    try:
        import ray  # lazy: an optional extra, about 0.7 s to import
        import ray.data
    except ImportError as exc:
        raise FairvisionError(f"{_INSTALL_HINT} ({one_line(exc)})") from None
    return ray, ray.data


def ensure_ray(address: str | None = None, workers: int = 1):
    """Connect to Ray: reuse a running instance, else ``ray.init(address)`` quietly. Returns the ``ray`` module.

    Parameters
    ----------
    address : str, optional
        A Ray cluster (``ray://host:10001``, ``host:6379`` or ``auto``); None
        starts a local instance with ``workers`` CPUs (or connects to
        ``RAY_ADDRESS`` when that is set, as ``ray.init`` does).
    workers : int
        CPUs of a local instance.
    """
    ray, _ = import_ray()
    if not ray.is_initialized():
        logging.getLogger("ray").setLevel(logging.ERROR)  # start-up banners and token notices
        kw: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
        if not address:
            kw["num_cpus"] = max(1, int(workers))
        try:
            ray.init(address=address or None, **kw)
        except Exception as exc:  # noqa: BLE001 - ConnectionError, ValueError, RuntimeError, ...
            where = f"the Ray cluster at {address}" if address else "Ray"
            raise FairvisionError(f"could not start or reach {where}: {one_line(exc)}") from None
    _quiet_ray_data()
    return ray


def _quiet_ray_data() -> None:
    """Ray Data logs to its session file only (its console handler would print every dropped block)."""
    from ray.data._internal.logging import SessionFileHandler  # lazy: part of the optional extra

    for handler in logging.getLogger("ray.data").handlers:
        if not isinstance(handler, SessionFileHandler):
            handler.setLevel(logging.CRITICAL + 1)


class BatchMapper:
    """Ray Data callable class: one instance per actor (worker set-up once), then batch after batch."""

    def __init__(self, fn: Callable, initializer: Callable | None, initargs: tuple, threads: int | None):
        self.fn = fn
        self.init_error: tuple[str, str, str] | None = None
        try:
            start_worker(threads, initializer, initargs)
        except Exception as exc:  # noqa: BLE001 - reported per item, like the local pool's dead worker
            self.init_error = (type(exc).__name__, one_line(exc), traceback.format_exc())

    def __call__(self, batch: dict) -> dict:
        indices = [int(i) for i in batch["index"]]
        if self.init_error is not None:
            error, message, tb = self.init_error
            outcomes = [Outcome(i, None, Failure(i, error, f"worker initialiser failed: {message}", tb)) for i in indices]
        else:
            chunk = [(i, pickle.loads(p)) for i, p in zip(indices, batch["payload"])]
            outcomes = run_chunk(self.fn, chunk)
        payload = []
        for o in outcomes:
            try:
                payload.append(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as exc:  # noqa: BLE001 - an unpicklable result fails its item only
                payload.append(pickle.dumps(Outcome(o.index, None, Failure(o.index, type(exc).__name__, one_line(exc)))))
        return {"index": indices, "payload": payload}


def imap(
    fn: Callable[[Any], Any],
    items: Iterable[Any],
    *,
    workers: int = 1,
    address: str | None = None,
    chunksize: int | None = None,
    ordered: bool = True,
    initializer: Callable[..., None] | None = None,
    initargs: tuple = (),
    progress: Callable[[Outcome], None] | None = None,
    threads_per_worker: int | None = 1,
    **local_only,
) -> Iterator[Outcome]:
    """Apply ``fn`` to every item on Ray Data, yielding an :class:`Outcome` per item.

    Parameters
    ----------
    fn : callable
        Picklable (a module-level function) and importable on every Ray node.
    items : iterable
        Materialised into a list; each item is pickled into one dataset row.
    workers : int
        Ray actors (one CPU each); also the CPUs of a local Ray instance this
        call starts. Capped by the CPUs the cluster has.
    address : str, optional
        Ray cluster to connect to (see :func:`ensure_ray`).
    chunksize : int, optional
        Items per batch (one ``map_batches`` call); default as the local pool.
    ordered : bool
        Yield in input order (buffering early finishers) or as completed.
    initializer, initargs
        Called once in each actor before its first batch (builds the model).
    progress : callable, optional
        Called in this process with each outcome as it arrives.
    threads_per_worker : int or None
        Native threads each actor may use (default 1).
    **local_only
        Options of the local pool that have no meaning here (``start_method``,
        ``preload``, ``max_in_flight``, ``in_process``); accepted and ignored
        so one call works with either engine.

    Yields
    ------
    Outcome
        ``.value`` of ``fn(item)``, or ``.failure`` describing the exception.
    """
    unknown = set(local_only) - {"start_method", "preload", "max_in_flight", "in_process"}
    if unknown:
        raise TypeError(f"imap() got unexpected keyword arguments {', '.join(sorted(unknown))}")
    items = list(items)
    n = len(items)
    workers = checked_workers(workers)
    if n == 0:
        return
    size = int(chunksize) if chunksize else auto_chunksize(n, workers)
    if size < 1:
        raise FairvisionError(f"chunksize must be at least 1, got {chunksize}")
    ray = ensure_ray(address, workers)
    _, rd = import_ray()
    actors = max(1, min(workers, int(ray.cluster_resources().get("CPU", workers))))
    rows = [{"index": i, "payload": pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)} for i, item in enumerate(items)]
    del items
    ds = rd.from_items(rows, override_num_blocks=math.ceil(n / size))
    del rows
    ds.context.enable_progress_bars = False
    ds.context.max_errored_blocks = -1  # a batch lost with its actor: its items become failures below
    with warnings.catch_warnings():
        # max_restarts / max_task_retries go through the deprecated **ray_remote_args, the one
        # documented way to stop Ray Data re-running a batch that crashed its actor forever
        warnings.simplefilter("ignore")
        ds = ds.map_batches(
            BatchMapper, fn_constructor_args=(fn, initializer, tuple(initargs), threads_per_worker),
            batch_size=size, batch_format="numpy", concurrency=actors, num_cpus=1,
            max_restarts=0, max_task_retries=0,
        )

    seen = [False] * n
    reorder = Reorderer(ordered, progress)

    def emit(outcomes: list[Outcome]):
        for o in outcomes:
            seen[o.index] = True
        return reorder.emit(outcomes)

    try:
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            yield from emit([pickle.loads(p) for p in batch["payload"]])
    except Exception as exc:  # noqa: BLE001 - the cluster itself failed (not one item): say so in one line
        raise FairvisionError(f"the ray engine stopped: {type(exc).__name__}: {one_line(exc)}") from None
    lost = [i for i in range(n) if not seen[i]]
    yield from emit([Outcome(i, None, Failure(i, "WorkerDied", "ray worker process died")) for i in lost])
