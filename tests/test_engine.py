"""The local process pool: order, failures, chunking, initialiser, progress, crashes."""

import os
import subprocess
import sys

import pytest

from fairvision.engine import Failure, imap, map_items
from fairvision.errors import FairvisionError

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


def _crash(x):
    if x == 3:
        os._exit(1)  # simulates a segfault in native code
    return x


@pytest.mark.parametrize("workers", [1, 2])
def test_ordered_results_and_captured_failures(workers):
    out = map_items(_square, range(40), workers=workers, chunksize=3)
    assert [o.index for o in out] == list(range(40))
    assert [o.value for o in out if o.ok] == [x * x for x in range(40) if x != 7]
    f = out[7].failure
    assert isinstance(f, Failure) and not out[7].ok
    assert f.error == "ValueError" and f.message == "seven is not allowed"  # one line
    assert "Traceback" in f.traceback


def test_unordered_gives_every_item_once_and_progress_sees_all():
    seen = []
    out = list(imap(_square, range(30), workers=2, chunksize=4, ordered=False, progress=seen.append))
    assert sorted(o.index for o in out) == list(range(30))
    assert len(seen) == 30


def test_initialiser_runs_once_per_worker():
    out = map_items(_tagged, range(24), workers=2, chunksize=2, initializer=_init, initargs=("model",))
    assert all(o.value[0] == "model" for o in out)
    assert all(o.value[1] == 1 for o in out)  # built once per process, not per item
    assert len({o.value[2] for o in out}) <= 2
    assert [o.value[3] for o in out] == list(range(24))


def test_in_process_mode_calls_initialiser_once():
    _STATE.clear()
    out = map_items(_tagged, range(5), workers=1, initializer=_init, initargs=("x",))
    assert [o.value[:2] for o in out] == [("x", 1)] * 5
    assert all(o.value[2] == os.getpid() for o in out)


def test_dead_worker_fails_its_chunk_and_the_run_continues():
    out = map_items(_crash, range(12), workers=2, chunksize=1, max_in_flight=1)
    failed = [o.index for o in out if not o.ok]
    assert 3 in failed
    assert all(out[i].failure.error == "WorkerDied" for i in failed)
    assert [o.value for o in out if o.ok] == [i for i in range(12) if i not in failed]
    assert len(out) == 12


def test_empty_and_bad_arguments():
    assert map_items(_square, [], workers=2) == []
    with pytest.raises(FairvisionError):
        map_items(_square, [1, 2], workers=-1)


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_other_start_methods_give_the_same_results(start_method):
    out = map_items(_square, range(10), workers=2, chunksize=2, start_method=start_method)
    assert [o.value for o in out if o.ok] == [x * x for x in range(10) if x != 7]
    assert not out[7].ok


def _always_crash(x):
    os._exit(1)


def test_workers_that_never_finish_anything_stop_the_run():
    with pytest.raises(FairvisionError, match="keep dying"):
        map_items(_always_crash, range(40), workers=2, chunksize=1, max_in_flight=2)


def _blas_threads(_):
    import numpy  # noqa: F401  (loads OpenBLAS if the worker has not yet)
    from threadpoolctl import threadpool_info

    return sorted({p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"})


def test_workers_are_single_threaded_by_default():
    pytest.importorskip("threadpoolctl")
    out = map_items(_blas_threads, range(4), workers=2, chunksize=1)
    assert all(o.value == [1] for o in out), [o.value for o in out]


def test_content_keys_and_the_results_store(tmp_path):
    """Results are kept by content key in the results store (which replaced the per-command JSON cache);
    a part torn by a crash is never seen (it is written under a temporary name first)."""
    import numpy as np

    from fairvision.engine import content_key, file_signature
    from fairvision.io.store import ResultsStore

    key = content_key({"image": file_signature(tmp_path / "none.png"), "params": {"a": 1}})
    assert content_key({"params": {"a": 1}, "image": file_signature(tmp_path / "none.png")}) == key  # order-free
    assert content_key({"params": {"a": 2}}) != content_key({"params": {"a": 1}})
    store = ResultsStore(tmp_path / "s")
    assert store.get_many("stage", [key]) == {}
    store.put("stage", key, {"L": np.float64(61.5), "ok": True, "reason": None, "x": np.nan})
    assert store.get_many("stage", [key]) == {}  # buffered until flushed
    store.flush()
    got = store.get_many("stage", [key, content_key("other")])
    assert list(got) == [key] and got[key] == {"L": 61.5, "ok": True, "reason": None, "x": None, "_subjects": {None}}
    (tmp_path / "s" / "stage" / ".part-torn.parquet.tmp").write_bytes(b"PAR1 torn")  # a write killed midway
    assert list(store.get_many("stage", [key])) == [key]


def test_file_signature_changes_with_the_file(tmp_path):
    from fairvision.engine import file_signature

    p = tmp_path / "a.txt"
    assert file_signature(None) is None and file_signature(p)[1:] == [None, None]
    p.write_text("one")
    first = file_signature(p)
    os.utime(p, ns=(first[2] + 10**9, first[2] + 10**9))
    assert file_signature(p) != first


def test_mask_files_are_found_by_sample_id_or_stem(tmp_path):
    from fairvision.errors import InputFileError
    from fairvision.io.masks import match_masks

    d = tmp_path / "masks"
    (d / "sub").mkdir(parents=True)
    for name in ("s1.png", "s1.jpg", "img2_skin.png", "sub/img3.bmp"):
        (d / name).write_bytes(b"x")
    found = match_masks(d, ["s1", "s2", "s3", "s4"], ["a/x.jpg", "a/img2.jpg", "a/img3.jpg", "a/none.jpg"])
    assert [None if f is None else os.path.relpath(f, d) for f in found] == ["s1.png", "img2_skin.png", "sub/img3.bmp", None]
    with pytest.raises(InputFileError, match="no mask matches"):
        match_masks(d, ["q"], ["a/q.jpg"])
    with pytest.raises(InputFileError, match="no such masks folder"):
        match_masks(tmp_path / "nope", ["q"], ["a/q.jpg"])


_CV2_THEN_FORK = """
import numpy as np, cv2
from fairvision.engine import imap
img = (np.random.default_rng(0).random((400, 400, 3)) * 255).astype(np.uint8)
cv2.GaussianBlur(cv2.resize(img, (900, 900)), (31, 31), 5)  # starts OpenCV's thread pool in the parent


def blur(i):
    import cv2
    return float(cv2.GaussianBlur(img, (15, 15), 3).mean()) + i


print(sum(o.value for o in imap(blur, range(8), workers=2)))
"""


def test_workers_forked_after_opencv_used_its_threads_do_not_hang():
    """A process that used OpenCV's thread pool, then forks workers: setNumThreads(1) in the child deadlocked;
    the worker start now sets 0 (the same sequential OpenCV) and the run finishes."""
    proc = subprocess.run([sys.executable, "-c", _CV2_THEN_FORK], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()
