"""The ray engine against the local pool, on a real local Ray instance with 2 CPUs started here:
identical outcomes for a pure function, failures as values, one initialiser per actor, a dead actor,
actors kept and reused across calls, batches sized by work, identical skin measurements of the 62
bundled portraits, and ``skin measure --engine ray``."""

import importlib.util
import os
import sys
import threading

import pandas as pd
import pytest

from fairvision.engine import imap, map_items
from fairvision.errors import FairvisionError

HAVE_RAY = importlib.util.find_spec("ray") is not None
requires_ray = pytest.mark.skipif(not HAVE_RAY, reason="ray is not installed (fairvision[ray])")

_STATE = {}


def _square(x):
    if x == 7:
        raise ValueError("seven\nis not allowed")
    return x * x


def _init(tag):
    _STATE["tag"] = tag
    _STATE["inits"] = _STATE.get("inits", 0) + 1


def _tagged(x):
    return (_STATE.get("tag"), _STATE.get("inits"), os.getpid(), x)


def _broken_init():
    raise RuntimeError("model file missing")


def _crash(x):
    if x == 3:
        os._exit(1)  # a native crash of the worker process
    return x


@pytest.fixture(scope="module")
def ray_instance():
    import ray

    # the actors cannot import this test module: ship its functions by value
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    from fairvision.engine.ray_engine import close_pools

    close_pools()
    if started:
        ray.shutdown()


def _plain(outcomes):
    return [(o.index, o.value, o.failure and (o.failure.error, o.failure.message)) for o in outcomes]


def test_missing_ray_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(FairvisionError, match=r"install fairvision\[ray\]"):
        map_items(_square, range(3), engine="ray")
    with pytest.raises(FairvisionError, match="engine must be one of local, ray, not 'spark'"):
        map_items(_square, range(3), engine="spark")
    with pytest.raises(FairvisionError, match="address 'ray://head:10001' applies only to the ray engine"):
        map_items(_square, range(3), address="ray://head:10001")


@pytest.mark.parametrize("ordered", [True, False])
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_pure_function_identical_on_both_engines(ordered):
    local = map_items(_square, range(40), workers=2, chunksize=3, ordered=ordered)
    seen = []
    ray_ = map_items(_square, range(40), workers=2, chunksize=3, ordered=ordered, engine="ray", progress=seen.append)
    assert _plain(ray_) == _plain(local)
    assert len(seen) == 40  # the progress callback sees every outcome once
    f = ray_[7].failure
    assert f.error == "ValueError" and f.message == "seven is not allowed" and "Traceback" in f.traceback


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_ordered_and_unordered_streams():
    ordered = [o.index for o in imap(_square, range(30), workers=2, chunksize=2, engine="ray")]
    assert ordered == list(range(30))
    unordered = [o.index for o in imap(_square, range(30), workers=2, chunksize=2, ordered=False, engine="ray")]
    assert sorted(unordered) == list(range(30))


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_initialiser_once_per_actor_and_its_failure_is_a_value():
    out = map_items(_tagged, range(24), workers=2, chunksize=2, initializer=_init, initargs=("model",), engine="ray")
    assert all(o.value[:2] == ("model", 1) for o in out)  # built once per actor, not per item
    assert len({o.value[2] for o in out}) <= 2 and os.getpid() not in {o.value[2] for o in out}
    assert [o.value[3] for o in out] == list(range(24))
    bad = map_items(_square, range(6), workers=2, initializer=_broken_init, engine="ray")
    assert [o.index for o in bad] == list(range(6))
    assert all(o.failure.error == "RuntimeError" and "model file missing" in o.failure.message for o in bad)


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_dead_actor_fails_its_items_and_the_run_continues():
    out = map_items(_crash, range(12), workers=2, chunksize=1, engine="ray")
    assert [o.index for o in out] == list(range(12))
    failed = [o.index for o in out if not o.ok]
    assert 3 in failed and all(out[i].failure.error == "WorkerDied" for i in failed)
    assert [o.value for o in out if o.ok] == [i for i in range(12) if i not in failed]


@pytest.mark.vision
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_portraits_identical_on_both_engines(tmp_path):
    pytest.importorskip("mediapipe")
    from fairvision.audits.settings import AuditSettings
    from fairvision.datasets import load_portraits
    from fairvision.skin.batch import measure_images

    portraits = load_portraits()
    local = measure_images(portraits, settings=AuditSettings(workers=2), progress=False)
    ray_ = measure_images(portraits, settings=AuditSettings(workers=2, engine="ray"), progress=False)
    assert len(local) == 62 and local.ok.sum() >= 60
    pd.testing.assert_frame_equal(ray_, local, check_exact=True)
    assert ray_.attrs["summary"] == local.attrs["summary"]


@pytest.mark.vision
@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_cli_skin_measure_engine_ray(tmp_path, capsys):
    pytest.importorskip("mediapipe")
    from fairvision.cli import main
    from fairvision.datasets import load_portraits

    folder = str(os.path.dirname(load_portraits().image_path[0]))
    out = tmp_path / "skin.csv"
    code = main(["skin", "measure", folder, "-o", str(out), "--method", "mean", "-j", "2", "--engine", "ray",
                 "--no-progress"])
    assert code == 0, capsys.readouterr().err
    df = pd.read_csv(out)
    assert len(df) == 62 and df.ok.sum() >= 60
    assert "62 images" in capsys.readouterr().out


# actors kept per process, batches sized by work ------------------------------------------------------------

def _tagged_again(x):  # another function of the same module: shares the actors and what the initializer set
    return (_STATE.get("tag"), _STATE.get("inits"), os.getpid(), -x)


def _init_if_file(path):
    if not os.path.exists(path):
        raise FileNotFoundError(f"no model at {path}")


def _sleepy(x):
    import time

    time.sleep(0.02)
    return x


def _unpicklable(x):
    return (lambda: x) if x == 2 else x


def test_batch_size_by_work():
    from fairvision.engine.ray_engine import MAX_BATCH, TARGET_BATCH_S, batch_size

    assert TARGET_BATCH_S == 0.5
    assert batch_size(3200, 16, None) == 1  # nothing timed yet: one item, so the first results come back fast
    assert batch_size(3200, 16, 0.0125) == 40  # 0.5 s / 12.5 ms
    assert batch_size(3200, 2, 0.001) == 500  # 0.5 s / 1 ms, under ceil(3200 / 4) = 800
    assert batch_size(300, 2, 0.001) == 75  # at most half the remaining items spread over the actors
    assert batch_size(3, 16, 0.001) == 1
    assert batch_size(10**9, 1, 1e-9) == MAX_BATCH


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_actors_are_reused_across_calls_with_the_same_setup():
    from fairvision.engine.ray_engine import close_pools

    close_pools()
    first = map_items(_tagged, range(20), workers=2, initializer=_init, initargs=("m1",), engine="ray")
    second = map_items(_tagged, range(30), workers=2, initializer=_init, initargs=("m1",), engine="ray")
    pids = {o.value[2] for o in first}
    assert len(pids) == 2 and {o.value[2] for o in second} == pids  # the same two actors
    assert all(o.value[:2] == ("m1", 1) for o in first + second)  # each built its model once, not per call
    assert [o.value[3] for o in second] == list(range(30))
    # another function of the same module reuses them and sees the initializer's globals
    other = map_items(_tagged_again, range(10), workers=2, initializer=_init, initargs=("m1",), engine="ray")
    assert {o.value[2] for o in other} <= pids and all(o.value[:2] == ("m1", 1) for o in other)
    assert [o.value[3] for o in other] == [-x for x in range(10)]
    # fewer workers use some of them; other initargs get new actors (and the idle ones end)
    one = map_items(_tagged, range(8), workers=1, initializer=_init, initargs=("m1",), engine="ray")
    assert len({o.value[2] for o in one}) == 1 and {o.value[2] for o in one} <= pids
    new = map_items(_tagged, range(12), workers=2, initializer=_init, initargs=("m2",), engine="ray")
    assert all(o.value[:2] == ("m2", 1) for o in new) and not ({o.value[2] for o in new} & pids)
    close_pools()
    again = map_items(_tagged, range(6), workers=2, initializer=_init, initargs=("m2",), engine="ray")
    assert all(o.value[:2] == ("m2", 1) for o in again) and not ({o.value[2] for o in again} & {o.value[2] for o in new})


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_batches_start_with_one_item_then_follow_the_work(monkeypatch):
    from fairvision.engine import ray_engine

    sizes = []
    real = ray_engine._Run.take

    def take(self):
        batch = real(self)
        if batch is not None:
            sizes.append(len(batch))
        return batch

    monkeypatch.setattr(ray_engine._Run, "take", take)
    monkeypatch.setattr(ray_engine, "TARGET_BATCH_S", 0.1)  # 0.1 s / 20 ms per item: 5 items per batch
    out = map_items(_sleepy, range(60), workers=2, engine="ray")
    assert [o.value for o in out] == list(range(60)) and sum(sizes) == 60
    assert sizes[:4] == [1, 1, 1, 1]  # two queued on each actor before anything was timed
    assert max(sizes) <= 5 and 3 <= max(sizes)  # sleeping 20 ms takes at least 20 ms: never above 5
    sizes.clear()
    map_items(_sleepy, range(25), workers=2, chunksize=4, engine="ray")
    assert sizes == [4] * 6 + [1]  # an explicit chunksize is taken as given


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_stopping_early_leaves_the_actors_usable():
    stream = imap(_sleepy, range(40), workers=2, engine="ray", chunksize=1)
    got = [next(stream).index for _ in range(3)]
    stream.close()
    assert len(got) == 3
    out = map_items(_square, range(20), workers=2, engine="ray")
    assert [o.value for o in out if o.ok] == [x * x for x in range(20) if x != 7]


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_unpicklable_result_fails_its_item_only():
    out = map_items(_unpicklable, range(5), workers=2, engine="ray")
    assert [o.ok for o in out] == [True, True, False, True, True]
    assert [o.value for o in out if o.ok] == [0, 1, 3, 4]
    assert out[2].failure.index == 2 and out[2].failure.error in ("PicklingError", "AttributeError", "TypeError")


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_actors_whose_initialiser_failed_are_not_kept(tmp_path):
    model = tmp_path / "model.bin"
    bad = map_items(_square, range(4), workers=2, initializer=_init_if_file, initargs=(str(model),), engine="ray")
    assert all(o.failure.error == "FileNotFoundError" and "no model at" in o.failure.message for o in bad)
    model.write_bytes(b"weights")  # fixed: the same call now builds new actors and succeeds
    good = map_items(_square, range(4), workers=2, initializer=_init_if_file, initargs=(str(model),), engine="ray")
    assert [o.value for o in good] == [0, 1, 4, 9]


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_a_dead_actor_is_replaced_and_the_next_call_has_all_workers():
    for _ in range(3):  # the result of the batch an actor finished just before dying is never lost
        out = map_items(_crash, range(30), workers=2, chunksize=1, engine="ray")
        failed = [o.index for o in out if not o.ok]
        assert failed == [3] and out[3].failure.error == "WorkerDied"  # only the item it was running
        assert [o.value for o in out if o.ok] == [i for i in range(30) if i != 3]
        later = map_items(_tagged, range(20), workers=2, engine="ray")
        assert len({o.value[2] for o in later}) == 2 and [o.value[3] for o in later] == list(range(20))


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_a_call_with_other_actors_waits_for_the_running_one_to_free_its_cpus():
    import threading

    stream = imap(_sleepy, range(20), workers=2, engine="ray", initializer=_init, initargs=("a",))
    first = next(stream)  # the first pool is up, holding both CPUs of the instance
    other: list = []
    thread = threading.Thread(target=lambda: other.extend(
        map_items(_tagged, range(6), workers=2, initializer=_init, initargs=("b",), engine="ray")))
    thread.start()
    rest = list(stream)  # finishing here ends its actors, as the other call waits for their CPUs
    thread.join(timeout=120)
    assert not thread.is_alive()
    assert sorted([first.index] + [o.index for o in rest]) == list(range(20))
    assert [o.value[:2] for o in other] == [("b", 1)] * 6 and [o.value[3] for o in other] == list(range(6))


def _holds_a_lock(x, lock=threading.Lock()):  # a function Ray cannot serialise
    return x


@pytest.mark.usefixtures("ray_instance")
@pytest.mark.ray
@requires_ray
def test_a_call_that_fails_to_start_releases_its_pool():
    from fairvision.engine import ray_engine

    with pytest.raises(FairvisionError, match="the ray engine stopped"):
        list(imap(_holds_a_lock, [1, 2, 3], workers=1, engine="ray"))
    assert all(p.users == 0 for p in ray_engine._POOLS.values())
    assert [o.value for o in imap(_square, [1, 2], workers=1, engine="ray")] == [1, 4]
    assert all(p.users == 0 for p in ray_engine._POOLS.values())
