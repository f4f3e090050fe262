"""The ray engine against the local pool, on a real local Ray instance with 2 CPUs started here:
identical outcomes for a pure function, failures as values, one initialiser per actor, a dead actor,
identical skin measurements of the 62 bundled portraits, and ``skin measure --engine ray``."""

import importlib.util
import os
import sys

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
