"""The Ray engine: the same :func:`imap` contract as the local pool, on Ray actors kept per process.

Design (docs/DEVELOPING.md, ``engine/`` row). Ray Data builds a new dataset and new actors for every
``map_batches`` run and cannot hand its actors to the next dataset, so a run of many :func:`imap` calls paid
2-5 s of actor start-up per call, and its default batches (a handful of items) were too short to hide Ray's
per-batch cost. This engine therefore runs on Ray core:

- **actors kept per process**: a pool of actors (one CPU each) is created on first use and REUSED by every
  later call of this process with the same ``fn`` module, ``initializer``, ``initargs`` and
  ``threads_per_worker``; each actor runs the worker set-up (native thread cap, the ``initializer`` that
  builds a model) once, in its constructor. A call that needs more workers adds actors; a call with another
  key first ends the idle pools of other keys (they hold CPUs). :func:`close_pools` ends them all (Ray ends
  them with this process anyway). ``fn`` travels once per call and actor; functions shipped by value (a
  script's ``__main__``) see the module globals the initializer set, as they would in a local worker.
- **batch size by work**: the first batch of every actor holds one item (the first results come back as
  soon as the actors are up); the actors time ``fn`` and the next batches are sized to about
  :data:`TARGET_BATCH_S` seconds of work, and never more than half the remaining items spread over the
  actors, so the last batches are short and all actors finish together. An explicit ``chunksize`` fixes
  the size instead. Each actor is sent one batch at a time (:data:`QUEUED_BATCHES`) while its next batch
  already waits in the object store, so results stream back (``ray.wait``) and the actor starts the next
  batch one round trip after finishing one.
- **failures as values**, as the local pool's: an exception in ``fn`` is a Failure for that item (caught
  in the actor, with its traceback); an exception in the ``initializer`` is a Failure for every item that
  actor is given (and the pool is not kept); an actor whose process dies (native crash, out of memory)
  fails the batch it was running as ``WorkerDied`` (not retried: a crash is usually deterministic), the
  batch prepared for it goes to another actor, and the dead actor is replaced when it had finished a batch
  of this call before (a crash on an actor's very first batch is not retried with a new actor).

Ray is an optional extra (``pip install 'fairvision[ray]'``) and is imported only when this engine runs.
Without ``address`` (and no ``RAY_ADDRESS`` in the environment) a local Ray instance with ``workers`` CPUs
is started in this process, quietly (no dashboard, worker logs off, so a command still prints one line per
error); with ``address`` this process connects to that cluster. A Ray instance that is already running in
this process (started by the caller or an earlier call) is reused as it is.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import pickle
import threading
import time
import traceback
import types
from typing import Any, Callable, Iterable, Iterator

from fairvision.engine.pool import (
    Failure,
    Outcome,
    Reorderer,
    checked_workers,
    one_line,
    run_chunk,
    start_worker,
)
from fairvision.errors import FairvisionError

_INSTALL_HINT = "the ray engine needs Ray: install fairvision[ray] (pip install 'fairvision[ray]')"

#: Seconds of work a batch is sized to, once the first items have been timed.
TARGET_BATCH_S = 0.5
#: Batches sent to one actor at a time. One: Ray sends a task's result back asynchronously, so when an
#: actor dies with two batches sent, the result of the one it finished can be lost with it, and the batch
#: that crashed could not be told apart. The next batch of every actor waits in the object store instead.
QUEUED_BATCHES = 1
#: Upper bound of a batch chosen by time (an explicit ``chunksize`` is taken as given).
MAX_BATCH = 10_000

_POOLS: dict[tuple, "ActorPool"] = {}
_POOLS_LOCK = threading.Lock()
_ACTOR_CLASS: list = []


def import_ray():
    """The ``ray`` module, or a FairvisionError saying how to install it."""
    try:
        import ray  # lazy: an optional extra, about 0.7 s to import
    except ImportError as exc:
        raise FairvisionError(f"{_INSTALL_HINT} ({one_line(exc)})") from None
    return ray


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
    ray = import_ray()
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
    return ray


class Worker:
    """The actor: worker set-up once in the constructor, then batch after batch of ``(index, item)``."""

    def __init__(self, setup: tuple):
        # fn and initializer arrive in ONE pickle, so functions shipped by value share their module globals
        fn, initializer, initargs, threads, token = setup
        self.fn, self.token = fn, token
        home = initializer if isinstance(initializer, types.FunctionType) else fn
        self.home = getattr(home, "__globals__", None)
        self.init_error: tuple[str, str, str] | None = None
        try:
            start_worker(threads, initializer, initargs)
        except Exception as exc:  # noqa: BLE001 - reported per item, like the local pool's dead worker
            self.init_error = (type(exc).__name__, one_line(exc), traceback.format_exc())

    def ping(self) -> int:
        return os.getpid()

    def adopt(self, fn):
        """``fn`` of a later call; a function shipped by value is rebound to the globals the set-up used."""
        home = self.home
        if (isinstance(fn, types.FunctionType) and home is not None and fn.__globals__ is not home
                and fn.__module__ == home.get("__name__")):
            for name, value in fn.__globals__.items():
                home.setdefault(name, value)
            bound = types.FunctionType(fn.__code__, home, fn.__name__, fn.__defaults__, fn.__closure__)
            bound.__kwdefaults__, bound.__qualname__ = fn.__kwdefaults__, fn.__qualname__
            bound.__dict__.update(fn.__dict__)
            return bound
        return fn

    def run(self, token: str, fn_box: list, batch: list) -> tuple[list[bytes], float]:
        """Outcomes of one batch, each pickled on its own (an unpicklable result fails its item only),
        and the seconds ``fn`` took."""
        if self.init_error is not None:
            error, message, tb = self.init_error
            outcomes = [Outcome(i, None, Failure(i, error, f"worker initialiser failed: {message}", tb))
                        for i, _ in batch]
            return [pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL) for o in outcomes], -1.0
        if token != self.token:
            import ray  # lazy: present in every Ray worker

            self.fn, self.token = self.adopt(ray.get(fn_box[0])), token
        start = time.perf_counter()
        outcomes = run_chunk(self.fn, batch)
        seconds = time.perf_counter() - start
        payload = []
        for o in outcomes:
            try:
                payload.append(pickle.dumps(o, protocol=pickle.HIGHEST_PROTOCOL))
            except Exception as exc:  # noqa: BLE001 - an unpicklable result fails its item only
                payload.append(pickle.dumps(Outcome(o.index, None, Failure(o.index, type(exc).__name__, one_line(exc)))))
        return payload, seconds


def _actor_class(ray):
    if not _ACTOR_CLASS:
        _ACTOR_CLASS.append(ray.remote(num_cpus=1, max_restarts=0, max_task_retries=0)(Worker))
    return _ACTOR_CLASS[0]


class ActorPool:
    """The actors of one key in this process; ``users`` counts the :func:`imap` calls using them now."""

    def __init__(self, ray, key: tuple, session):
        self.ray, self.key, self.session = ray, key, session
        self.actors: list = []
        self.users = 0
        self.reusable = True
        self.lock = threading.Lock()  # calls of several threads may share the pool

    def new_actor(self, setup: tuple):
        return _actor_class(self.ray).remote(setup)

    def ensure(self, count: int, setup: tuple) -> None:
        """At least ``count`` live actors (a reused pool's dead actors replaced first)."""
        with self.lock:
            self._ensure(count, setup)

    def _ensure(self, count: int, setup: tuple) -> None:
        if self.actors and self.users == 1:
            pings = [a.ping.remote() for a in self.actors]
            for slot, ref in enumerate(pings):
                try:
                    self.ray.get(ref, timeout=60)
                except Exception:  # noqa: BLE001 - died since the last call (or unreachable): replace it
                    try:
                        self.ray.kill(self.actors[slot])
                    except Exception:  # noqa: BLE001 - already gone
                        pass
                    self.actors[slot] = self.new_actor(setup)
        while len(self.actors) < count:
            self.actors.append(self.new_actor(setup))

    def replace(self, slot: int, dead, setup: tuple):
        """A new actor in ``slot`` unless another call replaced ``dead`` already."""
        with self.lock:
            if self.actors[slot] is dead:
                self.actors[slot] = self.new_actor(setup)
            return self.actors[slot]

    def kill(self) -> None:
        with self.lock:
            actors, self.actors = self.actors, []
        for actor in actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001 - already gone, or the cluster is
                pass


def close_pools() -> None:
    """End the actors this process keeps for the ray engine (idle actors hold their CPUs)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.kill()


def _session(ray):
    """What identifies the Ray instance this process is connected to (pools die with it)."""
    try:
        rc = ray.get_runtime_context()
        return rc.get_job_id(), rc.get_node_id()
    except Exception:  # noqa: BLE001 - Ray Client and older versions: fall back to the module state
        return id(getattr(ray, "_private", ray))


def _ident(obj) -> Any:
    """A comparable identity of a function or argument tuple (an object's id when it cannot be pickled)."""
    if obj is None:
        return None
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, type)):
        return getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:  # noqa: BLE001 - not picklable by pickle: never shared
        return ("id", id(obj))


def _acquire(ray, fn, initializer, initargs, threads, count: int, token: str) -> tuple[ActorPool, tuple]:
    session = _session(ray)
    module = getattr(fn, "__module__", None) or type(fn).__module__
    key = (session, module, _ident(initializer), _ident(tuple(initargs)), threads)
    setup = (fn, initializer, tuple(initargs), threads, token)
    stale = []
    with _POOLS_LOCK:
        for k, p in list(_POOLS.items()):
            if (k != key and p.users == 0) or p.session != session:
                stale.append(_POOLS.pop(k))
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ActorPool(ray, key, session)
        pool.users += 1
    try:
        for p in stale:
            if p.session == session:
                p.kill()
        pool.ensure(count, setup)
    except BaseException:  # the count must come back down, or the pool is never freed nor checked again
        _release(pool)
        raise
    return pool, setup


def _release(pool: ActorPool) -> None:
    with _POOLS_LOCK:
        pool.users -= 1
        # not kept: actors whose initialiser failed, and idle ones whose CPUs a running call's pool waits for
        waiting = any(p is not pool and p.users > 0 for p in _POOLS.values())
        drop = pool.users == 0 and (not pool.reusable or waiting)
        if drop and _POOLS.get(pool.key) is pool:
            del _POOLS[pool.key]
    if drop:
        pool.kill()


def batch_size(remaining: int, actors: int, per_item: float | None, first: int = 1) -> int:
    """Items in the next batch: ``first`` until an item has been timed, then about
    :data:`TARGET_BATCH_S` seconds of work, at most half the remaining items spread over the actors."""
    size = first if per_item is None else int(TARGET_BATCH_S / max(per_item, 1e-6))
    share = math.ceil(remaining / (2 * max(1, actors)))
    return max(1, min(size, share, MAX_BATCH))


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
    """Apply ``fn`` to every item on Ray actors, yielding an :class:`Outcome` per item.

    Parameters
    ----------
    fn : callable
        Picklable (a module-level function) and importable on every Ray node.
    items : iterable
        Materialised into a list; items travel to the actors in batches.
    workers : int
        Ray actors (one CPU each); also the CPUs of a local Ray instance this
        call starts. Capped by the CPUs the cluster has.
    address : str, optional
        Ray cluster to connect to (see :func:`ensure_ray`).
    chunksize : int, optional
        Items per batch; default: one item first, then batches of about
        :data:`TARGET_BATCH_S` seconds of work (see the module's notes).
    ordered : bool
        Yield in input order (buffering early finishers) or as completed.
    initializer, initargs
        Called once in each actor when it starts (builds the model); actors,
        and so what the initializer built, are reused by later calls with the
        same ``fn`` module, initializer, initargs and threads.
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
    workers = checked_workers(workers)
    if not items:
        return
    if chunksize is not None and int(chunksize) < 1:
        raise FairvisionError(f"chunksize must be at least 1, got {chunksize}")
    ray = ensure_ray(address, workers)
    try:
        count = max(1, min(workers, len(items), int(ray.cluster_resources().get("CPU", workers))))
        token = os.urandom(8).hex()  # this call's fn, told apart from the one the actors hold
        pool, setup = _acquire(ray, fn, initializer, initargs, threads_per_worker, count, token)
    except FairvisionError:
        raise
    except Exception as exc:  # noqa: BLE001 - the cluster itself failed (not one item): say so in one line
        raise FairvisionError(f"the ray engine stopped: {type(exc).__name__}: {one_line(exc)}") from None
    run = None
    try:
        try:
            run = _Run(ray, pool, setup, items, count, chunksize, token)
        except Exception as exc:  # noqa: BLE001 - e.g. a fn Ray cannot serialise: one line, and the pool released
            raise FairvisionError(f"the ray engine stopped: {type(exc).__name__}: {one_line(exc)}") from None
        yield from run.outcomes(Reorderer(ordered, progress))
    finally:
        if run is not None:
            run.cancel()
        _release(pool)


class _Run:
    """One :func:`imap` call on a pool: submit batches, stream results, handle dead actors."""

    def __init__(self, ray, pool: ActorPool, setup: tuple, items: list, count: int, chunksize, token: str):
        self.ray, self.pool, self.setup, self.items = ray, pool, setup, items
        self.chunksize = int(chunksize) if chunksize else None
        self.token, self.fn_box = token, [ray.put(setup[0])]
        self.slots = {s: pool.actors[s] for s in range(count)}  # slot -> live actor
        self.queued: dict[int, collections.deque] = {s: collections.deque() for s in self.slots}
        self.finished = dict.fromkeys(self.slots, 0)  # batches finished per slot in this call
        self.refs: dict = {}  # ref -> (slot, batch)
        self.again: collections.deque = collections.deque()  # batches to resubmit (never started)
        self.prepared: dict[int, tuple] = {}  # slot -> (batch, its ref in the object store or the error)
        self.next = 0
        self.timed = [0.0, 0]  # seconds, items

    def take(self) -> list | None:
        if self.again:
            return self.again.popleft()
        n = len(self.items)
        if self.next >= n:
            return None
        per_item = self.timed[0] / self.timed[1] if self.timed[1] else None
        size = self.chunksize or batch_size(n - self.next, len(self.slots), per_item)
        batch = [(i, self.items[i]) for i in range(self.next, min(n, self.next + size))]
        self.next += len(batch)
        return batch

    def prepare(self) -> tuple | None:
        """The next batch, already in the object store (or the error that kept it out)."""
        batch = self.take()
        if batch is None:
            return None
        try:
            return batch, self.ray.put(batch)
        except Exception as exc:  # noqa: BLE001 - an unpicklable item, as the local pool reports it
            return batch, exc

    def fill(self) -> list[Outcome]:
        """Send a batch to every idle live actor and put its next one in the object store meanwhile;
        a batch that cannot be sent fails its items."""
        failed: list[Outcome] = []
        for slot, actor in self.slots.items():
            while len(self.queued[slot]) < QUEUED_BATCHES:
                ready = self.prepared.pop(slot, None) or self.prepare()
                if ready is None:
                    break
                batch, ref = ready
                try:
                    if isinstance(ref, Exception):
                        raise ref
                    task = actor.run.remote(self.token, self.fn_box, ref)
                except Exception as exc:  # noqa: BLE001 - as above
                    failed += [Outcome(i, None, Failure(i, type(exc).__name__, one_line(exc))) for i, _ in batch]
                    continue
                self.refs[task] = (slot, batch)
                self.queued[slot].append(task)
            if slot not in self.prepared and self.queued[slot]:
                ready = self.prepare()
                if ready is not None:
                    self.prepared[slot] = ready
        return failed

    def collect(self, ref) -> list[Outcome]:
        """Outcomes of a finished batch, or of every batch of its actor when the actor died."""
        slot, batch = self.refs[ref]
        try:
            payload, seconds = self.ray.get(ref)
        except self.ray.exceptions.RayActorError:
            return self.actor_died(slot)
        except Exception as exc:  # noqa: BLE001 - the batch as a whole failed (e.g. an argument it could not read)
            self.forget(ref)
            name = type(getattr(exc, "cause", None) or exc).__name__
            return [Outcome(i, None, Failure(i, name, one_line(exc).split(" Traceback")[0])) for i, _ in batch]
        self.forget(ref)
        self.finished[slot] += 1
        if seconds >= 0:
            self.timed[0] += seconds
            self.timed[1] += len(batch)
        else:  # the initializer failed: do not keep these actors for later calls
            self.pool.reusable = False
        return [pickle.loads(p) for p in payload]

    def forget(self, ref) -> None:
        slot, _ = self.refs.pop(ref)
        self.queued[slot].remove(ref)

    def actor_died(self, slot: int) -> list[Outcome]:
        """The actor of ``slot`` died: batches it finished count, the one it was running fails, the rest
        go to other actors; the actor is replaced when it had finished a batch of this call."""
        out: list[Outcome] = []
        crashed = False
        queued = list(self.queued[slot])
        # a batch it finished just before dying may still be on its way here: let every ref settle first
        self.ray.wait(queued, num_returns=len(queued), timeout=30)
        for ref in queued:
            _, batch = self.refs[ref]
            self.forget(ref)
            if crashed:
                self.again.append(batch)
                continue
            try:
                payload, _ = self.ray.get(ref, timeout=0)
                out += [pickle.loads(p) for p in payload]
                self.finished[slot] += 1
            except Exception:  # noqa: BLE001 - the batch it was running when it died
                crashed = True
                out += [Outcome(i, None, Failure(i, "WorkerDied", "ray worker process died")) for i, _ in batch]
        dead = self.slots[slot]
        if slot in self.prepared:
            self.again.append(self.prepared.pop(slot)[0])
        if self.finished[slot] > 0:
            self.slots[slot] = self.pool.replace(slot, dead, self.setup)
            self.finished[slot] = 0
        else:
            del self.slots[slot]
        return out

    def outcomes(self, reorder: Reorderer) -> Iterator[Outcome]:
        while True:
            try:
                got = self.fill()
                idle = not self.refs  # nothing could be sent: no work left, or no actor left
                if not idle:
                    ready, _ = self.ray.wait(list(self.refs), num_returns=1)
                    got += self.collect(ready[0])
            except FairvisionError:
                raise
            except Exception as exc:  # noqa: BLE001 - the cluster itself failed (not one item): one line
                raise FairvisionError(f"the ray engine stopped: {type(exc).__name__}: {one_line(exc)}") from None
            yield from reorder.emit(got)
            if idle:
                break
        # every actor died on its first batch: what was never run fails, as the local pool's broken pool
        left = [i for b in self.again for i, _ in b] + [i for b, _ in self.prepared.values() for i, _ in b]
        left = sorted(left + list(range(self.next, len(self.items))))
        self.again.clear()
        self.prepared.clear()
        self.next = len(self.items)
        yield from reorder.emit([Outcome(i, None, Failure(i, "WorkerDied", "ray worker process died")) for i in left])

    def cancel(self) -> None:
        """Batches still queued when the caller stops early are cancelled (best effort)."""
        for ref in list(self.refs):
            try:
                self.ray.cancel(ref)
            except Exception:  # noqa: BLE001 - finished meanwhile, or the actor is gone
                pass
        self.refs.clear()
        self.prepared.clear()
