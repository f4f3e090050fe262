"""Zero-shot vision-language probe from precomputed embeddings (docs/METHODS.md §12.1)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.settings import AuditSettings
from fairvision.audits.vlm.prompts import load_prompt_sets, read_text_embeddings
from fairvision.audits.vlm.samples import SampleOptions
from fairvision.audits.vlm.zero_shot import audit_vlm, label_embeddings, zero_shot_labels
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
    res = audit_vlm(data, img, tdf, ["group"], settings=AuditSettings(n_boot=50))
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
    res = audit_vlm(data, img, tdf, ["group"], true_col="truth", settings=AuditSettings(n_boot=300))
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
    res = audit_vlm(data, img, tdf, ["group"], true_col="truth", settings=AuditSettings(n_boot=200, seed=seed))
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
    res = audit_vlm(data, img, tdf, ["group"], settings=AuditSettings(n_boot=50))
    rep = Report(title="t")
    rep.add(vlm_section(res))
    assert "Zero-shot" in rep.to_html()


def test_max_rule_matches_argmax_over_prompts():
    data, img, tdf, x, text = planted(shift=1.0, seed=5)
    res = audit_vlm(data, img, tdf, ["group"], combine="max", settings=AuditSettings(n_boot=20))
    xn = x / np.linalg.norm(x, axis=1, keepdims=True)
    tn = text / np.linalg.norm(text, axis=1, keepdims=True)
    expected = np.repeat(LABELS, 4)[np.argmax(xn @ tn.T, axis=1)]
    np.testing.assert_array_equal(res.predictions["predicted"].to_numpy(), expected)
    with pytest.raises(FairvisionError, match="combine"):
        audit_vlm(data, img, tdf, ["group"], combine="median", settings=AuditSettings(n_boot=20))


# -- calibration: a stub model with planted similarities ------------------------------------------------------------

STUB_LABELS = ["man", "woman", "unspecified"]


def stub_model(n_subjects=100, per_subject=2, effect=0.0, seed=0):
    """A stub CLIP: the text embeddings of each label are the label's basis vector (two prompts each), so an image
    embedding *is* its similarity to every label. Similarities are a per-subject part (a person looks the same in
    all their photos: labels are correlated within a subject) plus per-image noise; ``effect`` is added to the
    'unspecified' similarity of the images of group g1 = B only."""
    rng = np.random.default_rng(seed)
    subj = np.repeat(np.arange(n_subjects), per_subject)
    g1 = rng.choice(["A", "B"], n_subjects)[subj]
    g2 = rng.choice(["x", "y"], n_subjects)[subj]
    sim = 5.0 + rng.normal(size=(n_subjects, 3))[subj] + rng.normal(size=(len(subj), 3))
    sim[:, 2] += effect * (g1 == "B")
    data = pd.DataFrame({"sample_id": [f"i{i}" for i in range(len(subj))], "subject_id": subj, "g1": g1, "g2": g2})
    img = pd.DataFrame({"sample_id": data["sample_id"], "embedding": list(sim)})
    tdf = pd.DataFrame(np.repeat(np.eye(3), 2, axis=0), columns=["e0", "e1", "e2"])
    tdf.insert(0, "label", np.repeat(STUB_LABELS, 2))
    return data, img, tdf, sim


def test_stub_model_labels_are_the_planted_argmax():
    data, img, tdf, sim = stub_model(seed=3)
    res = audit_vlm(data, img, tdf, ["g1"], settings=AuditSettings(n_boot=10))
    np.testing.assert_array_equal(res.predictions["predicted"].to_numpy(), np.array(STUB_LABELS)[sim.argmax(axis=1)])


def test_null_false_flag_rate_is_nominal_over_200_seeds_and_a_planted_effect_is_found():
    """docs/METHODS.md §12.1 "Done when": no planted effect -> family-wise false flag rate at most nominal over 200
    seeds (two images per subject, both attributes and their intersection, 24 tests a run); planted -> flagged."""
    false_flags, p_one, p_all = 0, [], []
    for seed in range(200):
        data, img, tdf, _ = stub_model(seed=seed)
        r = audit_vlm(data, img, tdf, ["g1", "g2"], max_k=2, settings=AuditSettings(n_boot=40, seed=seed)).rates
        false_flags += bool(r["flagged"].any())
        p_all.append(r["pvalue"].dropna().to_numpy())
        p_one.append(r.loc[(r["attribute"] == "g1") & (r["group"] == "A") & (r["quantity"] == "unspecified"),
                           "pvalue"].iloc[0])
    # binomial(200, 0.05): mean 10, P(X > 18) < 0.01
    assert false_flags / 200 <= 0.09
    # per-test p-values: the share below 0.05 is near 0.05 over 200 x (up to) 24 tests ...
    p_all = np.concatenate(p_all)
    assert 0.025 <= (p_all < 0.05).mean() <= 0.075
    assert 0.06 <= (p_all < 0.10).mean() <= 0.14
    # ... and one test's p-value over 200 independent seeds is uniform (Kolmogorov-Smirnov)
    assert stats.kstest(p_one, "uniform").pvalue > 0.01
    hits = 0
    for seed in range(40):
        data, img, tdf, _ = stub_model(n_subjects=120, effect=2.0, seed=1000 + seed)
        r = audit_vlm(data, img, tdf, ["g1", "g2"], max_k=2,
                      settings=AuditSettings(n_boot=40, seed=seed)).rates.set_index(
            ["attribute", "group", "quantity"])
        hits += bool(r.loc[("g1", "B", "unspecified"), "flagged"]) and r.loc[("g1", "B", "unspecified"), "difference"] > 0
    assert hits / 40 >= 0.8


def test_image_level_test_alone_would_not_be_nominal_with_clustered_images():
    # why the subject-level test is needed: with three images per subject, the image-level chi-square rejects a
    # true null far more often than 5%; the probe's p-value (with the design effect) stays near 5%
    naive, probe = [], []
    for seed in range(100):
        data, img, tdf, _ = stub_model(per_subject=3, seed=seed)
        r = audit_vlm(data, img, tdf, ["g1"], settings=AuditSettings(n_boot=10, seed=seed)).rates
        row = r[(r["group"] == "A") & (r["quantity"] == "man")].iloc[0]
        ct = np.array([[row.estimate * row.n_samples, (1 - row.estimate) * row.n_samples],
                       [row.rest * (300 - row.n_samples), (1 - row.rest) * (300 - row.n_samples)]])
        naive.append(stats.chi2_contingency(np.round(ct), correction=False).pvalue)
        probe.append(row.pvalue)
    assert np.mean(np.array(naive) < 0.05) > 0.1
    assert np.mean(np.array(probe) < 0.05) <= 0.09


def brute_force_rao_scott(y, group, cluster):
    """Independent per-subject loop: d**2 / max(cluster-robust variance under no difference, binomial variance)."""
    y, group = np.asarray(y, float), np.asarray(group, bool)
    p0 = y.mean()
    ng, nr = group.sum(), (~group).sum()
    total = 0.0
    ids = np.unique(cluster)
    for s in ids:
        sel = cluster == s
        res = ((y[sel & group] - p0).sum() / ng) - ((y[sel & ~group] - p0).sum() / nr)
        total += res ** 2
    v_subject = total * len(ids) / (len(ids) - 1)
    v_binom = p0 * (1 - p0) * (1 / ng + 1 / nr)
    d = y[group].mean() - y[~group].mean()
    return d ** 2 / max(v_subject, v_binom), max(1.0, v_subject / v_binom)


def test_subject_level_statistic_matches_a_brute_force_loop_and_pearson():
    data, img, tdf, sim = stub_model(n_subjects=60, per_subject=3, seed=7)
    res = audit_vlm(data, img, tdf, ["g1"], settings=AuditSettings(n_boot=10, min_subjects=1))
    pred = np.array(STUB_LABELS)[sim.argmax(axis=1)]
    for row in res.rates.itertuples(index=False):
        y = pred == row.quantity
        stat, deff = brute_force_rao_scott(y, data["g1"].to_numpy() == row.group, data["subject_id"].to_numpy())
        assert row.statistic == pytest.approx(stat, rel=1e-9)
        assert row.design_effect == pytest.approx(deff, rel=1e-9)
        # with the design effect taken out it is Pearson's 2 x 2 chi-square of the images (scipy)
        g = data["g1"].to_numpy() == row.group
        ct = np.array([[(y & g).sum(), (~y & g).sum()], [(y & ~g).sum(), (~y & ~g).sum()]])
        assert row.statistic * row.design_effect == pytest.approx(
            stats.chi2_contingency(ct, correction=False).statistic, rel=1e-9)
        assert row.pvalue >= stats.chi2.sf(stat, 1) - 1e-12


def test_intersections_rates_small_cells_and_one_family():
    data, img, tdf, sim = stub_model(n_subjects=90, per_subject=2, seed=11)
    # make one intersection cell small: only 4 subjects of A x y
    keep = ~((data["g1"] == "A") & (data["g2"] == "y") & (data["subject_id"] % 5 != 0))
    data = data[keep].reset_index(drop=True)
    res = audit_vlm(data, img, tdf, ["g1", "g2"], max_k=2, settings=AuditSettings(n_boot=50, correction="bonferroni"))
    r = res.rates
    assert set(r["attribute"]) == {"g1", "g2", "g1 × g2"}
    inter = r[r["attribute"] == "g1 × g2"]
    assert set(inter["group"]) == {"A × x", "A × y", "B × x", "B × y"} and (inter["k"] == 2).all()
    # rates of the cells equal an independent pandas groupby of the predictions
    pred = pd.Series(np.array(STUB_LABELS)[sim.argmax(axis=1)], index=[f"i{i}" for i in range(len(sim))])
    d = data.assign(pred=pred.loc[data["sample_id"]].to_numpy())
    shares = pd.crosstab([d["g1"], d["g2"]], d["pred"], normalize="index")
    subjects = d.groupby(["g1", "g2"])["subject_id"].nunique()
    for row in inter.itertuples(index=False):
        a, b = row.group.split(" × ")
        assert row.estimate == pytest.approx(shares.loc[(a, b), row.quantity])
        assert row.n_subjects == subjects.loc[(a, b)]
    small = inter[inter["group"] == "A × y"]
    assert small["too_small"].all() and small["pvalue"].isna().all() and not small["flagged"].any()
    assert small["estimate"].notna().all() and small["ci_low"].notna().all()  # reported, not tested
    # every tested row, intersections included, is in one Bonferroni family
    tested = r[r["pvalue"].notna()]
    assert len(tested) == len(r) - 3
    np.testing.assert_allclose(tested["pvalue_adjusted"], np.minimum(1, tested["pvalue"] * len(tested)))
    q = res.quantities()
    assert q["n_too_small"] == 1 and "rate.g1+g2.B+x.man" in q and "gap.g1+g2.A+y.unspecified" in q
    sec = vlm_section(res)
    assert "too_small" in sec.tables and any("too small" in b.get("text", "") for b in sec.blocks)


def test_cli_intersections_and_min_subjects(tmp_path, capsys):
    data, _, tdf, sim = stub_model(n_subjects=80, seed=5)
    data.to_csv(tmp_path / "samples.csv", index=False)
    np.savez(tmp_path / "images.npz", embeddings=sim, ids=np.array(data["sample_id"].tolist()))
    tdf.to_csv(tmp_path / "text.csv", index=False)
    out = tmp_path / "out"
    rc = main(["audit", "vlm", "zero-shot", "--samples", str(tmp_path / "samples.csv"), "--image-embeddings",
               str(tmp_path / "images.npz"), "--text-embeddings", str(tmp_path / "text.csv"), "-a", "g1", "-a", "g2",
               "--max-k", "2", "--min-subjects", "25", "--n-boot", "50", "-o", str(out),
               "--fail-if", "n_too_small>0"])
    assert rc == 1, capsys.readouterr().err  # some 2-way cells have fewer than 25 subjects
    rates = pd.read_parquet([p for p in (out / "tables").glob("*.parquet") if p.name.endswith("__rates.parquet")][0])
    assert "g1 × g2" in set(rates["attribute"])
    small = rates[rates["n_subjects"] < 25]
    assert len(small) and small["too_small"].all() and small["pvalue"].isna().all()
    assert rates.loc[rates["n_subjects"] >= 25, "pvalue"].notna().all()


# --------------------------------------------------------------------------- review fixes


def test_intersection_error_rate_gate_uses_plus_names(tmp_path, capsys):
    data, img, tdf, _, _ = planted(shift=1.0, seed=2)
    data["age"] = np.where(data["subject_id"] % 4 < 2, "young", "old")
    res = audit_vlm(data, img, tdf, ["group", "age"], true_col="truth", max_k=2, settings=AuditSettings(n_boot=30))
    q = res.quantities()
    sel = (data["group"] == "B") & (data["age"] == "young")
    pred = res.predictions.set_index("sample_id").loc[data["sample_id"], "predicted"].to_numpy()
    expected = (pred[sel.to_numpy()] != data.loc[sel, "truth"].to_numpy()).mean()
    assert q["error_rate.group+age.B+young"] == pytest.approx(expected)
    assert not any(" × " in k for k in q)
    args = write_inputs(tmp_path)
    pd.read_csv(tmp_path / "samples.csv").assign(age=data["age"]).to_csv(tmp_path / "samples.csv", index=False)
    rc = main(args + ["-a", "age", "--max-k", "2", "--true-col", "truth", "--fail-if", "error_rate.group+age.B+young>0"])
    assert rc == 1, capsys.readouterr().err


def test_duplicate_sample_id_is_one_line(tmp_path, capsys):
    data, img, tdf, _, _ = planted(seed=1)
    data.loc[5, "sample_id"] = data.loc[4, "sample_id"]
    with pytest.raises(FairvisionError, match=r"row 6: sample_id 'img4' appears twice"):
        audit_vlm(data, img, tdf, ["group"], settings=AuditSettings(n_boot=10))


@pytest.mark.parametrize("rule", ["drop", "keep"])
def test_missing_rule_drop_and_keep(tmp_path, capsys, rule):
    data, img, tdf, x, _ = planted(shift=1.0, seed=5)
    data["group"] = data["group"].astype(object)
    blank = np.arange(len(data)) % 10 == 3  # 30 images with no group
    data.loc[blank, "group"] = None
    with pytest.raises(FairvisionError, match=r"row 4: column 'group' is empty \(30 empty cells; use missing='drop'"):
        audit_vlm(data, img, tdf, ["group"], settings=AuditSettings(n_boot=10))
    res = audit_vlm(data, img, tdf, ["group"], samples=SampleOptions(missing=rule),
                    settings=AuditSettings(n_boot=10, min_subjects=1))
    r = res.rates[res.rates["quantity"] == "unspecified"].set_index("group")
    pred = res.predictions.set_index("sample_id")["predicted"]
    ids = data["sample_id"].to_numpy()
    if rule == "drop":
        assert set(r.index) == {"A", "B"} and len(res.predictions) == 270 and res.meta["n_dropped"] == 30
        kept = ~blank
        a = kept & (data["group"] == "A").to_numpy()
        # the rest of A is B alone (the dropped rows are in neither)
        rest = kept & (data["group"] == "B").to_numpy()
        assert r.loc["A", "rest"] == pytest.approx((pred[ids[rest]] == "unspecified").mean())
        assert r.loc["A", "estimate"] == pytest.approx((pred[ids[a]] == "unspecified").mean())
    else:
        assert set(r.index) == {"A", "B", "(missing)"} and len(res.predictions) == 300
        assert r.loc["(missing)", "n_samples"] == 30
        assert r.loc["(missing)", "estimate"] == pytest.approx((pred[ids[blank]] == "unspecified").mean())
    # the CLI option
    args = write_inputs(tmp_path)
    data.to_csv(tmp_path / "samples.csv", index=False)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "--missing" in err
    assert main(args + ["--missing", rule]) == 0, capsys.readouterr().err
    assert json.loads((tmp_path / "out" / "report.json").read_text())["meta"]["missing"] == rule


def test_object_typed_npz_is_one_line(tmp_path, capsys):
    args = write_inputs(tmp_path)
    data, _, tdf, x, text = planted(shift=1.5, seed=1)
    # ids from a pandas column are an object array: np.savez pickles it
    np.savez(tmp_path / "images.npz", embeddings=x, ids=data["sample_id"].to_numpy())
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "images.npz" in err and "'ids'" in err and ".astype(str)" in err
    np.savez(tmp_path / "text.npz", embeddings=text, labels=tdf["label"].to_numpy())
    with pytest.raises(FairvisionError, match=r"text\.npz: array 'labels' holds Python objects.*astype\(str\)"):
        read_text_embeddings(tmp_path / "text.npz")
    np.savez(tmp_path / "text.npz", embeddings=text, labels=tdf["label"].to_numpy().astype(str))
    assert read_text_embeddings(tmp_path / "text.npz")[1] == tdf["label"].tolist()


def test_constant_quantity_is_left_untested():
    # 'woman' is never predicted when every image lies on the 'man' axis: its rate is 0 everywhere
    data, img, tdf, x, _ = planted(seed=6)
    axes = np.eye(D)[:3] * 4.0
    img = pd.DataFrame({"sample_id": data["sample_id"], "embedding": list(axes[0] + 0.1 * x)})
    res = audit_vlm(data, img, tdf, ["group"], settings=AuditSettings(n_boot=20))
    r = res.rates.set_index(["group", "quantity"])
    assert (res.predictions["predicted"] != "woman").all()
    assert r.loc[("A", "woman"), "estimate"] == 0 and np.isnan(r.loc[("A", "woman"), "pvalue"])
    assert np.isnan(r.loc[("A", "woman"), "pvalue_adjusted"])
    tested = r["pvalue"].notna()
    assert not tested.loc[(slice(None), "woman")].any()


def test_nan_quantity_gate_is_an_error_not_a_pass(tmp_path, capsys):
    data, img, tdf, _, _ = planted(seed=1, n_subjects=12)
    res = audit_vlm(data, img, tdf, ["group"],
                    settings=AuditSettings(n_boot=10))  # 6 subjects a group: too small to judge
    q = res.quantities()
    assert np.isnan(q["max_gap"]) and np.isnan(q["max_unspecified_gap"])
    from fairvision.audits.gates import evaluate_conditions
    with pytest.raises(FairvisionError, match="max_gap is not defined for this input"):
        evaluate_conditions(["max_gap>0.1"], q, nan="error")
    args = write_inputs(tmp_path)
    rc = main(args + ["--min-subjects", "1000", "--fail-if", "max_unspecified_gap>0.1"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "\n" not in err and "NaN" in err


def test_combined_text_embeddings_filtered_by_probe(tmp_path, capsys):
    data, img, tdf, _, _ = planted(shift=1.5, seed=1)
    other = tdf.copy()
    other["label"] = np.repeat(["indoor", "outdoor", "unspecified"], 4)
    both = pd.concat([tdf.assign(probe="gender"), other.assign(probe="indoor_outdoor")], ignore_index=True)
    x, labels, _ = read_text_embeddings(both, "gender")
    assert labels == tdf["label"].tolist() and np.allclose(x, tdf.filter(regex=r"^e\d+$").to_numpy())
    with pytest.raises(FairvisionError, match=r"^probe is needed: .*several probes"):
        read_text_embeddings(both)
    res = audit_vlm(data, img, both, ["group"], probe="gender", settings=AuditSettings(n_boot=10))
    ref = audit_vlm(data, img, tdf, ["group"], settings=AuditSettings(n_boot=10))
    assert res.probe == "gender"
    pd.testing.assert_frame_equal(res.predictions, ref.predictions)


def test_two_groups_are_one_test_in_the_correction_family():
    """"A vs rest" and "B vs rest" with two groups are the same 2 x 2 test: counted once (docs/METHODS.md §12.1)."""
    data, img, tdf, _, _ = planted(shift=1.5, seed=1)
    res = audit_vlm(data, img, tdf, ["group"], true_col="truth",
                    settings=AuditSettings(n_boot=50, correction="bonferroni"))
    r = res.rates
    a, b = r[r["group"] == "A"].reset_index(drop=True), r[r["group"] == "B"].reset_index(drop=True)
    tested = a["pvalue"].notna().to_numpy()
    assert tested.sum() >= 2
    assert a["same_test_as"].isna().all() and (b.loc[tested, "same_test_as"] == "A").all()
    # the same test: the mirrored 2 x 2 table gives B's p-value independently of the audit
    np.testing.assert_allclose(b.loc[tested, "pvalue"], a.loc[tested, "pvalue"], rtol=1e-9)
    # Bonferroni over the distinct tests only: m = tested quantities, not twice that
    m = int(tested.sum())
    np.testing.assert_allclose(a.loc[tested, "pvalue_adjusted"], np.minimum(1, a.loc[tested, "pvalue"] * m))
    np.testing.assert_allclose(b.loc[tested, "pvalue_adjusted"], a.loc[tested, "pvalue_adjusted"])
    assert res.quantities()["n_flagged"] == int((r["flagged"] & r["same_test_as"].isna()).sum())
    # three groups: no test is the same as another
    data3 = data.assign(group=np.array(["A", "B", "C"])[data["subject_id"].to_numpy() % 3])
    r3 = audit_vlm(data3, img, tdf, ["group"], settings=AuditSettings(n_boot=20)).rates
    assert r3["same_test_as"].isna().all()


def test_true_map_renames_the_true_labels(tmp_path, capsys):
    args = write_inputs(tmp_path)
    data = pd.read_csv(tmp_path / "samples.csv")
    data["truth"] = data["truth"].map({"man": "Male", "woman": "Female"})
    data.to_csv(tmp_path / "samples.csv", index=False)
    assert main(args + ["--true-col", "truth"]) == 2
    assert "'Female' is not a label" in capsys.readouterr().err
    assert main(args + ["--true-col", "truth", "--true-map", "Male=man, Female=woman"]) == 0
    pred = pd.read_parquet(tmp_path / "out" / "predictions.parquet")
    assert set(pred["true"]) == {"man", "woman"}
    assert (pred["true"].to_numpy() == data["truth"].map({"Male": "man", "Female": "woman"}).to_numpy()).all()
    capsys.readouterr()
    for bad, msg in (("Male=man,Female", "'Female' is not VALUE=LABEL"), ("Male=guy", "'guy' is not a label"),
                     ("X=man", "none of 'X' occurs")):
        assert main(args + ["--true-col", "truth", "--true-map", bad]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and msg in err, err


def test_folder_samples_hint_and_fail_if_finding(tmp_path, capsys):
    args = write_inputs(tmp_path)
    folder_args = list(args)
    folder_args[folder_args.index("--samples") + 1] = str(tmp_path)
    assert main(folder_args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "attribute columns" in err and "folder" in err
    assert main(args + ["--fail-if", "max_unspecified_gap>0.05"]) == 1
    doc = json.loads((tmp_path / "out" / "report.json").read_text())
    gate = [f for f in doc["findings"] if "--fail-if" in f["sentence"]]
    assert gate and gate[0]["severity"] == "high"
