"""Zero-shot vision-language probe from precomputed embeddings (docs/METHODS.md §12.1)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.vlm import (audit_vlm, label_embeddings, load_prompt_sets, read_text_embeddings,
                                   zero_shot_labels)
from fairvision.cli import main
from fairvision.errors import FairvisionError
from fairvision.report import Report
from fairvision.report.sections.vlm import vlm_section

D = 16
LABELS = ["man", "woman", "unspecified"]


def planted(n_subjects=150, per_subject=2, shift=0.0, seed=0):
    """Images of subjects in groups A and B; group B's images pulled towards 'unspecified' by ``shift``."""
    rng = np.random.default_rng(seed)
    axes = np.eye(D)[:3] * 4.0
    subj = np.repeat(np.arange(n_subjects), per_subject)
    group = np.where(np.arange(n_subjects) % 2 == 0, "A", "B")[subj]
    true = np.where(rng.random(n_subjects) < 0.5, "man", "woman")[subj]
    x = np.where((true == "man")[:, None], axes[0], axes[1]) + rng.normal(size=(len(subj), D))
    pull = (group == "B") & (rng.random(len(subj)) < 0.5)
    x = x + pull[:, None] * shift * axes[2]
    data = pd.DataFrame({"sample_id": [f"img{i}" for i in range(len(subj))], "subject_id": subj,
                         "group": group, "truth": true})
    text = np.repeat(axes, 4, axis=0) + rng.normal(scale=0.2, size=(12, D))
    tdf = pd.DataFrame(text, columns=[f"e{i}" for i in range(D)])
    tdf.insert(0, "prompt", [f"prompt {i}" for i in range(12)])
    tdf.insert(0, "label", np.repeat(LABELS, 4))
    img = pd.DataFrame({"sample_id": data["sample_id"], "embedding": list(x)})
    return data, img, tdf, x, text


def test_default_prompt_sets_have_four_prompts_per_label_and_a_neutral_option():
    sets = load_prompt_sets()
    assert {"gender", "indoor_outdoor", "urban_rural"} <= set(sets)
    assert "unspecified" in sets["gender"]
    assert all(len(p) == 4 for s in sets.values() for p in s.values())


def test_labels_match_direct_numpy_argmax():
    data, img, tdf, x, text = planted(shift=1.0, seed=3)
    res = audit_vlm(data, img, tdf, ["group"], n_boot=50)
    t = text / np.linalg.norm(text, axis=1, keepdims=True)
    means = np.stack([t[i * 4:(i + 1) * 4].mean(axis=0) for i in range(3)])
    means /= np.linalg.norm(means, axis=1, keepdims=True)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    expected = np.array(LABELS)[np.argmax(xn @ means.T, axis=1)]
    assert res.probe == "gender"
    assert res.labels == LABELS
    np.testing.assert_array_equal(res.predictions["predicted"].to_numpy(), expected)
    vec, order = label_embeddings(text, list(np.repeat(LABELS, 4)))
    codes, _ = zero_shot_labels(x, vec)
    np.testing.assert_array_equal(np.array(order)[codes], expected)
    # the rates are plain shares of the predictions
    r = res.rates.set_index(["group", "quantity"])
    for g in ("A", "B"):
        share = (expected[data["group"].to_numpy() == g] == "unspecified").mean()
        assert r.loc[(g, "unspecified"), "estimate"] == pytest.approx(share)
    # NPMI and chi-square from the same group x label counts
    ct = pd.crosstab(data["group"], pd.Series(expected, name="predicted")).reindex(columns=LABELS, fill_value=0)
    np.testing.assert_array_equal(res.counts["group"].to_numpy(), ct.to_numpy())


def test_planted_unspecified_gap_is_flagged_with_ci_excluding_the_rest():
    data, img, tdf, _, _ = planted(shift=1.5, seed=1)
    res = audit_vlm(data, img, tdf, ["group"], true_col="truth", n_boot=300)
    r = res.rates.set_index(["group", "quantity"])
    b, a = r.loc[("B", "unspecified")], r.loc[("A", "unspecified")]
    assert b["flagged"] and b["difference"] > 0 and b["diff_ci_low"] > 0
    assert b["ci_low"] > a["ci_high"]  # B's interval lies above A's
    assert r.loc[("B", "error"), "flagged"] and r.loc[("B", "error"), "difference"] > 0
    assert res.independence.loc[0, "pvalue"] < 1e-6
    npmi = res.npmi.set_index(["group", "label"])["npmi"]
    assert npmi[("B", "unspecified")] > 0 > npmi[("A", "unspecified")]
    q = res.quantities()
    assert q["n_flagged"] >= 2 and q["max_unspecified_gap"] == pytest.approx(abs(b["difference"]))
    sec = vlm_section(res)
    assert any("unspecified" in f.sentence and "higher" in f.sentence for f in sec.findings)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_planted_difference_no_flag(seed):
    data, img, tdf, _, _ = planted(shift=0.0, seed=seed)
    res = audit_vlm(data, img, tdf, ["group"], true_col="truth", n_boot=200, seed=seed)
    assert not res.rates["flagged"].any()
    assert res.quantities()["n_flagged"] == 0


def test_text_embeddings_required_with_a_hint():
    with pytest.raises(FairvisionError, match="text encoder"):
        read_text_embeddings(None)


def write_inputs(tmp_path, shift=1.5, drop_label=None, drop_id=False):
    data, img, tdf, x, _ = planted(shift=shift, seed=1)
    data.to_csv(tmp_path / "samples.csv", index=False)
    ids = data["sample_id"].tolist()
    if drop_id:
        ids, x = ids[1:], x[1:]
    np.savez(tmp_path / "images.npz", embeddings=x, ids=np.array(ids))
    if drop_label:
        tdf = tdf[tdf["label"] != drop_label]
    tdf.to_csv(tmp_path / "text.csv", index=False)
    return ["audit", "vlm", "zero-shot", "--samples", str(tmp_path / "samples.csv"), "--image-embeddings", str(tmp_path / "images.npz"),
            "--text-embeddings", str(tmp_path / "text.csv"), "-a", "group", "--n-boot", "100",
            "-o", str(tmp_path / "out")]


def test_cli_writes_report_and_gates(tmp_path, capsys):
    args = write_inputs(tmp_path)
    assert main(args + ["--true-col", "truth"]) == 0
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    assert "vlm" in json.dumps(doc)
    assert (tmp_path / "out" / "report.html").is_file()
    preds = pd.read_parquet(tmp_path / "out" / "predictions.parquet")
    assert len(preds) == 300 and set(preds["predicted"]) <= set(LABELS)
    assert main(args + ["--fail-if", "max_unspecified_gap>0.05"]) == 1
    assert "fail-if" in capsys.readouterr().err


def test_cli_missing_label_embedding_exits_2(tmp_path, capsys):
    args = write_inputs(tmp_path, drop_label="unspecified")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "text.csv" in err and "'unspecified'" in err


def test_cli_id_mismatch_exits_2(tmp_path, capsys):
    args = write_inputs(tmp_path, drop_id=True)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "images.npz" in err and "img0" in err


def test_cli_without_text_embeddings_exits_2(tmp_path, capsys):
    args = write_inputs(tmp_path)
    i = args.index("--text-embeddings")
    assert main(args[:i] + args[i + 2:]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "prompts.toml" in err


def test_report_section_renders():
    data, img, tdf, _, _ = planted(shift=0.0, seed=4)
    res = audit_vlm(data, img, tdf, ["group"], n_boot=50)
    rep = Report(title="t")
    rep.add(vlm_section(res))
    assert "Zero-shot" in rep.to_html()


def test_max_rule_matches_argmax_over_prompts():
    data, img, tdf, x, text = planted(shift=1.0, seed=5)
    res = audit_vlm(data, img, tdf, ["group"], combine="max", n_boot=20)
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    tn = text / np.linalg.norm(text, axis=1, keepdims=True)
    expected = np.repeat(LABELS, 4)[np.argmax(xn @ tn.T, axis=1)]
    np.testing.assert_array_equal(res.predictions["predicted"].to_numpy(), expected)
    with pytest.raises(FairvisionError, match="combine"):
        audit_vlm(data, img, tdf, ["group"], combine="median", n_boot=20)
