"""Derived face sets (docs/METHODS.md §13.6): mean-colour padding and centring of the cropped-only faces, the
aligned faces' transform, pixels landing where the transform says, eye centres re-found by the landmark model on
the aligned portraits, the manifest and the CLI."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.curation.faces import derive_face_sets
from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.io.images import read_image
from fairvision.vision import facemesh
from fairvision.vision.face_crops import EYE_MIDPOINT_AT, EYES_AT, align_face, crop_face, face_points, find_faces, ffhq_quad


def test_crop_face_is_centred_and_padded_with_the_mean_colour():
    img = np.zeros((40, 60, 3), np.uint8)
    img[:, :30] = (200, 100, 0)  # mean (100, 50, 0)
    c = crop_face(img, [40, 10, 60, 30], scale=2.0)  # centre (50, 20), 40 x 40 crop: x 30..70, y 0..40
    assert c.image.shape == (40, 40, 3) and c.region == (30, 0, 70, 40)
    assert c.fill == (100, 50, 0)
    assert (c.image[:, 30:] == (100, 50, 0)).all()  # columns 60..70 lie outside the image
    assert (c.image[:, :30] == img[:, 30:60]).all()
    assert c.padded == pytest.approx(10 / 40)


def test_ffhq_quad_hand_example():
    # upright face: eyes (40, 50) and (60, 50), mouth corners (42, 72) and (58, 72): e = (20, 0), m = (0, 22)
    q = ffhq_quad((40, 50), (60, 50), (42, 72), (58, 72))
    # x = e - rot90(m) = (20, 0) - (-22, 0) = (42, 0) -> unit (1, 0) * max(40, 39.6) = (40, 0); y = (0, 40)
    c = np.array([50, 50 + 2.2])
    assert np.allclose(q, [c + (-40, -40), c + (-40, 40), c + (40, 40), c + (40, -40)])


@pytest.mark.parametrize("method", ["eye-mouth", "ffhq", "eyes"])
def test_pixels_land_where_the_transform_says(method):
    """A synthetic image with bright dots at the eyes: the dots' centroids in the output are at the
    transform's coordinates (independent of any landmark model)."""
    h, w = 400, 500
    img = np.full((h, w, 3), 30, np.uint8)
    yy, xx = np.mgrid[:h, :w]
    eyes = np.array([[201.3, 180.7], [262.9, 171.2]])
    for ex, ey in eyes:
        img[((xx - ex) ** 2 + (yy - ey) ** 2) <= 9] = 255
    a = align_face(img, eyes[0], eyes[1], (212.0, 245.0), (258.0, 238.0), size=256, method=method)
    pred = a.transform(eyes)
    out = a.image[..., 0].astype(float) - 30
    for px, py in pred:
        win = (np.abs(xx[:256, :256] - px) < 8) & (np.abs(yy[:256, :256] - py) < 8)
        wgt = out * win
        cx, cy = (wgt * xx[:256, :256]).sum() / wgt.sum(), (wgt * yy[:256, :256]).sum() / wgt.sum()
        assert abs(cx - px) < 0.5 and abs(cy - py) < 0.5
    if method == "eyes":
        assert np.allclose(pred, np.array(EYES_AT) * 256 - 0.5)


@pytest.fixture(scope="module")
def portraits():
    out = []
    for p in load_portraits()["image_path"][:12]:
        img = read_image(p)
        faces = find_faces(img)
        # the mesh re-finds the eyes on the aligned outputs below: only faces it finds in the original can be
        # measured that way (003 and 012 are found by the finder's detector + dlib stage)
        if faces and faces[0]["source"] == "facemesh":
            out.append((img, faces[0]))
    assert len(out) >= 10
    return out


def _eyes(image):
    lm = facemesh.face_landmarks(image)
    if not lm:
        return np.full((2, 2), np.inf)
    q = face_points(lm[0])
    return np.array([q["left_eye"], q["right_eye"]])


def test_eye_mouth_alignment_puts_the_eye_midpoint_at_the_same_coordinates_with_a_level_eye_line(portraits):
    """The default alignment (rotation from the eye line, scale from the eye-mouth distance) fixes the eye
    MIDPOINT and a level eye line, not each eye (each eye's x varies with the face's proportions; method="eyes"
    fixes both): the transform puts every portrait's eye midpoint at EYE_MIDPOINT_AT exactly with the eye line
    level, and the face mesh run again on the aligned 512 px output finds the eye centres' midpoint there.
    Measured on all 59 portraits with a face: 75% within 2 px, median 1.5 px, largest 5.2 (turned heads); the
    rest is the mesh's own re-detection noise (the pixels themselves land within 0.5 px,
    test_pixels_land_where_the_transform_says). Level eye line, |y_left - y_right| of the re-found eye centres:
    on all 59, 78% within 2 px, median 1.1 px, largest 8.0; on these 10, 7 within 2 px (largest 4.5)."""
    target = np.array(EYE_MIDPOINT_AT) * 512 - 0.5
    errors, tilt, left_x = [], [], []
    for img, f in portraits:
        a = align_face(img, f["left_eye"], f["right_eye"], f["left_mouth"], f["right_mouth"], size=512)
        le, re_ = a.transform([f["left_eye"], f["right_eye"]])
        left_x.append(le[0])
        assert np.allclose((le + re_) / 2, target, atol=1e-6) and abs(le[1] - re_[1]) < 1e-6
        found = _eyes(a.image)
        errors.append(np.abs(found.mean(axis=0) - target).max())
        tilt.append(abs(found[0, 1] - found[1, 1]))
    errors, tilt = np.array(errors), np.array(tilt)
    assert np.isfinite(errors).all(), np.round(errors, 1)
    assert np.median(errors) <= 2.0, np.round(errors, 1)
    assert np.mean(errors <= 2.0) >= 0.6, np.round(errors, 1)
    assert np.mean(tilt <= 2.0) >= 0.6, np.round(tilt, 1)  # the re-found eye line is level
    assert np.ptp(left_x) > 2  # each eye's x is not fixed: it follows the face's proportions


def test_aligned_portraits_put_the_eyes_at_the_same_coordinates(portraits):
    """method="eyes": the transform puts every portrait's eyes at the same output coordinates exactly, and the
    face mesh run again on the aligned output finds them near there. Measured at 512 px on these 10 portraits
    (largest coordinate error per face): 0.7-2.9 px for 7, 5.4 and 11.4 for two turned heads, one not re-found;
    median 2.1. The spread is the mesh's own re-detection noise (the pixels land within 0.5 px, see
    test_pixels_land_where_the_transform_says)."""
    target = np.array(EYES_AT) * 512 - 0.5
    errors = []
    for img, f in portraits:
        a = align_face(img, f["left_eye"], f["right_eye"], size=512, method="eyes")
        assert np.allclose(a.transform([f["left_eye"], f["right_eye"]]), target, atol=1e-6)
        errors.append(np.abs(_eyes(a.image) - target).max())
    # the mesh's own re-detection error (pose-dependent) dominates; most faces are within 2 px
    errors = np.array(errors)
    assert np.isfinite(errors).mean() >= 0.8, np.round(errors, 1)  # the mesh finds the aligned face again
    assert np.median(errors) <= 2.5, np.round(errors, 1)
    assert np.mean(errors <= 2.0) >= 0.4, np.round(errors, 1)


def test_ffhq_aligned_eyes_follow_the_transform(portraits):
    errors, where = [], []
    for img, f in portraits[:6]:
        a = align_face(img, f["left_eye"], f["right_eye"], f["left_mouth"], f["right_mouth"], size=512)
        pred = a.transform([f["left_eye"], f["right_eye"]])
        errors.append(np.abs(_eyes(a.image) - pred).max())
        where.append(pred)
    assert np.median(errors) <= 3.0, np.round(errors, 1)
    # FFHQ's square also follows the mouth: the eyes do not land at fixed coordinates (documented)
    assert np.ptp(np.array(where)[:, 0, 0]) > 2


def test_derive_face_sets_with_given_landmarks(tmp_path):
    data = load_portraits().head(3)
    ids = list(data["sample_id"])
    lm = pd.DataFrame({"sample_id": ids, "box_x0": [150, 150, 150], "box_y0": [150, 150, 150],
                       "box_x1": [350, 350, 350], "box_y1": [350, 350, 350],
                       "left_eye_x": [210, 210, 210], "left_eye_y": [200, 200, 200],
                       "right_eye_x": [290, 290, 290], "right_eye_y": [200, 200, 200],
                       "left_mouth_x": [220, np.nan, 220], "left_mouth_y": [290, np.nan, 290],
                       "right_mouth_x": [280, 280, 280], "right_mouth_y": [290, 290, 900]})
    res = derive_face_sets(data, tmp_path / "faces", landmarks=lm, size=128)
    m = res.manifest.set_index("sample_id")
    assert m["cropped_path"].notna().all()
    assert m.loc[ids[0], "aligned_path"] == f"aligned/{ids[0]}__0.png"
    assert m.loc[ids[1], "skipped"] == "eye or mouth landmarks missing"
    assert "outside the image" in m.loc[ids[2], "skipped"]
    assert read_image(tmp_path / "faces" / m.loc[ids[0], "aligned_path"]).shape == (128, 128, 3)
    assert read_image(tmp_path / "faces" / m.loc[ids[0], "cropped_path"]).shape == (400, 400, 3)
    assert (tmp_path / "faces" / "manifest.csv").is_file()


def test_cli_crops_end_to_end(tmp_path):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for p in load_portraits()["image_path"][:2]:
        (folder / p.split("/")[-1]).write_bytes(open(p, "rb").read())
    assert main(["curate", "crops", str(folder), "-o", str(tmp_path / "out"), "--size", "64"]) == 0
    man = pd.read_csv(tmp_path / "out" / "manifest.csv")
    assert len(man) >= 1 and man["aligned_path"].notna().any()
    assert main(["curate", "crops", str(folder), "-o", str(tmp_path / "o2"), "--method", "nope"]) == 2


def test_cli_crops_names_images_without_a_face(tmp_path, capsys):
    """An image with no face (a flat grey picture) leaves a manifest row (skipped = "no face found") and is
    named in the console summary; the portrait's face is counted as a face, the grey image not."""
    from PIL import Image

    folder = tmp_path / "imgs"
    folder.mkdir()
    p = load_portraits()["image_path"][0]
    (folder / "person.jpg").write_bytes(open(p, "rb").read())
    Image.new("RGB", (300, 300), (128, 128, 128)).save(folder / "blank.png")
    assert main(["curate", "crops", str(folder), "-o", str(tmp_path / "out"), "--size", "64"]) == 0
    out = capsys.readouterr().out
    assert "no face found in 1 image(s)" in out and "blank" in out
    assert "2 images, 1 faces" in out
    man = pd.read_csv(tmp_path / "out" / "manifest.csv")
    blank = man[man["sample_id"] == "blank"]
    assert len(blank) == 1 and blank["skipped"].iat[0] == "no face found" and blank["face"].isna().all()
    assert blank["cropped_path"].isna().all() and (man["sample_id"] == "person").sum() == 1
    assert ",0," in (tmp_path / "out" / "manifest.csv").read_text().splitlines()[1 + int(man.index[man["sample_id"] == "person"][0])]
