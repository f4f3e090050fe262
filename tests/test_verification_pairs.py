"""Verification pairs built from a sample table: the FHIBE pair rule (checked by brute force), the seeded cap, a
planted bias flagged and a null one not, accuracy at one global threshold, and the command line end to end."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.settings import AuditSettings
from fairvision.audits.verification_pairs import PairRule, audit_verification_samples, build_pairs
from fairvision.cli import main
from fairvision.errors import FairvisionError
from fairvision.metrics.verification import sample_hard_negative_pairs


def planted(n_subjects=200, per=3, d=32, noise=(0.9, 0.9), seed=0):
    """Samples of ``n_subjects`` people, ``per`` images each; group a / b alternate by person; embeddings are the
    person's unit vector plus noise of the group's size (the planted bias: more noise for one group)."""
    rng = np.random.default_rng(seed)
    subj = np.repeat(np.arange(n_subjects), per)
    g = np.where(np.arange(n_subjects) % 2 == 0, "a", "b")[subj]
    pron = np.where((np.arange(n_subjects) // 2) % 2 == 0, "he/him", "she/her")[subj]
    tone = (np.arange(n_subjects) % 6 + 1)[subj]
    ident = rng.normal(size=(n_subjects, d))
    ident /= np.linalg.norm(ident, axis=1, keepdims=True)
    sig = np.where(g == "a", noise[0], noise[1])[:, None] / np.sqrt(d)
    emb = ident[subj] + rng.normal(size=(subj.size, d)) * sig
    data = pd.DataFrame({"sample_id": [f"s{i}" for i in range(subj.size)], "subject_id": [f"p{s}" for s in subj],
                         "group": g, "pronoun": pron, "skin_tone": tone})
    return data, emb


def _brute(data):
    """The FHIBE rule pair by pair: genuine = one person; impostor = two people, same pronoun, tones <= 1 apart."""
    lv = {"I": 1, "II": 2, "III": 3, "IV": 4, "V": 5, "VI": 6}
    tone = [lv[str(t).replace("Type ", "")] if not str(t).isdigit() else int(t) for t in data["skin_tone"]]
    gen, imp = set(), set()
    r = data.reset_index(drop=True)
    for a in range(len(r)):
        for b in range(a + 1, len(r)):
            key = tuple(sorted((r.sample_id[a], r.sample_id[b])))
            if r.subject_id[a] == r.subject_id[b]:
                gen.add(key)
            elif r.pronoun[a] == r.pronoun[b] and abs(tone[a] - tone[b]) <= 1:
                imp.add(key)
    return gen, imp


def _sets(pairs):
    keys = [tuple(sorted(k)) for k in zip(pairs.sample_a, pairs.sample_b)]
    return ({k for k, s in zip(keys, pairs.same_subject) if s}, {k for k, s in zip(keys, pairs.same_subject) if not s})


def test_fhibe_rule_on_a_constructed_table():
    # hand-worked: x1/x2 one person (he, II); y (he, Type III) pairs with x1, x2; z (he, V) too far in tone;
    # w (she, II) another pronoun; v (he, 4) within one level of y only
    data = pd.DataFrame({"sample_id": ["x1", "x2", "y", "z", "w", "v"],
                         "subject_id": ["X", "X", "Y", "Z", "W", "V"],
                         "pronoun": ["he", "he", "he", "he", "she", "he"],
                         "skin_tone": ["II", "II", "Type III", "V", "II", "4"]})
    gen, imp = _sets(build_pairs(data, "subject_id", PairRule(max_impostors=None)))
    assert gen == {("x1", "x2")}
    assert imp == {("x1", "y"), ("x2", "y"), ("v", "y"), ("v", "z")}
    assert (gen, imp) == _brute(data)


@pytest.mark.parametrize("seed", range(4))
def test_fhibe_rule_matches_brute_force_and_the_cap_is_a_seeded_subset(seed):
    rng = np.random.default_rng(seed)
    n = 70
    data = pd.DataFrame({"sample_id": [f"i{k}" for k in range(n)], "subject_id": rng.integers(0, 25, n).astype(str),
                         "pronoun": rng.choice(["he", "she", "they"], n), "skin_tone": rng.integers(1, 7, n)})
    gen, imp = _sets(build_pairs(data, "subject_id", PairRule(max_impostors=None)))
    bgen, bimp = _brute(data)
    assert gen == bgen and imp == bimp
    cap = len(bimp) // 4
    capped = build_pairs(data, "subject_id", PairRule(max_impostors=cap), seed=7)
    cgen, cimp = _sets(capped)
    assert cgen == bgen and len(cimp) == cap == int((~capped.same_subject).sum()) and cimp <= bimp
    again = build_pairs(data, "subject_id", PairRule(max_impostors=cap), seed=7)
    pd.testing.assert_frame_equal(capped, again)
    other = _sets(build_pairs(data, "subject_id", PairRule(max_impostors=cap), seed=8))[1]
    assert other != cimp


def test_capped_sample_is_uniform_over_the_hard_impostors():
    # 3 blocks of very different sizes: a uniform draw keeps each candidate with the same probability
    n = 60
    data = pd.DataFrame({"sample_id": [f"i{k}" for k in range(n)], "subject_id": np.arange(n).astype(str),
                         "pronoun": ["he"] * 40 + ["she"] * 20, "skin_tone": [1] * 30 + [4] * 10 + [2] * 20})
    _, all_imp = _brute(data)
    hits = dict.fromkeys(all_imp, 0)
    for s in range(200):
        i, j = sample_hard_negative_pairs(data.subject_id, data.pronoun, data.skin_tone, max_pairs=100, seed=s)
        for k in zip(data.sample_id[i], data.sample_id[j]):
            hits[tuple(sorted(k))] += 1
    share = np.array(list(hits.values())) / 200
    expected = 100 / len(all_imp)
    assert abs(share.mean() - expected) < 1e-12
    he_low = [k for k in hits if int(k[0][1:]) < 30 and int(k[1][1:]) < 30]  # the block of 30 with itself
    she = [k for k in hits if int(k[0][1:]) >= 40]
    for block in (he_low, she):
        assert abs(np.mean([hits[k] for k in block]) / 200 - expected) < 0.03


def test_planted_bias_is_flagged_and_a_null_one_is_not():
    settings = AuditSettings(n_boot=200, min_subjects=10, seed=1)
    data, emb = planted(noise=(0.7, 1.1), seed=2)
    biased = audit_verification_samples(data, ["group"], emb, data.sample_id, far=(0.01,), settings=settings)
    row = biased.summary.iloc[0]
    assert row["worst_group"] == "b" and bool(row["separated"]) and row["difference"] > 0.15
    data, emb = planted(noise=(0.9, 0.9), seed=2)
    null = audit_verification_samples(data, ["group"], emb, data.sample_id, far=(0.01,), settings=settings)
    assert not bool(null.summary.iloc[0]["separated"]) and null.summary.iloc[0]["difference"] < 0.1


def test_tar_far_and_accuracy_at_one_global_threshold_match_a_direct_count():
    data, emb = planted(n_subjects=60, noise=(0.8, 1.2), seed=3)
    res = audit_verification_samples(data, ["group"], emb, data.sample_id, far=(0.05,),
                                     rule=PairRule(max_impostors=None), settings=AuditSettings(n_boot=0))
    # independent: every pair by brute force, cosine with numpy, threshold = the (k+1)-th largest impostor score
    gen, imp = _brute(data)
    pos = {s: k for k, s in enumerate(data.sample_id)}
    e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    rows = [(pos[a], pos[b], True) for a, b in gen] + [(pos[a], pos[b], False) for a, b in imp]
    a, b, g = (np.array(x) for x in zip(*rows))
    score = (e[a] * e[b]).sum(1)
    k = int(np.floor(0.05 * (~g).sum()))
    thr = np.sort(score[~g])[::-1][k]
    assert res.groups["threshold"].nunique() == 1 and res.groups["threshold"].iloc[0] == pytest.approx(thr, abs=1e-6)
    grp = data.group.to_numpy()
    for name in ("a", "b"):
        m = (grp[a] == name) & (grp[b] == name)
        acc = ((score[m & g] > thr).sum() + (score[m & ~g] <= thr).sum()) / m.sum()
        r = res.groups.set_index("group").loc[name]
        assert r["tar"] == pytest.approx((score[m & g] > thr).mean())
        assert r["accuracy"] == pytest.approx(acc)
        assert r["n_genuine"] == (m & g).sum() and r["n_impostor"] == (m & ~g).sum()


def test_weighted_accuracy_equals_repeating_pairs_by_their_weights():
    from fairvision.metrics.verification import weighted_accuracy
    rng = np.random.default_rng(5)
    scores, genuine = rng.normal(size=40), rng.random(40) < 0.4
    w = rng.integers(0, 4, size=(3, 40))
    thr = np.array([-0.2, 0.1, 0.5])
    got = weighted_accuracy(scores, genuine, w, thr)
    for r in range(3):  # independent: repeat every pair by its weight and count decisions
        s, g = np.repeat(scores, w[r]), np.repeat(genuine, w[r])
        right = np.where(g, s > thr[r], s <= thr[r])
        assert got[r] == pytest.approx(right.mean())
    assert np.isnan(weighted_accuracy(scores, genuine, np.zeros(40), 0.0)[0])


def test_accuracy_has_a_subject_bootstrap_ci_around_it():
    data, emb = planted(n_subjects=60, noise=(0.8, 1.2), seed=3)
    for threshold in ("group", "global", "eer"):
        res = audit_verification_samples(data, ["group"], emb, data.sample_id, far=(0.05,), threshold=threshold,
                                         settings=AuditSettings(n_boot=200, seed=0))
        for tbl in (res.groups, res.overall):
            assert {"accuracy_ci_low", "accuracy_ci_high"} <= set(tbl.columns)
            ok = tbl["accuracy"].notna()
            assert ok.any()
            t = tbl[ok]
            assert ((t["accuracy_ci_low"] <= t["accuracy"] + 1e-9) & (t["accuracy"] <= t["accuracy_ci_high"] + 1e-9)).all()
            assert (t["accuracy_ci_high"] - t["accuracy_ci_low"] > 0).all()


def test_missing_columns_and_tones_are_one_line_errors():
    data = pd.DataFrame({"sample_id": ["a", "b"], "subject_id": ["1", "2"], "pronoun": ["he", "he"],
                         "skin_tone": ["IV", "dark"]})
    with pytest.raises(FairvisionError, match="skin_tone"):
        build_pairs(data, "subject_id", PairRule(), source="s.csv")
    with pytest.raises(FairvisionError, match=r"s.csv: no column 'gender'"):
        build_pairs(data, "subject_id", PairRule(pronoun_col="gender"), source="s.csv")


def test_cli_builds_pairs_reports_left_out_images_and_gates(tmp_path):
    data, emb = planted(noise=(0.7, 1.1), seed=4)
    data.iloc[:-3].to_csv(tmp_path / "s.csv", index=False)
    keep = np.arange(len(data) - 10)  # the last 10 images have no embedding (3 of them not in the samples)
    np.savez(tmp_path / "e.npz", embeddings=emb[keep], ids=data.sample_id.to_numpy()[keep].astype(str))
    out = tmp_path / "rep"
    from typer.testing import CliRunner
    from fairvision.cli import app
    res = CliRunner().invoke(app, ["audit", "verification", "--samples", str(tmp_path / "s.csv"), "--embeddings",
                                   str(tmp_path / "e.npz"), "-a", "group", "--far", "0.01", "--n-boot", "50",
                                   "--min-subjects", "10", "--max-impostors", "20000", "-o", str(out),
                                   "--fail-if", "difference>0.1"])
    assert res.exit_code == 1, res.output
    assert "face embedding: 7 of 597 images left out (no embedding: 7)" in res.output
    rep = json.loads((out / "report.json").read_text())
    assert {s["id"] for s in rep["sections"]} == {"verification", "verification_coverage"}
    assert rep["findings"][0]["severity"] == "high" and "for b vs" in rep["findings"][0]["sentence"]
    groups = pd.read_parquet(out / "tables" / "verification__groups-group.parquet")
    text = (out / "report.html").read_text()
    assert "hard impostors" in text and "20,000" in text
    assert set(groups["group"]) == {"a", "b"} and groups["threshold"].nunique() == 1


def test_cli_needs_pairs_or_embeddings(tmp_path, capsys):
    data, _ = planted(n_subjects=4)
    data.to_csv(tmp_path / "s.csv", index=False)
    assert main(["audit", "verification", "--samples", str(tmp_path / "s.csv"), "-a", "group",
                 "-o", str(tmp_path / "o")]) == 2
    assert "error: give --pairs" in capsys.readouterr().err


def test_eer_threshold_is_where_far_meets_frr_over_all_pairs():
    data, emb = planted(n_subjects=60, noise=(0.8, 1.2), seed=6)
    res = audit_verification_samples(data, ["group"], emb, data.sample_id, threshold="eer",
                                     rule=PairRule(max_impostors=None), settings=AuditSettings(n_boot=30))
    gen, imp = _brute(data)
    pos = {s: k for k, s in enumerate(data.sample_id)}
    e = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    rows = [(pos[a], pos[b], True) for a, b in gen] + [(pos[a], pos[b], False) for a, b in imp]
    a, b, g = (np.array(x) for x in zip(*rows))
    score = (e[a] * e[b]).sum(1)
    cands = np.unique(score)
    far = np.array([(score[~g] > c).mean() for c in cands])
    frr = np.array([(score[g] <= c).mean() for c in cands])
    k = int(np.argmin(np.abs(far - frr)))
    thr = res.overall["threshold"].iloc[0]
    assert thr == pytest.approx(cands[k], abs=1e-6)
    assert res.fars[0] == pytest.approx((far[k] + frr[k]) / 2, abs=1e-3)
    assert res.overall["tar"].iloc[0] == pytest.approx(1 - frr[k], abs=1e-3)
    assert res.groups["threshold"].nunique() == 1
    r = res.groups.set_index("group")
    for name in ("a", "b"):
        m = (data.group.to_numpy()[a] == name) & (data.group.to_numpy()[b] == name)
        assert r.loc[name, "tar"] == pytest.approx((score[m & g] > thr).mean(), abs=1e-9)
        assert r.loc[name, "ci_low"] <= r.loc[name, "tar"] <= r.loc[name, "ci_high"]


def test_weighted_eer_threshold_matches_brute_force_and_repeated_pairs():
    from fairvision.metrics.verification import eer_threshold, weighted_eer_threshold
    rng = np.random.default_rng(0)
    for _ in range(150):
        n = int(rng.integers(4, 40))
        s = rng.integers(0, 10, n).astype(float)
        g = rng.random(n) < 0.4
        if g.all() or not g.any():
            continue
        best = None
        for c in np.unique(s)[::-1]:  # from the highest score down; the first smallest gap wins
            far, frr = (s[~g] > c).mean(), (s[g] <= c).mean()
            if best is None or abs(far - frr) < best[0] - 1e-12:
                best = (abs(far - frr), c, (far + frr) / 2)
        thr, eer = eer_threshold(s, g)
        assert thr == best[1] and eer == pytest.approx(best[2])
        w = rng.integers(0, 3, (2, n)).astype(float)
        T, _ = weighted_eer_threshold(s, g, w)
        for k in range(2):
            rep = np.repeat(np.arange(n), w[k].astype(int))
            if g[rep].all() or not g[rep].any():
                assert np.isnan(T[k])
                continue
            gap = lambda c: abs((s[rep][~g[rep]] > c).mean() - (s[rep][g[rep]] <= c).mean())  # noqa: E731
            assert gap(T[k]) == pytest.approx(gap(eer_threshold(s[rep], g[rep])[0]))


def test_a_cap_near_the_total_still_drops_a_uniform_sample():
    """When the cap is close to the number of hard impostors every candidate is drawn: the ones dropped must be
    a random choice, not the last (pronoun, tone) blocks, and must change with the seed."""
    from fairvision.metrics.verification import hard_negative_pairs, sample_hard_negative_pairs

    rng = np.random.default_rng(5)
    n = 60
    ident = np.arange(n)
    pron = rng.choice(["she", "he"], n)
    tone = rng.integers(1, 7, n)
    ai, aj = hard_negative_pairs(ident, pron, tone)
    every = set(zip(ai.tolist(), aj.tolist()))
    cap = int(len(every) * 0.85)
    dropped = []
    for seed in range(3):
        i, j = sample_hard_negative_pairs(ident, pron, tone, max_pairs=cap, seed=seed)
        got = set(zip(i.tolist(), j.tolist()))
        assert len(got) == cap and got <= every
        dropped.append(every - got)
    assert dropped[0] != dropped[1] != dropped[2]
    # the dropped pairs come from both pronouns, not only from the last block in sort order
    assert {pron[a] for a, _ in dropped[0]} == {"she", "he"}
