"""The one face finder (docs/METHODS.md §2.5): one fallback order for skin masks, face crops and the face
descriptor, the same box for a photo through all three, noise rejected, later stages only when needed, and the
finder named in the report of a run that used it."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from fairvision.datasets.demo import demo_path
from fairvision.io.images import read_image
from fairvision.skin.masks import skin_mask
from fairvision.vision import detect, dlib_landmarks, facemesh
from fairvision.vision import face_crops
from fairvision.vision import faces as finder
from fairvision.vision.face_descriptor import FaceDescriptor, embed_faces

PORTRAITS = demo_path("portraits")
#: bundled portraits the face mesh misses (the mediapipe detector + dlib finds them; HOG alone does not)
MESH_MISSES = ("003", "012", "024")


def _portrait(name: str) -> np.ndarray:
    return read_image(PORTRAITS / f"{name}.jpg")


def _extent(points: np.ndarray) -> np.ndarray:
    return np.r_[points.min(axis=0), points.max(axis=0)].astype(np.float32)


def test_mesh_face_box_is_the_extent_of_the_face_oval():
    img = _portrait("001")
    faces = finder.find_faces(img)
    mesh = facemesh.face_landmarks(img)  # the model wrapper on its own
    assert len(faces) == len(mesh) >= 1 and {f.source for f in faces} == {"facemesh"}
    oval = facemesh.regions()["face_oval"]
    expected = sorted((_extent(m[oval]) for m in mesh), key=lambda b: -float((b[2] - b[0]) * (b[3] - b[1])))
    for f, b in zip(faces, expected):
        assert np.array_equal(f.box, b) and f.landmarks.shape == (468, 2)


def test_a_face_the_mesh_misses_is_found_by_the_detector_with_dlib_landmarks():
    img = _portrait("003")
    assert facemesh.face_landmarks(img) == []  # the mesh alone finds nothing here
    faces = finder.find_faces(img)
    assert len(faces) == 1 and faces[0].source == "detector+dlib" and faces[0].landmarks.shape == (68, 2)
    best = detect.detect_faces(img)[0][0]
    pts = dlib_landmarks.landmarks(img, [best])[0]
    assert np.array_equal(faces[0].landmarks, pts)
    assert np.array_equal(faces[0].box, _extent(pts[dlib_landmarks.FACE_OUTLINE]))


@pytest.mark.parametrize("name", MESH_MISSES)
def test_curate_crops_finds_the_portraits_the_mesh_misses(name):
    faces = face_crops.find_faces(_portrait(name))
    assert len(faces) == 1 and faces[0]["source"] == "detector+dlib" and faces[0]["model"] == "dlib"
    assert faces[0]["left_eye"][0] < faces[0]["right_eye"][0]


@pytest.mark.parametrize("path", [PORTRAITS / "001.jpg", PORTRAITS / "003.jpg", PORTRAITS / "061.jpg",
                                  demo_path("fairface") / "fairface_0001.jpg"])
def test_the_same_face_box_through_the_three_entry_points(path):
    """Skin mask, face crops and face descriptor report the same box (largest face) for the same photo; 061
    and fairface_0001 have two faces, 003 is a face the mesh misses."""
    img = read_image(path)
    box = finder.find_faces(img)[0].box
    mask = skin_mask(img, "mediapipe")
    crops = face_crops.find_faces(img)
    vec, info = FaceDescriptor().describe(img)
    assert mask.ok and vec is not None and vec.shape == (128,)
    assert np.array_equal(mask.boxes[0], box)
    assert np.array_equal(crops[0]["box"], box)
    assert np.array_equal(np.array(info["box"], dtype=np.float32), box)
    assert mask.n_faces == len(crops) == info["n_faces"]


def test_the_descriptor_describes_the_portraits_the_hog_detector_misses():
    """dlib's HOG detector finds no face in these portraits (the descriptor's only finder before); the shared
    finder does, so each gets a descriptor, from a 5-point shape fitted in the finder's box."""
    paths = [PORTRAITS / f"{n}.jpg" for n in MESH_MISSES]
    assert all(dlib_landmarks.detect(read_image(p)) == [] for p in paths)
    emb = embed_faces(paths)
    assert emb.status["ok"].all() and emb.embeddings.shape == (3, 128)
    assert np.isfinite(emb.embeddings).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_noise_has_no_face_in_any_stage_or_entry_point(seed):
    noise = np.random.default_rng(seed).integers(0, 256, (320, 320, 3), dtype=np.uint8)
    assert finder.find_faces(noise) == []
    for stage in finder.ORDER:
        assert finder.find_faces(noise, stages=(stage,)) == []
    assert skin_mask(noise, "mediapipe").reason == "no face found"
    assert face_crops.find_faces(noise) == []
    vec, info = FaceDescriptor().describe(noise)
    assert vec is None and info["reason"] == "no face"


def test_later_stages_run_only_when_the_earlier_ones_find_nothing(monkeypatch):
    calls = []
    real_detect, real_hog = detect.detect_faces, dlib_landmarks.detect
    monkeypatch.setattr(detect, "detect_faces", lambda *a, **k: calls.append("detector") or real_detect(*a, **k))
    monkeypatch.setattr(dlib_landmarks, "detect", lambda *a, **k: calls.append("hog") or real_hog(*a, **k))
    assert finder.find_faces(_portrait("001"))[0].source == "facemesh"
    assert calls == []  # the mesh found the face: no fallback ran
    assert finder.find_faces(_portrait("003"))[0].source == "detector+dlib"
    assert calls == ["detector"]  # the detector found it: the HOG stage did not run
    flat = np.full((200, 200, 3), 128, np.uint8)
    assert finder.find_faces(flat) == [] and calls == ["detector", "detector", "hog"]


def test_stage_selection_and_unknown_stages():
    img = _portrait("003")
    assert finder.find_faces(img, stages=("facemesh",)) == []
    assert finder.find_faces(img, stages=("dlib",)) == []  # HOG misses this one
    with pytest.raises(ValueError, match="unknown face finder stage 'cnn'"):
        finder.find_faces(img, stages=("cnn",))


def test_face_finder_meta_names_the_finder_and_its_libraries():
    meta = finder.face_finder_meta()
    assert meta["name"] == finder.FACE_FINDER and meta["version"] == finder.FACE_FINDER_VERSION
    assert meta["order"] == ["facemesh", "detector+dlib", "dlib"]
    assert meta["mediapipe"] == importlib.metadata.version("mediapipe")
    import dlib

    assert str(meta["dlib"]).startswith(dlib.__version__)


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fairvision", *args], capture_output=True, text=True, timeout=300,
                          cwd=cwd)


def test_a_report_written_after_a_face_finder_run_names_the_finder(tmp_path):
    """Two real runs in fresh processes: ``skin report`` on images (measured on two worker processes with the
    face finder) names the finder in report.json's meta; ``skin report`` on a table already measured (no face
    found in this run) does not."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    for n in ("001", "003", "005"):
        (folder / f"{n}.jpg").write_bytes((PORTRAITS / f"{n}.jpg").read_bytes())
    r = _cli("skin", "report", str(folder), "-o", str(tmp_path / "rep"), "--no-store", "--workers", "2",
             cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "rep" / "report.json").read_text())["meta"]
    assert meta["face_finder"] == json.loads(json.dumps(finder.face_finder_meta()))

    table = tmp_path / "skin.csv"
    pd.DataFrame({"sample_id": list("abcdef"), "L": [60.0, 55, 50, 65, 40, 58],
                  "hue": [50.0, 55, 60, 45, 52, 58]}).to_csv(table, index=False)
    r = _cli("skin", "report", str(table), "-o", str(tmp_path / "rep2"), "--no-store", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "face_finder" not in json.loads((tmp_path / "rep2" / "report.json").read_text())["meta"]


def test_derived_face_sets_record_the_finder_stage_and_crop_the_mesh_misses(tmp_path):
    from fairvision.audits.curation.faces import derive_face_sets

    data = pd.DataFrame({"sample_id": ["001", "003"], "image_path": [str(PORTRAITS / "001.jpg"),
                                                                     str(PORTRAITS / "003.jpg")]})
    res = derive_face_sets(data, tmp_path / "faces", size=64)
    m = res.manifest.set_index("sample_id")
    assert m.loc["001", "source"] == "facemesh" and m.loc["003", "source"] == "detector+dlib"
    assert m["cropped_path"].notna().all() and m["aligned_path"].notna().all() and m["skipped"].isna().all()
    box = finder.find_faces(_portrait("003"))[0].box
    assert np.allclose(m.loc["003", ["box_x0", "box_y0", "box_x1", "box_y1"]].astype(float), box)


def test_report_meta_names_the_finder_once_it_was_used():
    from fairvision.report import Report

    finder.mark_used()
    assert Report(meta={"source": "x"}).to_dict()["meta"]["face_finder"] == json.loads(
        json.dumps(finder.face_finder_meta()))
    assert Report(meta={"face_finder": "given"}).to_dict()["meta"]["face_finder"] == "given"  # never overwritten
