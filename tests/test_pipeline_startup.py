"""The skin pipeline's start-up and scheduling: workers started before the sample table is read (pandas), mesh misses
measured in a side pool while the main pool runs, and the engine pieces behind them (WarmPool, StartedMap,
SidePool). Every result is checked against an independent computation: the plain function, or the same images
measured in this process without any pool."""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pandas as pd
import pytest
from threadpoolctl import threadpool_limits

from fairvision.audits.settings import AuditSettings
from fairvision.datasets import load_portraits
from fairvision.engine import SidePool, StartedMap, WarmPool, imap
from fairvision.errors import FairvisionError

_STATE = {}


def _square(x):
    if x == 7:
        raise ValueError("seven")
    return x * x


def _die_on_three(x):
    if x == 3:
        os._exit(1)  # a crash in native code
    return x + 100


def _note_pid(folder):
    _STATE["init_pid"] = os.getpid()
    with open(os.path.join(folder, str(os.getpid())), "w"):
        pass


def _pid(x):
    return os.getpid(), _STATE.get("init_pid"), x


# --------------------------------------------------------------------------- engine pieces


def test_side_pool_takes_items_one_by_one_with_failures_as_values():
    with SidePool(_square, workers=1) as side:
        assert side.ready() == [] and side.backlog == 0  # nothing started yet
        got = []
        for i in range(10):
            side.submit(100 + i, i)
            got += side.ready()
        got += list(side.drain())
    assert sorted(o.index for o in got) == list(range(100, 110))  # every item once, with the index given
    by_index = {o.index: o for o in got}
    assert all(by_index[100 + i].value == i * i for i in range(10) if i != 7)
    assert not by_index[107].ok and by_index[107].failure.error == "ValueError"


def test_side_pool_worker_death_fails_what_it_held_and_goes_on():
    with SidePool(_die_on_three, workers=1) as side:
        for i in range(8):
            side.submit(i, i)
        got = {o.index: o for o in side.drain()}
    assert sorted(got) == list(range(8))
    assert not got[3].ok and got[3].failure.error == "WorkerDied"
    # items the dead worker did not hold are measured by fresh workers; those it held fail with it
    assert all(got[i].value == i + 100 for i in range(8) if got[i].ok)
    assert sum(o.ok for o in got.values()) >= 1


def test_side_pool_widened_shares_its_backlog():
    with SidePool(_pid, workers=1) as side:
        for i in range(40):
            side.submit(i, i)
        assert side.backlog == 40
        side.widen(1)  # a second worker takes what the first has not been sent
        outcomes = list(side.drain())
    assert sorted((o.index, o.value[2]) for o in outcomes) == [(i, i) for i in range(40)] and side.backlog == 0
    assert len({o.value[0] for o in outcomes}) == 2  # both workers measured


def test_side_pool_started_from_one_thread_fed_from_another():
    side = SidePool(_square, workers=1)
    side.start()  # forked here
    feeder = threading.Thread(target=lambda: [side.submit(i, i) for i in range(20) if i != 7])
    feeder.start()
    feeder.join()
    got = sorted((o.index, o.value) for o in side.drain())
    side.close()
    assert got == [(i, i * i) for i in range(20) if i != 7]


def test_warm_pool_workers_are_the_ones_its_map_uses(tmp_path):
    warm = WarmPool(2, initializer=_note_pid, initargs=(str(tmp_path),))
    out = list(warm.imap(_pid, range(30), chunksize=2))
    warm.close()  # taken by the map: nothing left to end
    assert [o.value[2] for o in out] == list(range(30))
    assert all(o.value[0] == o.value[1] for o in out)  # the initialiser ran in the worker that measured
    assert {o.value[0] for o in out} <= {int(p) for p in os.listdir(tmp_path)} and len(os.listdir(tmp_path)) <= 2
    with pytest.raises(FairvisionError, match="one map"):
        list(warm.imap(_pid, range(3)))


def test_warm_pool_replaces_a_dead_worker_and_ends_unused_ones(tmp_path):
    warm = WarmPool(2)
    got = {o.index: o for o in warm.imap(_die_on_three, range(12), chunksize=1, max_in_flight=1)}
    assert sorted(got) == list(range(12)) and not got[3].ok and got[3].failure.error == "WorkerDied"
    assert all(got[i].value == i + 100 for i in range(12) if i != 3)
    unused = WarmPool(2, initializer=_note_pid, initargs=(str(tmp_path),))
    unused.close()
    assert len(os.listdir(tmp_path)) <= 2


def test_started_map_runs_before_it_is_read_and_routes():
    routed = []

    def route(outcome):
        if outcome.ok and outcome.value % 2:
            routed.append(outcome.index)
            return True
        return False

    started = StartedMap(imap(_square, range(25), workers=2, chunksize=3), route=route)
    got = {o.index: o for o in started}
    started.close()
    assert sorted(list(got) + routed) == list(range(25))  # every outcome once: here or routed
    assert sorted(routed) == [i for i in range(25) if i != 7 and (i * i) % 2]
    assert all(got[i].value == i * i for i in got if i != 7) and not got[7].ok
    assert list(started) == []  # read once


# --------------------------------------------------------------------------- the skin measurement

_VISION = all(importlib.util.find_spec(m) is not None for m in ("mediapipe", "dlib", "cv2"))


def needs_vision(test):
    """The vision extra's models: mediapipe, dlib, OpenCV."""
    return pytest.mark.vision(pytest.mark.skipif(not _VISION, reason="needs the vision extra")(test))


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Six portraits (003 and 012: the mesh misses them, the detector + dlib find them), pixel noise and a flat
    image (no face anywhere) and a file that is not an image."""
    import cv2

    folder = tmp_path_factory.mktemp("mixed")
    portraits = load_portraits().set_index("sample_id")
    for sid in ("001", "002", "003", "004", "012", "030"):
        shutil.copy(portraits.image_path[sid], folder / f"{sid}.jpg")
    rng = np.random.default_rng(0)
    cv2.imwrite(str(folder / "noise.png"), rng.integers(0, 255, (240, 240, 3), dtype=np.uint8))
    cv2.imwrite(str(folder / "flat.png"), np.full((160, 160, 3), 128, np.uint8))
    (folder / "broken.jpg").write_bytes(b"not a jpeg")
    (folder / "LICENSE").write_text("not an image either")
    return folder


@needs_vision
def test_mesh_missed_second_chance_equals_the_full_face_finder():
    from fairvision.io.images import read_image
    from fairvision.skin.masks import skin_mask

    for sid in ("003", "012", "001"):
        path = load_portraits().set_index("sample_id").image_path[sid]
        img = read_image(path)
        full = skin_mask(img, "mediapipe", faces="largest")
        mesh_only = skin_mask(img, "mediapipe", faces="largest", detector_fallback=False)
        if mesh_only.reason == "no face found":  # a miss: the second chance alone gives the finder's answer
            second = skin_mask(img, "mediapipe", faces="largest", mesh_missed=True)
            assert second.sources == full.sources == ["detector+dlib"]
            assert np.array_equal(second.mask, full.mask)
        else:
            assert sid == "001" and full.sources == ["facemesh"]


@needs_vision
@pytest.mark.parametrize("as_table", [False, True])
def test_pooled_run_equals_an_in_process_run(mixed, as_table):
    """The early pool, the side pool and the matching of results to rows by path give exactly the rows of a run
    without any pool (every column); a table naming one image twice gets the same row twice."""
    from fairvision.skin.batch import measure_images

    source = mixed
    if as_table:
        files = sorted(p for p in mixed.iterdir() if p.suffix in (".jpg", ".png"))
        source = pd.DataFrame({"sample_id": [p.stem for p in files] + ["again"],
                               "image_path": [str(p) for p in files] + [str(files[0])]})
    pooled = measure_images(source, settings=AuditSettings(workers=2), progress=False)
    with threadpool_limits(1):  # as in the workers: a BLAS sum over two threads differs in its last digits
        inline = measure_images(source, settings=AuditSettings(workers=1), progress=False)
    pd.testing.assert_frame_equal(pooled, inline, check_exact=True)
    s = pooled.attrs["summary"]
    assert (s["images"], s["measured"]) == (10, 7) if as_table else (9, 6)
    assert (pooled.face_source == "detector+dlib").sum() == 2
    assert set(pooled.loc[~pooled.ok, "flags"]) == {"no_face", "unreadable_image"}


FRESH = r"""
import json, os, sys
import fairvision.engine.pool as pool
import fairvision.skin.batch as batch
light = {m: m in sys.modules for m in ("pandas", "duckdb", "pyarrow")}
start = pool.start_worker
def noted(*args):
    with open(os.path.join(sys.argv[2], f"{os.getpid()}.json"), "w") as fh:
        json.dump({"pandas": "pandas" in sys.modules}, fh)
    start(*args)
import fairvision.engine.side_pool as side_pool
pool.start_worker = side_pool.start_worker = noted  # forked workers run this copy of the modules
from fairvision.audits.settings import AuditSettings
df = batch.measure_images(sys.argv[1], settings=AuditSettings(workers=2), progress=False)
print(json.dumps({"light": light, "measured": int(df.ok.sum()), "rows": len(df)}))
"""


@needs_vision
def test_workers_start_before_pandas_is_imported(mixed, tmp_path):
    """In a fresh interpreter: the batch module imports neither pandas nor the store's DuckDB and pyarrow, and a
    run over a folder forks its workers (main pool and side pool) before it imports pandas to build its table."""
    notes = tmp_path / "notes"
    notes.mkdir()
    proc = subprocess.run([sys.executable, "-c", FRESH, str(mixed), str(notes)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["light"] == {"pandas": False, "duckdb": False, "pyarrow": False}
    assert (got["rows"], got["measured"]) == (9, 6)
    workers = [json.loads(p.read_text()) for p in notes.iterdir()]
    assert len(workers) == 3  # two in the main pool, one side worker for the two mesh misses
    assert not any(w["pandas"] for w in workers)


def test_image_reading_does_not_import_pandas():
    code = ("import sys, fairvision.io.images as im; "
            "print(int('pandas' in sys.modules), len(im.IMAGE_SUFFIXES))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["0", "7"], out.stderr[-1000:]
    from fairvision.datasets.demo import IMAGE_SUFFIXES as listed
    from fairvision.io.images import IMAGE_SUFFIXES

    assert set(IMAGE_SUFFIXES) == set(listed)  # a folder's early listing and its table name the same files


@needs_vision
def test_landmarks_read_from_the_wire_bytes_equal_the_attribute_reads():
    from mediapipe.framework.formats import landmark_pb2

    from fairvision.io.images import read_image
    from fairvision.vision.facemesh import get_face_mesh, landmark_xy

    result = get_face_mesh().process(read_image(load_portraits().image_path[0]))
    (face,) = result.multi_face_landmarks
    slow = np.array([(p.x, p.y) for p in face.landmark], dtype=np.float32)
    fast = landmark_xy(face)
    assert fast.shape == (468, 2) and fast.dtype == np.float32 and fast.tobytes() == slow.tobytes()
    # another layout (z left out, a visibility set): read attribute by attribute, the same values
    odd = landmark_pb2.NormalizedLandmarkList()
    odd.landmark.add(x=0.25, y=-1.5)
    odd.landmark.add(x=3.0, y=0.125, z=0.5, visibility=0.9)
    assert landmark_xy(odd).tolist() == [[0.25, -1.5], [3.0, 0.125]]


def test_a_missing_source_is_refused_before_the_heavy_imports(tmp_path):
    """``skin measure`` on a path that does not exist: one line, exit 2, before numpy, pandas or mediapipe load."""
    code = ("import sys; from fairvision.cli import main; "
            f"rc = main(['skin', 'measure', {str(tmp_path / 'nowhere')!r}, '-o', {str(tmp_path / 'o.parquet')!r}]); "
            "print(rc, *(int(m in sys.modules) for m in ('numpy', 'pandas', 'mediapipe')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.stdout.split() == ["2", "0", "0", "0"], proc.stdout + proc.stderr
    assert proc.stderr.strip() == f"error: {tmp_path / 'nowhere'}: no such file or folder"
    assert not (tmp_path / "o.parquet").exists()
