"""Saliency-cropping benchmark, building: composite geometry pixel-exact on solid-colour images, the balanced
and seeded draw of pairs, and ``fairvision benchmark cropping build`` end to end (an attribute column, and the
measured skin colour of the bundled portraits) with its one-line errors (docs/METHODS.md §6.8)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from fairvision.cli import main
from fairvision.errors import ParameterError
from fairvision.io.images import read_image
from fairvision.vision.composites import compose, layout, plan_pairs, write_composite

RED, BLUE = (200, 30, 40), (20, 40, 210)


def _solid(h, w, rgb):
    return np.broadcast_to(np.array(rgb, dtype=np.uint8), (h, w, 3)).copy()


# ------------------------------------------------------------------ geometry


def test_layout_by_hand():
    lay = layout((40, 30, 3), (90, 60, 3), gap=7)  # default width: the smaller, 30; 90 x 60 -> 45 x 30
    assert (lay.width, lay.height, lay.gap) == (30, 40 + 7 + 45, 7)
    assert lay.top == (0, 0, 30, 40) and lay.bottom == (0, 47, 30, 92)
    lay = layout((33, 50), (20, 20), gap=0)  # 33 x 50 -> 20 wide: 13.2 rows -> 13
    assert lay.top == (0, 0, 20, 13) and lay.bottom == (0, 13, 20, 33) and lay.height == 33
    lay = layout((40, 30), (90, 60), width=60, gap=5)  # enlarged: 40 x 30 -> 80 x 60
    assert lay.top == (0, 0, 60, 80) and lay.bottom == (0, 85, 60, 175)
    d = lay.to_dict()
    assert d["bottom_y0"] == 85 and d["top_y1"] == 80 and d["width"] == 60 and d["height"] == 175
    with pytest.raises(ParameterError, match="^gap"):
        layout((4, 4), (4, 4), gap=-1)
    with pytest.raises(ParameterError, match="^width"):
        layout((4, 4), (4, 4), width=0)


def test_compose_pixel_exact():
    img, lay = compose(_solid(40, 30, RED), _solid(90, 60, BLUE), gap=7)
    assert img.shape == (92, 30, 3) and img.dtype == np.uint8
    assert (img[:40] == RED).all()  # the top face, unscaled
    assert (img[40:47] == 255).all()  # the gap: white rows
    assert (img[47:] == BLUE).all()  # the bottom face, 90 x 60 shrunk to 45 x 30 (a solid colour stays exact)
    x0, y0, x1, y1 = lay.bottom
    assert (x1 - x0, y1 - y0) == (30, 45)
    # a real image scaled: what PIL's area-like box filter gives, within rounding
    rng = np.random.default_rng(1)
    big = rng.integers(0, 256, (64, 48, 3), dtype=np.uint8)
    img, lay = compose(_solid(10, 24, RED), big, gap=3)
    ref = np.asarray(Image.fromarray(big).resize((24, 32), Image.BOX))
    assert lay.bottom == (0, 13, 24, 45)
    assert np.abs(img[13:45].astype(int) - ref.astype(int)).max() <= 1


def test_write_composite_round_trip(tmp_path):
    Image.fromarray(_solid(40, 30, RED)).save(tmp_path / "a.png")
    Image.fromarray(_solid(90, 60, BLUE)).save(tmp_path / "b.jpg", quality=100)
    d = write_composite({"top_path": tmp_path / "b.jpg", "bottom_path": tmp_path / "a.png",
                         "output": tmp_path / "c.png", "width": None, "gap": 4})
    assert (d["top_x0"], d["top_y0"], d["top_x1"], d["top_y1"]) == (0, 0, 30, 45)
    assert (d["bottom_y0"], d["bottom_y1"], d["height"]) == (49, 89, 89)
    back = read_image(tmp_path / "c.png")
    assert back.shape == (89, 30, 3) and (back[45:49] == 255).all() and (back[49:] == RED).all()


# ------------------------------------------------------------------ the draw


def _groups():
    g = ["A"] * 7 + ["B"] * 12 + ["C"] * 3 + [None] * 2
    return np.array(g, dtype=object)


def test_plan_pairs_balanced_and_seeded():
    groups = _groups()
    plan, pairs = plan_pairs(groups, categories=["A", "B", "C", "D"], per_pair=6, seed=3)
    # every unordered pair of two different groups with images, none of a group with itself
    assert pairs.set_index(["group_a", "group_b"])["composites"].to_dict() == {
        ("A", "B"): 6, ("A", "C"): 6, ("A", "D"): 0, ("B", "C"): 6, ("B", "D"): 0, ("C", "D"): 0}
    assert pairs.loc[pairs["composites"] == 0, "skipped"].str.contains("no image of D").all()
    assert len(plan) == 18
    assert (groups[plan["top_row"]] == plan["top_group"]).all() and (groups[plan["bottom_row"]] == plan["bottom_group"]).all()
    for pair, p in plan.groupby("pair"):
        a, b = pair.split(" | ")
        orders = Counter(zip(p["top_group"], p["bottom_group"]))
        assert orders == {(a, b): 3, (b, a): 3}, (pair, orders)  # both orders equally often
    # without replacement within a pair where the group is large enough (A: 7, B: 12 >= 6)
    ab = plan[plan["pair"] == "A | B"]
    rows = np.r_[ab["top_row"], ab["bottom_row"]]
    assert len(set(rows)) == 12
    # C has 3 images for 6 slots per pair: each exactly twice per pair
    ac = plan[plan["pair"] == "A | C"]
    c_rows = np.where(ac["top_group"] == "C", ac["top_row"], ac["bottom_row"])
    assert sorted(Counter(c_rows).values()) == [2, 2, 2]
    # used as evenly as possible across pairs: A's 7 images fill 12 slots, 1 or 2 each
    a_rows = np.concatenate([np.where(plan["top_group"] == "A", plan["top_row"], -1),
                             np.where(plan["bottom_group"] == "A", plan["bottom_row"], -1)])
    use = Counter(a_rows[a_rows >= 0])
    assert len(use) == 7 and set(use.values()) <= {1, 2}
    again, _ = plan_pairs(groups, categories=["A", "B", "C", "D"], per_pair=6, seed=3)
    other, _ = plan_pairs(groups, categories=["A", "B", "C", "D"], per_pair=6, seed=4)
    pd.testing.assert_frame_equal(plan, again)
    assert not plan[["top_row", "bottom_row"]].equals(other[["top_row", "bottom_row"]])


def test_plan_pairs_keeps_one_person_apart_and_refuses_odd():
    groups = np.array(["x"] * 4 + ["y"] * 4, dtype=object)
    subjects = np.array(["p1", "p2", "p3", "p4", "p1", "p2", "p3", "p4"])  # each person in both groups
    for seed in range(10):
        plan, _ = plan_pairs(groups, per_pair=4, seed=seed, subjects=subjects)
        assert (subjects[plan["top_row"]] != subjects[plan["bottom_row"]]).all()
    with pytest.raises(ParameterError, match="^per_pair must be even"):
        plan_pairs(groups, per_pair=3)


def test_plan_pairs_uses_a_small_group_evenly_within_and_across_pairs():
    """A group with fewer images than composites per pair: counted here by hand over the plan, every image is used
    equally often over all pairs and within each pair (counts differ by at most one). The former draw took each
    pair's extra images from a fresh shuffle: 7 images in 30 slots were used 3 to 6 times."""
    for n_small in (2, 3, 7):
        groups = np.array(["S"] * n_small + ["B"] * 20 + ["C"] * 20 + ["D"] * 20, dtype=object)
        for seed in range(4):
            plan, _ = plan_pairs(groups, per_pair=10, seed=seed)
            rows = np.r_[plan["top_row"], plan["bottom_row"]]
            pair = np.r_[plan["pair"], plan["pair"]]
            in_small = rows < n_small
            overall = Counter(rows[in_small])
            assert len(overall) == n_small and sum(overall.values()) == 30
            assert max(overall.values()) - min(overall.values()) <= 1, (n_small, seed, overall)
            for name in ("B | S", "C | S", "D | S"):
                within = Counter(rows[in_small & (pair == name)])
                assert sum(within.values()) == 10 and len(within) == n_small
                assert max(within.values()) - min(within.values()) <= 1, (n_small, seed, name, within)


# ------------------------------------------------------------------ the command


COLOURS = {"dark": (60, 40, 30), "mid": (140, 100, 80), "light": (230, 200, 180)}


def solid_table(d: Path, per_group: int = 4) -> Path:
    """Solid-colour 'faces' of three tones (sizes vary), one row without a tone, as a sample table."""
    rows = []
    for k, (tone, rgb) in enumerate(COLOURS.items()):
        for i in range(per_group):
            p = d / f"{tone}{i}.png"
            Image.fromarray(_solid(40 + 10 * i, 30 + 2 * k, rgb)).save(p)
            rows.append({"sample_id": f"{tone}{i}", "image_path": str(p), "tone": tone, "person": f"{tone}{i}",
                         "site": "lab"})
    Image.fromarray(_solid(20, 20, (0, 0, 0))).save(d / "blank.png")
    rows.append({"sample_id": "blank", "image_path": str(d / "blank.png"), "tone": None, "person": "blank",
                 "site": "lab"})
    pd.DataFrame(rows).to_csv(d / "samples.csv", index=False)
    return d / "samples.csv"


def test_build_from_an_attribute_column(tmp_path, capsys):
    table = solid_table(tmp_path)
    out = tmp_path / "bench"
    rc = main(["benchmark", "cropping", "build", str(table), "--attr", "tone", "--per-pair", "4", "--gap", "9",
               "-o", str(out), "--seed", "5", "--no-progress", "-j", "1"])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "group assignment: 1 of 13 images left out (no value of tone: 1)" in text
    m = pd.read_csv(out / "composites.csv", dtype=str)
    assert list(m.columns) == [
        "composite_id", "image_path", "attribute", "top_sample_id", "top_subject_id", "top_group", "bottom_sample_id",
        "bottom_subject_id", "bottom_group", "top_x0", "top_y0", "top_x1", "top_y1", "bottom_x0", "bottom_y0",
        "bottom_x1", "bottom_y1", "width", "height", "gap", "seed", "pair"]
    assert len(m) == 12 and (m["attribute"] == "tone").all() and (m["seed"] == "5").all()
    assert Counter(zip(m["top_group"], m["bottom_group"])) == {(a, b): 2 for a in COLOURS for b in COLOURS if a != b}
    assert "blank" not in set(m["top_sample_id"]) | set(m["bottom_sample_id"])
    assert set(m["pair"]) == {"dark | light", "dark | mid", "light | mid"}  # sorted groups
    samples = pd.read_csv(table).set_index("sample_id")
    for r in m.itertuples(index=False):
        assert samples.loc[r.top_sample_id, "tone"] == r.top_group and samples.loc[r.bottom_sample_id, "tone"] == r.bottom_group
        img = read_image(out / r.image_path)
        top_src = read_image(samples.loc[r.top_sample_id, "image_path"])
        bot_src = read_image(samples.loc[r.bottom_sample_id, "image_path"])
        w = min(top_src.shape[1], bot_src.shape[1])  # the smaller width, aspect kept
        ht = round(top_src.shape[0] * w / top_src.shape[1])
        hb = round(bot_src.shape[0] * w / bot_src.shape[1])
        assert img.shape == (ht + 9 + hb, w, 3) and (int(r.width), int(r.height), int(r.gap)) == (w, ht + 9 + hb, 9)
        assert [int(r.top_x0), int(r.top_y0), int(r.top_x1), int(r.top_y1)] == [0, 0, w, ht]
        assert [int(r.bottom_x0), int(r.bottom_y0), int(r.bottom_x1), int(r.bottom_y1)] == [0, ht + 9, w, ht + 9 + hb]
        assert (img[:ht] == COLOURS[r.top_group]).all() and (img[ht:ht + 9] == 255).all()
        assert (img[ht + 9:] == COLOURS[r.bottom_group]).all()
    im = pd.read_csv(out / "images.csv", dtype=str, keep_default_na=False).set_index("sample_id")
    assert len(im) == 13 and im.loc["blank", "group"] == "" and im.loc["blank", "reason"] == "no value of tone"
    assert (im.drop(index="blank")["group"] == samples.drop(index="blank")["tone"]).all()
    rep = (out / "report.json").read_text()
    assert "no value of tone" in rep and "data:image/png" not in (out / "report.html").read_text()


def test_build_report_warns_of_groups_with_few_people(tmp_path, capsys):
    """Four people per tone: fewer than --min-subjects (default 10), so the build report says the audit will not
    test these groups; with --min-subjects 4 it says nothing."""
    table = solid_table(tmp_path)
    for minimum, warned in ((None, True), ("4", False)):
        out = tmp_path / f"bench{minimum}"
        extra = ["--min-subjects", minimum] if minimum else []
        assert main(["benchmark", "cropping", "build", str(table), "--attr", "tone", "--per-pair", "2", "-o", str(out),
                     "--no-progress", "-j", "1", *extra]) == 0
        capsys.readouterr()
        doc = json.loads((out / "report.json").read_text())
        few = [f for f in doc["findings"] if "fewer than" in f["sentence"]]
        if warned:
            assert len(few) == 1 and few[0]["severity"] == "medium"
            assert "3 groups have fewer than 10 people (dark: 4 people, light: 4 people, mid: 4 people)" in few[0]["sentence"]
            assert "does not test them" in few[0]["sentence"]
        else:
            assert not few


def test_build_counts_composites_of_an_unreadable_image(tmp_path, capsys):
    table = solid_table(tmp_path, per_group=2)
    (tmp_path / "dark0.png").write_bytes(b"not a png")
    out = tmp_path / "bench"
    rc = main(["benchmark", "cropping", "build", str(table), "--attr", "tone", "--per-pair", "2", "-o", str(out),
               "--no-progress", "-j", "1", "--seed", "1"])
    text = capsys.readouterr().out
    assert rc == 0, text
    m = pd.read_csv(out / "composites.csv", dtype=str)
    used = (m["top_sample_id"] == "dark0") | (m["bottom_sample_id"] == "dark0")
    assert not used.any() and len(m) < 6
    assert f"composing: {6 - len(m)} of 6 composites left out (unreadable image: {6 - len(m)})" in text
    assert sorted(p.name for p in (out / "composites").iterdir()) == sorted(f"{c}.png" for c in m["composite_id"])


@pytest.mark.parametrize("args, message", [
    (["--attr", "colour"], "no column 'colour' for --attr"),
    (["--attr", "tone", "--per-pair", "3"], "--per-pair must be even"),
    (["--attr", "tone", "--gap", "-2"], "--gap must be a whole number"),
    (["--attr", "tone", "--subject-col", "who"], "no subject column 'who'"),
    (["--attr", "site"], "no pair of two different groups has images (lab: 7; group assignment: 0 of 7 images"),
    (["--attr", "tone", "--L-threshold", "120"], "--L-threshold must lie within 0..100"),
])
def test_build_bad_inputs_exit_2_with_one_line(args, message, tmp_path, capsys):
    table = solid_table(tmp_path, per_group=2)
    rc = main(["benchmark", "cropping", "build", str(table), *args, "-o", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "o").exists()


def shared_store(tmp_path_factory) -> Path:
    """One results store for the portraits of both cropping test modules: measured once per session."""
    return tmp_path_factory.getbasetemp() / "cropping-store"


def build_portraits(tmp_path_factory, name: str) -> Path:
    """A new temporary folder with the benchmark of the bundled portraits (2 composites per pair) in ``bench/``."""
    d = tmp_path_factory.mktemp(name)
    rc = main(["benchmark", "cropping", "build", "portraits", "-o", str(d / "bench"), "--per-pair", "2",
               "--store", str(shared_store(tmp_path_factory)), "--no-progress"])
    assert rc == 0
    return d


@pytest.fixture(scope="module")
def portraits_build(tmp_path_factory):
    d = build_portraits(tmp_path_factory, "portraits")
    rc = main(["skin", "measure", "portraits", "-o", str(d / "skin.csv"), "--store", str(shared_store(tmp_path_factory)),
               "--no-progress"])
    assert rc == 0
    return d


def test_build_on_the_portraits_groups_by_measured_skin_colour(portraits_build):
    d = portraits_build
    m = pd.read_csv(d / "bench" / "composites.csv", dtype={"top_sample_id": str, "bottom_sample_id": str})
    skin = pd.read_csv(d / "skin.csv", dtype={"sample_id": str}).set_index("sample_id")
    present = sorted(skin["skin_colour"].dropna().unique())
    n_pairs = len(present) * (len(present) - 1) // 2
    assert len(m) == 2 * n_pairs and (m["attribute"] == "skin").all()
    # the groups are skin measure's light/dark x red/yellow cells (L* 60, h* 55)
    assert (m["top_group"] == skin.loc[m["top_sample_id"], "skin_colour"].to_numpy()).all()
    assert (m["bottom_group"] == skin.loc[m["bottom_sample_id"], "skin_colour"].to_numpy()).all()
    assert ((m["width"] == 500) & (m["height"] == 1050) & (m["gap"] == 50)).all()  # 500 x 500 portraits
    assert all((d / "bench" / p).is_file() for p in m["image_path"])
    # the groups with fewer than 10 measured portraits (one person each) are named in the report's findings
    sizes = skin["skin_colour"].value_counts()
    few = sizes[sizes < 10]
    doc = json.loads((d / "bench" / "report.json").read_text())
    warned = [f["sentence"] for f in doc["findings"] if "fewer than 10 people" in f["sentence"]]
    assert len(warned) == (1 if len(few) else 0)
    assert all(f"{g}: {n} " in warned[0] for g, n in few.items())
