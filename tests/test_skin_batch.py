"""Batch skin measurement: end to end on real photos, cache, failures as rows, masks folder,
overlays, FairFace coverage by age group and gender, and the ``fairvision skin measure`` CLI."""

import os
import time

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.datasets import load_demo, load_portraits
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image
from fairvision.skin.batch import MeasureParams, measure_images

pytestmark = pytest.mark.vision

ONE, TWO = AuditSettings(workers=1), AuditSettings(workers=2)
MEAN = MeasureParams(method="mean")


@pytest.fixture(scope="module")
def portraits():
    return load_portraits()


@pytest.fixture()
def few(portraits, tmp_path):
    """Copies of 4 portraits (so tests can touch and corrupt files)."""
    rows = []
    for sid, path in zip(portraits.sample_id[:4], portraits.image_path[:4]):
        dst = tmp_path / "imgs" / f"{sid}.jpg"
        dst.parent.mkdir(exist_ok=True)
        dst.write_bytes(open(path, "rb").read())
        rows.append((sid, str(dst)))
    return pd.DataFrame(rows, columns=["sample_id", "image_path"])


def test_portraits_end_to_end_two_workers(portraits):
    from fairvision.skin.masks import skin_mask
    from fairvision.skin import measure

    df = measure_images(portraits, settings=TWO, progress=False, categories=False)
    assert len(df) == 62 and df.sample_id.tolist() == portraits.sample_id.tolist()
    for col in ["sample_id", "image_path", "L", "a", "b", "hue", "ita", "chroma", "n_pixels", "n_faces",
                "mask_method", "trust", "ok", "reason", "flags"]:
        assert col in df.columns
    assert df.ok.sum() >= 60
    ok = df[df.ok]
    assert ok.L.between(0, 100).all() and ok.hue.between(0, 360).all() and (ok.n_faces >= 1).all()
    assert np.allclose(ok.chroma, np.hypot(ok.a, ok.b), atol=1e-6)
    assert (ok.trust == "high").all() and df[~df.ok].reason.notna().all()
    assert df.attrs["summary"]["measured"] == df.ok.sum()
    # a row equals measuring that image directly (same mask, same estimator)
    img = read_image(portraits.image_path[5])
    direct = measure(img, mask=skin_mask(img).mask, method="thong")
    row = df.iloc[5]
    assert row.n_pixels == direct.n_pixels
    # float32 reductions may differ in the last digits between processes
    assert row.L == pytest.approx(direct.L, abs=1e-4) and row.hue == pytest.approx(direct.hue, abs=1e-4)


def test_measure_params_are_validated_and_hashed_as_before():
    """The worker and store-key form of the parameters keeps its keys and types (a changed form is a store miss)."""
    from fairvision.errors import ParameterError

    assert MeasureParams().to_dict() == {"method": "thong", "mask_method": "mediapipe", "skin_label": None,
                                         "faces": "largest", "max_faces": 5, "min_pixels": 200, "measure_options": {}}
    assert MeasureParams(mask_method="color", max_faces=2.0).to_dict()["mask_method"] == "colour"
    assert type(MeasureParams(max_faces=2.0).max_faces) is int
    for bad, name in (({"method": "magic"}, "method"), ({"mask_method": "x"}, "mask_method"), ({"faces": "one"}, "faces")):
        with pytest.raises(ParameterError, match=f"^{name} must be one of") as err:
            MeasureParams(**bad)
        assert err.value.parameter == name
    with pytest.raises(ParameterError, match="^mask_method 'file' needs a folder of supplied masks"):
        measure_images(["a.jpg"], params=MeasureParams(mask_method="file"), progress=False)


def test_store_hits_misses_and_resume(few, tmp_path):
    store = tmp_path / "store"
    kw = dict(params=MEAN, settings=ONE, progress=False, categories=False, store=store)
    first = measure_images(few, **kw)
    assert not first.from_cache.any()
    again = measure_images(few, **kw)
    assert again.from_cache.all()
    pd.testing.assert_frame_equal(first.drop(columns="from_cache"), again.drop(columns="from_cache"))
    # a changed parameter is a miss
    assert not measure_images(few, **{**kw, "params": MeasureParams(method="median_ita")}).from_cache.any()
    assert not measure_images(few, **{**kw, "params": MEAN.replace(faces="all")}).from_cache.any()
    # a touched file is still a hit (the key is the content); a changed file is a miss for that file only
    p = few.image_path[1]
    st = os.stat(p)
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert measure_images(few, **kw).from_cache.all()
    with open(p, "ab") as fh:
        fh.write(b"\0")  # after the JPEG's end: the same picture, other bytes
    assert measure_images(few, **kw).from_cache.tolist() == [True, False, True, True]
    # a moved copy of a stored image is a hit
    moved = tmp_path / "elsewhere.jpg"
    moved.write_bytes(open(few.image_path[2], "rb").read())
    assert measure_images([moved], **kw).from_cache.all()


def _stop_after(n):
    def cb(done, total):
        if done >= n:
            raise KeyboardInterrupt

    return cb


def test_interrupted_run_continues_where_it_stopped(few, tmp_path):
    kw = dict(params=MEAN, progress=False, categories=False, store=tmp_path / "store")
    with pytest.raises(KeyboardInterrupt):
        measure_images(few, settings=ONE, **{**kw, "progress": _stop_after(2)})
    resumed = measure_images(few, settings=TWO, **kw)
    assert resumed.from_cache.sum() == 2 and resumed.ok.all()


def test_failures_are_rows_with_reasons(few, tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 this is not really a jpeg" * 20)
    blank = tmp_path / "blank.png"
    Image.fromarray(np.full((240, 240, 3), 90, np.uint8)).save(blank)
    table = pd.concat([few, pd.DataFrame({"sample_id": ["bad", "gone", "blank"],
                                          "image_path": [str(bad), str(tmp_path / "gone.jpg"), str(blank)]})])
    df = measure_images(table, params=MEAN, settings=TWO, progress=False, categories=False).set_index("sample_id")
    assert df.loc[["bad", "gone", "blank"], "ok"].tolist() == [False, False, False]
    assert "bad.jpg: not a readable image" in df.loc["bad", "reason"]
    assert "gone.jpg: no such image file" in df.loc["gone", "reason"]
    assert df.loc["blank", "reason"] == "no face found" and "no_face" in df.loc["blank", "flags"]
    assert df.ok.sum() == 4
    s = df.attrs["summary"]
    assert (s["measured"], s["no_face"], s["failed"]) == (4, 1, 2)


def test_supplied_masks_binary_and_label_maps(few, tmp_path):
    from fairvision.skin.masks import skin_mask
    from fairvision.skin import measure

    bdir, ldir = tmp_path / "bin", tmp_path / "lab"
    bdir.mkdir()
    ldir.mkdir()
    masks = {}
    for sid, path in zip(few.sample_id[:3], few.image_path[:3]):
        m = skin_mask(read_image(path)).mask
        masks[sid] = m
        Image.fromarray(m.astype(np.uint8) * 255).save(bdir / f"{sid}.png")
        lab = np.where(m, 1, 0).astype(np.uint8)  # 1 = skin, CelebAMask-HQ style
        lab[:5, :5] = 17  # another part (e.g. hair)
        Image.fromarray(lab).save(ldir / f"{sid}_skin.png")
    a = measure_images(few, masks_dir=bdir, params=MEAN, settings=ONE, progress=False, categories=False)
    b = measure_images(few, masks_dir=ldir, params=MEAN.replace(skin_label=1), settings=ONE, progress=False,
                       categories=False)
    for df in (a, b):
        assert df.ok.tolist() == [True, True, True, False]
        assert df.reason.iloc[3] == "no mask file for this image"
        assert (df.mask_method.iloc[:3] == "file").all()
    for i, sid in enumerate(few.sample_id[:3]):
        direct = measure(read_image(few.image_path[i]), mask=masks[sid], method="mean")
        assert a.L.iloc[i] == pytest.approx(direct.L, abs=1e-9) == b.L.iloc[i]
        assert a.n_pixels.iloc[i] == masks[sid].sum()
    with pytest.raises(FairvisionError, match="skin_label"):
        measure_images(few, params=MeasureParams(skin_label=1), progress=False)
    other = tmp_path / "other"
    other.mkdir()
    Image.fromarray(np.zeros((4, 4), np.uint8)).save(other / "unrelated.png")
    with pytest.raises(FairvisionError, match="no mask matches"):
        measure_images(few, masks_dir=other, progress=False, categories=False)


def test_overlays_written(few, tmp_path):
    from fairvision.report.overlays import render_overlay

    out = tmp_path / "ov"
    df = measure_images(few.head(2), overlays_dir=out, settings=ONE, progress=False, categories=False,
                        overlay=render_overlay)
    for sid, path in zip(df.sample_id, df.image_path):
        ov = read_image(out / f"{sid}.png")
        img = read_image(path)
        assert ov.shape == img.shape
        changed = np.any(ov != img, axis=2)
        assert 0.01 < changed.mean() < 0.6  # the face region is drawn on, not the whole image
    # with a store, a run that asks for overlays that are missing recomputes them
    store = tmp_path / "c"
    measure_images(few.head(1), store=store, params=MEAN, settings=ONE, progress=False, categories=False)
    df = measure_images(few.head(1), store=store, params=MEAN, overlays_dir=tmp_path / "ov2", settings=ONE,
                        progress=False, categories=False, overlay=render_overlay)
    assert not df.from_cache.any() and (tmp_path / "ov2" / f"{df.sample_id[0]}.png").is_file()


def test_category_columns_join():
    pytest.importorskip("fairvision.skin.categories")
    df = measure_images(load_portraits().head(3), params=MEAN, settings=ONE, progress=False)
    assert len(df.columns) > 20 and df.ok.all()


def test_fairface_coverage_by_age_and_gender():
    """Coverage of the automatic mask on the 540 FairFace photos, per age group x gender."""
    from fairvision.skin.masks import skin_mask

    df = load_demo()
    res = [skin_mask(read_image(p)) for p in df.image_path]
    df["found"] = [r.ok for r in res]
    df["mesh"] = [r.ok and "facemesh" in r.sources for r in res]
    table = df.groupby(["age", "gender"], observed=True)[["found", "mesh"]].mean().unstack()
    print("\nFairFace automatic-mask coverage (share of 30 per cell)\n", table.round(3).to_string())
    assert df.found.mean() >= 0.98
    assert table["found"].min().min() >= 0.9  # no age x gender cell left behind
    assert table["mesh"].min().min() >= 0.8  # the face mesh alone


def test_fairface_measured_end_to_end():
    df = load_demo()
    sample = df.groupby(["age", "gender"], observed=True).head(1)  # 18 images, one per cell
    out = measure_images(sample, settings=TWO, params=MeasureParams(faces="largest"), progress=False, categories=False)
    assert len(out) == 18 and out.ok.sum() >= 17
    assert {"age", "gender"} <= set(out.columns)  # the table's attributes are kept
    assert (out.n_faces[out.ok] == 1).all()


# ----------------------------------------------------------------- CLI


def test_cli_measure_folder(tmp_path, few, capsys):
    folder = os.path.dirname(few.image_path[0])
    out = tmp_path / "skin.csv"
    code = main(["skin", "measure", folder, "-o", str(out), "--method", "mean", "-j", "1", "--no-progress",
                 "--store", str(tmp_path / "c")])
    assert code == 0
    got = pd.read_csv(out)
    assert len(got) == 4 and got.ok.all()
    assert "4 images: 4 measured, 0 no face" in capsys.readouterr().out
    code = main(["skin", "measure", folder, "-o", str(out), "--method", "mean", "-j", "1", "--no-progress",
                 "--cache", str(tmp_path / "c")])  # the old name of --store
    assert code == 0 and "(4 from the store)" in capsys.readouterr().out
    code = main(["skin", "measure", folder, "-o", str(out), "--method", "mean", "-j", "1", "--no-progress",
                 "--no-store"])
    assert code == 0 and "from the store" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["nowhere/"], "nowhere: no such file or folder"),
        (["{folder}", "-o", "x.xlsx"], "unknown output format"),
        (["{folder}", "--skin-label", "1"], "--skin-label applies to supplied masks"),
        (["{folder}", "--mask-method", "magic"], "--mask-method must be one of mediapipe, dlib, colour, auto"),
        (["{folder}", "--method", "magic"], "--method must be one of thong"),
        (["{folder}", "--masks", "nowhere"], "nowhere: no such masks folder"),
    ],
)
def test_cli_bad_input_is_one_line_and_exit_2(args, message, few, tmp_path, capsys):
    folder = os.path.dirname(few.image_path[0])
    args = [a.replace("{folder}", folder) for a in args]
    if "-o" not in args:
        args += ["-o", str(tmp_path / "s.parquet")]
    code = main(["skin", "measure", *args, "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: ") and message in err and "\n" not in err


def test_overlay_clusters_reproduce_the_estimator_assignment(portraits):
    """The overlay's per-pixel clusters (nearest final centre) give the estimator's own cluster sizes."""
    from fairvision.report.overlays import cluster_labels
    from fairvision.skin.masks import skin_mask
    from fairvision.skin import measure

    for path in portraits.image_path[:3]:
        img = read_image(path)
        mask = skin_mask(img).mask
        meas = measure(img, mask=mask, method="thong")
        labels = cluster_labels(img, mask, meas.extra)
        assert np.bincount(labels, minlength=5).tolist() == list(meas.extra["cluster_sizes"])


def test_changed_code_is_a_store_miss(few, tmp_path, monkeypatch):
    import fairvision.skin.batch as sb

    kw = dict(params=MEAN, settings=ONE, progress=False, categories=False, store=tmp_path / "c")
    measure_images(few.head(2), **kw)
    assert measure_images(few.head(2), **kw).from_cache.all()
    monkeypatch.setattr(sb, "code_signature", lambda: "different code")
    assert not measure_images(few.head(2), **kw).from_cache.any()


def test_deferred_second_chance_gives_the_in_process_answer(portraits):
    """With a pool, mesh misses get their detector + dlib second chance in a side worker while the pool
    goes on; the rows must equal a plain in-process run."""
    sub = portraits[portraits.sample_id.isin(["001", "002", "003", "012", "024", "030"])]
    pooled = measure_images(sub, params=MEAN, settings=TWO, progress=False, categories=False)
    inline = measure_images(sub, params=MEAN, settings=ONE, progress=False, categories=False)
    assert pooled.ok.all() and inline.ok.all()
    assert (pooled.face_source == inline.face_source).all()
    assert (pooled.face_source == "detector+dlib").sum() == 3
    assert np.allclose(pooled.L, inline.L, atol=1e-6) and (pooled.n_pixels == inline.n_pixels).all()


def test_skin_report_and_compare_commands(tmp_path, capsys):
    import json

    import pandas as pd

    from fairvision.cli import main

    rng = np.random.default_rng(0)

    def table(n, L_mean, h_mean):
        return pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "L": rng.normal(L_mean, 8, n),
                             "hue": rng.normal(h_mean, 8, n), "g": rng.choice(["x", "y"], n)})

    a, b = tmp_path / "train.csv", tmp_path / "generated.csv"
    table(300, 55, 50).to_csv(a, index=False)
    table(300, 70, 60).to_csv(b, index=False)
    assert main(["skin", "report", str(a), "--by", "g", "-o", str(tmp_path / "r1")]) == 0
    doc = json.loads((tmp_path / "r1" / "report.json").read_text())
    assert doc["sections"][0]["id"] == "skin-colour"
    assert main(["skin", "compare", str(a), str(b), "-o", str(tmp_path / "r2")]) == 0
    out = capsys.readouterr().out
    assert "chi-square(3)" in out
    doc = json.loads((tmp_path / "r2" / "report.json").read_text())
    values = {k: v for s in doc["sections"] for blk in s["blocks"] if blk.get("name") == "comparison" for k, v in blk["values"].items()}
    assert values["p-value"] < 1e-6
    assert main(["skin", "compare", str(a), str(tmp_path / "none.csv"), "-o", str(tmp_path / "r3")]) == 2


def test_listing_file_of_image_paths(tmp_path):
    """A .txt listing (one path per line, relative to the listing; blanks and # comments skipped)."""
    from fairvision.skin.batch_tables import sample_table
    from fairvision.errors import InputFileError

    (tmp_path / "a").mkdir()
    for name in ("x.jpg", "y.png"):
        (tmp_path / "a" / name).write_bytes(b"")
    listing = tmp_path / "images.txt"
    listing.write_text("# my images\na/x.jpg\n\n" + str(tmp_path / "a" / "y.png") + "\n")
    df = sample_table(listing)
    assert list(df["sample_id"]) == ["x", "y"]
    assert list(df["image_path"]) == [str(tmp_path / "a" / "x.jpg"), str(tmp_path / "a" / "y.png")]
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(InputFileError, match="empty.txt: the listing names no image"):
        sample_table(tmp_path / "empty.txt")
    listing.write_text("a/x.jpg\nb/x.jpg\n")  # one stem twice: the paths are the sample ids
    assert list(sample_table(listing)["sample_id"]) == [str(tmp_path / "a" / "x.jpg"), str(tmp_path / "b" / "x.jpg")]
