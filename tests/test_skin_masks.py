"""Image reading and skin masks: supplied files, face mesh, dlib, colour rule."""

import numpy as np
import pytest
from PIL import Image

from fairvision.datasets import load_portraits
from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.images import read_image, write_png
from fairvision.skin.masks import MaskResult, colour_mask, load_mask, polygon_mask, skin_mask

cv2 = pytest.importorskip("cv2")


# ----------------------------------------------------------------- read_image


def test_read_image_matches_pil_on_the_portraits():
    for path in load_portraits()["image_path"][:5]:
        ours = read_image(path)
        ref = np.asarray(Image.open(path).convert("RGB"))
        assert ours.dtype == np.uint8 and ours.shape == ref.shape
        # both use libjpeg; allow for IDCT rounding differences between builds
        assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 2


def test_read_image_applies_exif_orientation(tmp_path):
    arr = np.zeros((20, 40, 3), np.uint8)
    arr[:, :20] = (250, 0, 0)  # red left half
    img = Image.fromarray(arr)
    exif = img.getexif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    img.save(tmp_path / "o.jpg", exif=exif, quality=95)
    out = read_image(tmp_path / "o.jpg")
    assert out.shape == (40, 20, 3)
    # after a clockwise turn the red half is on top
    assert out[:15, :, 0].mean() > 200 and out[25:, :, 0].mean() < 50


def test_read_image_converts_grey_rgba_and_16_bit(tmp_path):
    Image.fromarray(np.full((4, 5), 77, np.uint8)).save(tmp_path / "g.png")
    assert read_image(tmp_path / "g.png").tolist() == np.full((4, 5, 3), 77).tolist()
    rgba = np.zeros((3, 3, 4), np.uint8)
    rgba[...] = (10, 20, 30, 128)
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.png")
    assert read_image(tmp_path / "a.png")[0, 0].tolist() == [10, 20, 30]
    bgr16 = np.zeros((2, 2, 3), np.uint16)
    bgr16[...] = (65535, 257 * 100, 0)  # B, G, R for cv2.imwrite
    cv2.imwrite(str(tmp_path / "d.png"), bgr16)
    assert read_image(tmp_path / "d.png")[0, 0].tolist() == [0, 100, 255]  # RGB


def test_read_image_errors_name_the_file(tmp_path):
    with pytest.raises(InputFileError, match="nope.jpg: no such image file"):
        read_image(tmp_path / "nope.jpg")
    (tmp_path / "bad.jpg").write_bytes(b"not a jpeg at all" * 10)
    with pytest.raises(InputFileError, match="bad.jpg: not a readable image"):
        read_image(tmp_path / "bad.jpg")
    (tmp_path / "empty.png").write_bytes(b"")
    with pytest.raises(InputFileError, match="empty"):
        read_image(tmp_path / "empty.png")


def test_write_png_round_trip(tmp_path):
    arr = np.random.default_rng(0).integers(0, 256, (7, 9, 3), dtype=np.uint8)
    write_png(tmp_path / "x.png", arr)
    assert np.array_equal(read_image(tmp_path / "x.png"), arr)


# ----------------------------------------------------------------- supplied masks


def test_load_mask_binary_and_label_maps(tmp_path):
    m = np.zeros((6, 8), np.uint8)
    m[1:4, 2:5] = 255
    Image.fromarray(m).save(tmp_path / "bin.png")
    assert np.array_equal(load_mask(tmp_path / "bin.png"), m > 0)
    Image.fromarray((m > 0).astype(np.uint8)).save(tmp_path / "01.png")
    assert np.array_equal(load_mask(tmp_path / "01.png"), m > 0)
    # CelebAMask-HQ style label map: 0 background, 1 skin, 2 nose, 4 left eye
    lab = np.zeros((6, 8), np.uint8)
    lab[1:5, 1:7] = 1
    lab[2, 3] = 2
    lab[2, 5] = 4
    Image.fromarray(lab).save(tmp_path / "lab.png")
    got = load_mask(tmp_path / "lab.png", skin_label=1, shape=(6, 8))
    assert got.sum() == 4 * 6 - 2 and not got[2, 3] and not got[2, 5]
    with pytest.raises(InputFileError, match="label map.*skin_label"):
        load_mask(tmp_path / "lab.png")


def test_load_mask_errors(tmp_path):
    Image.fromarray(np.zeros((6, 8), np.uint8)).save(tmp_path / "m.png")
    with pytest.raises(InputFileError, match="m.png: mask is 8x6 but the image is 10x5"):
        load_mask(tmp_path / "m.png", shape=(5, 10))
    col = np.zeros((4, 4, 3), np.uint8)
    col[0, 0] = (255, 0, 0)
    Image.fromarray(col).save(tmp_path / "c.png")
    with pytest.raises(InputFileError, match="colour mask"):
        load_mask(tmp_path / "c.png")
    with pytest.raises(InputFileError, match="no such mask file"):
        load_mask(tmp_path / "missing.png")


def test_file_method_reports_empty_mask_as_outcome(tmp_path):
    Image.fromarray(np.zeros((6, 8), np.uint8)).save(tmp_path / "m.png")
    res = skin_mask(np.zeros((6, 8, 3), np.uint8), "file", path=tmp_path / "m.png")
    assert not res.ok and res.reason == "no skin pixels in the mask file"


# ----------------------------------------------------------------- rasterising and colour rule


def test_polygon_mask_hand_worked():
    # closed rectangle x 2..7, y 3..9 inclusive: 6 x 7 pixels; minus x 4..5, y 5..6: 2 x 2
    rect = np.array([[2, 3], [7, 3], [7, 9], [2, 9]])
    hole = np.array([[4, 5], [5, 5], [5, 6], [4, 6]])
    m = polygon_mask((12, 10), [rect], [hole])
    assert m.sum() == 6 * 7 - 2 * 2
    assert m[3, 2] and m[9, 7] and not m[5, 4] and not m[2, 2] and not m[3, 8]


def test_polygon_mask_agrees_with_point_in_polygon():
    from matplotlib.path import Path as MplPath

    poly = np.array([[5.0, 5.0], [60.0, 12.0], [48.0, 70.0], [20.0, 55.0]])
    m = polygon_mask((80, 80), [poly])
    yy, xx = np.mgrid[:80, :80]
    ref = MplPath(poly).contains_points(np.c_[xx.ravel(), yy.ravel()]).reshape(80, 80)
    # rasterisers disagree only on boundary pixels
    assert np.count_nonzero(m ^ ref) < 0.1 * ref.sum()
    assert np.count_nonzero(ref & ~m) <= 2


def test_colour_rule_matches_hand_computed_ycrcb():
    # BT.601 full range: Cr = 128 + 0.713 (R - Y), Cb = 128 + 0.564 (B - Y)
    colours = np.array([[224, 172, 140], [90, 60, 45], [30, 120, 220], [120, 200, 90], [255, 255, 255]], float)
    y = colours @ [0.299, 0.587, 0.114]
    cr = 128 + 0.713 * (colours[:, 0] - y)
    cb = 128 + 0.564 * (colours[:, 2] - y)
    expected = (cr >= 133) & (cr <= 173) & (cb >= 77) & (cb <= 127)
    assert expected.tolist() == [True, True, False, False, False]
    img = np.repeat(colours.astype(np.uint8)[:, None, :], 30, axis=1).repeat(30, axis=0)  # 150 x 30 stripes
    res = colour_mask(img, min_pixels=1)
    got = res.mask.reshape(5, 30, 30).all(axis=(1, 2))
    assert got.tolist() == expected.tolist()
    assert res.trust == "low" and res.n_faces == 0


def test_bad_method_and_bad_image_raise():
    with pytest.raises(FairvisionError, match="unknown mask method"):
        skin_mask(np.zeros((4, 4, 3), np.uint8), "magic")
    with pytest.raises(FairvisionError, match="uint8 RGB"):
        skin_mask(np.zeros((4, 4), np.uint8))


# ----------------------------------------------------------------- real models


@pytest.fixture(scope="module")
def portraits():
    return [read_image(p) for p in load_portraits()["image_path"]]


@pytest.mark.vision
def test_facemesh_oval_is_a_single_ordered_cycle():
    from fairvision.vision.facemesh import chain_cycle, regions

    oval = regions()["face_oval"]
    assert len(oval) == 36 and len(set(oval.tolist())) == 36
    assert [sorted(c.tolist()) for c in chain_cycle([(1, 2), (2, 3), (3, 1)])] == [[1, 2, 3]]


@pytest.mark.vision
def test_automatic_mask_covers_at_least_60_of_62_portraits(portraits):
    results = [skin_mask(img) for img in portraits]
    found = sum(r.ok for r in results)
    print(f"mediapipe mask: {found} of {len(portraits)} portraits; "
          f"{sum('detector+dlib' in r.sources for r in results)} via the detector + dlib second chance")
    assert found >= 60
    for img, r in zip(portraits, results):
        if r.ok:
            assert isinstance(r, MaskResult) and r.trust == "high" and r.n_faces >= 1
            assert r.mask.shape == img.shape[:2] and r.n_pixels >= 200
            x0, y0, x1, y1 = np.min([b for b in r.boxes], axis=0)[:2].tolist() + np.max(r.boxes, axis=0)[2:].tolist()
            ys, xs = np.nonzero(r.mask)
            assert xs.min() >= np.floor(x0) - 1 and xs.max() <= np.ceil(x1) + 1
            assert ys.min() >= np.floor(y0) - 1 and ys.max() <= np.ceil(y1) + 1


@pytest.mark.vision
def test_mesh_mask_excludes_eyes_and_lips(portraits):
    from fairvision.vision.facemesh import face_landmarks, regions

    img = portraits[0]
    pts = face_landmarks(img)[0]
    res = skin_mask(img)
    reg = regions()
    for part in ("left_eye", "right_eye", "lips"):
        cx, cy = np.round(pts[reg[part]].mean(axis=0)).astype(int)
        assert not res.mask[cy, cx], part
    # the nose tip (mesh landmark 1) is skin
    nx, ny = np.round(pts[1]).astype(int)
    assert res.mask[ny, nx]


@pytest.mark.vision
def test_dlib_mask_and_auto_on_a_portrait(portraits):
    img = portraits[0]
    d = skin_mask(img, "dlib")
    m = skin_mask(img, "mediapipe")
    assert d.ok and d.sources == ["dlib"] and d.trust == "high"
    # two independent landmark models agree on where the face is
    inter = np.count_nonzero(d.mask & m.mask)
    assert inter / min(d.n_pixels, m.n_pixels) > 0.7
    assert skin_mask(img, "auto").method == "mediapipe"


@pytest.mark.vision
def test_no_face_is_an_outcome_not_a_crash():
    grey = np.full((200, 200, 3), 128, np.uint8)
    for method in ("mediapipe", "dlib"):
        r = skin_mask(grey, method)
        assert not r.ok and r.reason == "no face found" and r.n_faces == 0
    r = skin_mask(grey, "auto")  # falls through to the colour rule, which finds no skin colour either
    assert not r.ok and r.method == "colour" and "too few" in r.reason


@pytest.mark.vision
def test_largest_face_selection(portraits):
    multi = None
    for img in portraits:
        r = skin_mask(img)
        if r.n_faces > 1:
            multi = (img, r)
            break
    if multi is None:
        pytest.skip("no multi-face portrait")
    img, r = multi
    one = skin_mask(img, faces="largest")
    assert one.n_faces == 1 and one.n_pixels < r.n_pixels


@pytest.mark.vision
def test_big_images_are_downscaled_for_the_mesh_and_landmarks_scaled_back(portraits):
    from fairvision.vision.facemesh import face_landmarks

    img = portraits[0]
    big = cv2.resize(img, (img.shape[1] * 3, img.shape[0] * 3), interpolation=cv2.INTER_CUBIC)
    small_pts = face_landmarks(img)[0]
    big_pts = face_landmarks(big, max_side=img.shape[0])[0]  # meshed at the original size
    assert np.abs(big_pts / 3 - small_pts).max() < 3.0
    res = skin_mask(big)
    assert res.ok and res.mask.shape == big.shape[:2]
    assert res.n_pixels == pytest.approx(9 * skin_mask(img).n_pixels, rel=0.1)


def test_read_image_max_side(tmp_path):
    Image.fromarray(np.full((300, 600, 3), 40, np.uint8)).save(tmp_path / "w.png")
    out = read_image(tmp_path / "w.png", max_side=150)
    assert out.shape == (75, 150, 3) and (out == 40).all()
