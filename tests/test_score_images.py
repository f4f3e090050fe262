"""``fairvision score images``: PSNR, SSIM, label-map Dice and identity similarity per image pair.

SSIM is checked against scikit-image's ``structural_similarity`` (Gaussian weights, sigma 1.5, population
covariance); PSNR and Dice are worked by hand; the table goes through ``fairvision audit model``.
"""

import math
import shutil
from pathlib import Path

import cv2
import numpy as np
import pandas as pd
import pytest
from skimage.metrics import structural_similarity

from fairvision.cli import main
from fairvision.errors import FairvisionError
from fairvision.metrics.ssim import ssim

PORTRAITS = Path("/work/shared/data/portraits")
if not PORTRAITS.is_dir():
    PORTRAITS = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "data" / "portraits"


def _sk(a, b, **kw):
    return structural_similarity(a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, **kw)


def _png(path: Path, rgb: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = rgb if rgb.ndim == 2 else cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR)
    assert cv2.imwrite(str(path), arr)
    return path


def _run(*args):
    return main([*map(str, args)])


def _one_error_line(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("channels", [None, 3])
def test_ssim_matches_scikit_image(channels):
    rng = np.random.default_rng(1)
    shape = (37, 52) if channels is None else (37, 52, channels)
    base = cv2.GaussianBlur(rng.integers(0, 256, shape, dtype=np.uint8), (7, 7), 2)
    noisy = np.clip(base + rng.normal(0, 12, shape), 0, 255).astype(np.uint8)
    kw = {} if channels is None else {"channel_axis": -1}
    assert ssim(noisy, base) == pytest.approx(_sk(noisy, base, data_range=255, **kw), abs=1e-12)
    # float images in [0, 1]: data range 1
    f1, f2 = noisy / 255.0, base / 255.0
    assert ssim(f1, f2) == pytest.approx(_sk(f1, f2, data_range=1.0, **kw), abs=1e-12)
    assert ssim(base, base) == pytest.approx(1.0)


def test_ssim_refuses_other_shapes_and_tiny_images():
    with pytest.raises(FairvisionError, match="differs"):
        ssim(np.zeros((20, 20)), np.zeros((20, 21)))
    with pytest.raises(FairvisionError, match="at least 11 x 11"):
        ssim(np.zeros((10, 30)), np.zeros((10, 30)))


def _pairs(tmp_path):
    """pred/ref folders: a nested pair with a constant offset of 5 (MSE 25), a textured pair, one
    prediction and one reference without a partner."""
    rng = np.random.default_rng(0)
    pred, ref = tmp_path / "pred", tmp_path / "ref"
    flat = np.full((24, 30, 3), 100, np.uint8)
    _png(ref / "a" / "flat.png", flat)
    _png(pred / "a" / "flat.png", flat + 5)
    tex = cv2.GaussianBlur(rng.integers(0, 256, (32, 40, 3), dtype=np.uint8), (5, 5), 1.5)
    tex_pred = np.clip(tex.astype(int) + rng.integers(-20, 21, tex.shape), 0, 255).astype(np.uint8)
    _png(ref / "tex.png", tex)
    _png(pred / "tex.png", tex_pred)
    _png(pred / "extra.png", flat)
    _png(ref / "only_ref.png", flat)
    (pred / "notes.txt").write_text("not an image")
    return pred, ref, tex_pred, tex


def test_score_images_psnr_ssim_and_unmatched(tmp_path, capsys):
    pred, ref, tex_pred, tex = _pairs(tmp_path)
    out = tmp_path / "scores.csv"
    assert _run("score", "images", "--pred", pred, "--ref", ref, "-o", out) == 0
    text = capsys.readouterr().out
    assert "2 files without a partner" in text and "extra.png" in text and "only_ref.png" in text
    assert "2 image pairs" in text
    df = pd.read_csv(out, dtype={"sample_id": str}).set_index("sample_id")
    assert list(df.index) == ["a/flat", "tex"]
    assert list(df.columns) == ["pred_path", "ref_path", "psnr", "ssim"]
    assert df.loc["a/flat", "psnr"] == pytest.approx(10 * math.log10(255 ** 2 / 25))
    # constant images: both variances 0, SSIM is the luminance term (2 * 100 * 105 + C1) / (100^2 + 105^2 + C1)
    c1 = (0.01 * 255) ** 2
    assert df.loc["a/flat", "ssim"] == pytest.approx((2 * 100 * 105 + c1) / (100 ** 2 + 105 ** 2 + c1))
    assert df.loc["tex", "ssim"] == pytest.approx(_sk(tex_pred, tex, data_range=255, channel_axis=-1), abs=1e-12)
    mse = np.mean((tex_pred.astype(float) - tex) ** 2)
    assert df.loc["tex", "psnr"] == pytest.approx(10 * math.log10(255 ** 2 / mse))
    assert df.loc["tex", "pred_path"].endswith("pred/tex.png")


def test_identical_images_cap_psnr_and_audit_model_reads_the_table(tmp_path, capsys):
    pred, ref = tmp_path / "pred", tmp_path / "ref"
    rng = np.random.default_rng(3)
    rows = []
    for i in range(12):
        img = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
        _png(ref / f"{i:03d}.png", img)
        noise = 0 if i == 0 else (4 if i % 2 else 30)
        _png(pred / f"{i:03d}.png", np.clip(img.astype(int) + rng.integers(-noise, noise + 1, img.shape), 0, 255)
             .astype(np.uint8))
        rows.append({"sample_id": f"{i:03d}", "group": "a" if i % 2 else "b", "subject_id": f"s{i}"})
    out = tmp_path / "scores.parquet"
    assert _run("score", "images", "--pred", pred, "--ref", ref, "-o", out) == 0
    df = pd.read_parquet(out).set_index("sample_id")
    assert df.loc["000", "psnr"] == 100.0 and df.loc["000", "ssim"] == pytest.approx(1.0)
    samples = tmp_path / "samples.csv"
    pd.DataFrame(rows).to_csv(samples, index=False)
    capsys.readouterr()
    rep = tmp_path / "report"
    assert _run("audit", "model", "-s", samples, "--scores", out, "-a", "group", "-m", "psnr", "-m", "ssim",
                "--n-boot", "0", "--min-subjects", "1", "-o", rep) == 0
    assert (rep / "report.html").is_file()


def test_size_mismatch_is_an_error_naming_the_pair_unless_resized(tmp_path, capsys):
    pred, ref = tmp_path / "pred", tmp_path / "ref"
    rng = np.random.default_rng(4)
    big = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    small = cv2.resize(big, (30, 20), interpolation=cv2.INTER_AREA)
    _png(pred / "x.png", big)
    _png(ref / "x.png", small)
    out = tmp_path / "s.csv"
    assert _run("score", "images", "--pred", pred, "--ref", ref, "-o", out) == 2
    line = _one_error_line(capsys)
    assert "x.png is 60 x 40" in line and "30 x 20" in line and "--resize" in line
    assert not out.exists()
    assert _run("score", "images", "--pred", pred, "--ref", ref, "-o", out, "--resize") == 0
    df = pd.read_csv(out)
    # the area-resized prediction equals the reference exactly
    assert df.loc[0, "psnr"] == 100.0 and df.loc[0, "ssim"] == pytest.approx(1.0)


def test_label_maps_mean_dice_hand_worked(tmp_path, capsys):
    pred, ref, _, _ = _pairs(tmp_path)
    pl, rl = tmp_path / "pl", tmp_path / "rl"
    ref_map = np.zeros((12, 12), np.uint8)
    ref_map[:, :6], ref_map[:, 6:] = 1, 2   # 72 pixels of 1, 72 of 2
    pred_map = np.ones((12, 12), np.uint8)  # all 1: Dice(1) = 2*72/(144+72) = 2/3, Dice(2) = 0
    _png(rl / "tex.png", ref_map)
    _png(pl / "tex.png", pred_map)
    _png(pl / "a" / "flat.png", pred_map)  # its reference label map is missing
    out = tmp_path / "s.csv"
    assert _run("score", "images", "--pred", pred, "--ref", ref, "--pred-labels", pl, "--ref-labels", rl,
                "-o", out) == 0
    text = capsys.readouterr().out
    assert "3 files without a partner" in text and "not scored: 1 no label map pair" in text
    df = pd.read_csv(out, dtype={"sample_id": str}).set_index("sample_id")
    assert df.loc["tex", "mean_dice"] == pytest.approx((2 / 3 + 0) / 2)
    assert math.isnan(df.loc["a/flat", "mean_dice"])
    # background ignored: label 0 is absent anyway here, so ignoring 1 leaves label 2 alone
    assert _run("score", "images", "--pred", pred, "--ref", ref, "--pred-labels", pl, "--ref-labels", rl,
                "--ignore-label", "1", "-o", out) == 0
    assert pd.read_csv(out, dtype={"sample_id": str}).set_index("sample_id").loc["tex", "mean_dice"] == 0.0


def test_colour_label_map_and_half_label_options_are_errors(tmp_path, capsys):
    pred, ref, _, _ = _pairs(tmp_path)
    pl, rl = tmp_path / "pl", tmp_path / "rl"
    _png(pl / "tex.png", np.zeros((12, 12, 3), np.uint8))
    _png(rl / "tex.png", np.zeros((12, 12), np.uint8))
    out = tmp_path / "s.csv"
    assert _run("score", "images", "--pred", pred, "--ref", ref, "--pred-labels", pl, "-o", out) == 2
    assert "--ref-labels" in _one_error_line(capsys)
    assert _run("score", "images", "--pred", pred, "--ref", ref, "--pred-labels", pl, "--ref-labels", rl,
                "-o", out) == 2
    line = _one_error_line(capsys)
    assert "tex.png" in line and "single-channel" in line
    assert _run("score", "images", "--pred", tmp_path / "nope", "--ref", ref, "-o", out) == 2
    assert "nope" in _one_error_line(capsys)


def test_identity_similarity_of_real_portraits(tmp_path, capsys):
    face = PORTRAITS / "001.jpg"
    if not face.is_file():
        pytest.skip("bundled portraits not found")
    pred, ref = tmp_path / "pred", tmp_path / "ref"
    pred.mkdir(), ref.mkdir()
    shutil.copy(face, ref / "same.jpg")
    shutil.copy(face, pred / "same.jpg")
    img = cv2.imread(str(face))
    shutil.copy(face, ref / "blank.jpg")
    cv2.imwrite(str(pred / "blank.jpg"), np.full_like(img, 128))  # no face in the prediction
    out = tmp_path / "s.csv"
    assert _run("score", "images", "--pred", pred, "--ref", ref, "-o", out, "--identity", "--no-store") == 0
    assert "not scored: 1 no face in prediction" in capsys.readouterr().out
    df = pd.read_csv(out, keep_default_na=False, na_values=[""]).set_index("sample_id")
    assert df.loc["same", "identity_similarity"] == pytest.approx(1.0)
    assert math.isnan(df.loc["blank", "identity_similarity"])
    assert df.loc["blank", "identity_reason"] == "no face in prediction"


def test_sixteen_bit_label_maps_keep_their_ids(tmp_path):
    from fairvision.io.label_maps import read_label_map

    m = np.zeros((12, 12), np.uint16)
    m[3:6, 3:6] = 300  # above 255: an 8-bit conversion would lose it
    p = _png(tmp_path / "m.png", m)
    got = read_label_map(p)
    assert got.dtype == np.int64 and got.shape == (12, 12) and int(got.max()) == 300 and int((got == 300).sum()) == 9


def test_two_files_of_one_sample_are_an_error(tmp_path, capsys):
    pred, ref, _, _ = _pairs(tmp_path)
    _png(pred / "tex.jpg", np.zeros((32, 40, 3), np.uint8))
    assert _run("score", "images", "--pred", pred, "--ref", ref, "-o", tmp_path / "s.csv") == 2
    line = _one_error_line(capsys)
    assert "tex.jpg" in line and "tex.png" in line and "'tex'" in line
