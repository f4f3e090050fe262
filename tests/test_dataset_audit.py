"""The dataset audit end to end on the bundled FairFace sample and on hand-built tables."""

import numpy as np
import pandas as pd
import pytest

from fairvision import stats
from fairvision.audits.dataset import audit_dataset
from fairvision.audits.settings import AuditSettings
from fairvision.datasets import load_demo
from fairvision.stats.resample import bootstrap_counts


@pytest.fixture(scope="module")
def demo_audit():
    df, schema = load_demo(with_schema=True)
    return audit_dataset(df, ["age", "gender"], schema=schema, settings=AuditSettings(n_boot=300))


def test_demo_table():
    df = load_demo()
    assert len(df) == 540
    assert df["age"].cat.categories.tolist() == ["0-2", "3-9", "10-19", "20-29", "30-39", "40-49", "50-59", "60-69", "70+"]
    assert set(df["gender"]) == {"Female", "Male"}


def test_demo_is_perfectly_balanced(demo_audit):
    a = demo_audit
    assert len(a.groups[("age",)]) == 9 and len(a.groups[("gender",)]) == 2
    inter = a.groups[("age", "gender")]
    assert len(inter) == 18
    assert (inter["n_samples"] == 30).all()
    for key in ("age", "gender", "age × gender"):
        assert a.representation.loc[key, "nsd"] == 0.0
    # independent check of NSD from raw value counts
    df = load_demo()
    assert stats.nsd(df.groupby(["age", "gender"], observed=False).size().to_numpy()) == 0.0
    summ = a.summary.loc["age × gender"]
    assert (summ["n_nonempty"], summ["median_images"], summ["max_images"], summ["min_images"]) == (18, 30, 30, 30)
    assert a.association.loc[("age", "gender"), "nmi"] == pytest.approx(0.0, abs=1e-12)
    assert a.warnings == []


def test_ci_brackets_estimate(demo_audit):
    rep = demo_audit.representation
    for key in ("age", "gender"):
        assert rep.loc[key, "nsd_ci_low"] <= rep.loc[key, "nsd"] <= rep.loc[key, "nsd_ci_high"]
        assert 0 <= rep.loc[key, "nsd_ci_low"] and rep.loc[key, "nsd_ci_high"] < 0.2
    share = demo_audit.groups[("age",)]
    assert ((share["share_ci_low"] <= share["share"]) & (share["share"] <= share["share_ci_high"])).all()


def test_bootstrap_resamples_subjects_not_images():
    # two people, 10 images each, in different groups: a subject bootstrap can only give 0, 10 or 20
    rows = np.arange(20)
    codes = np.repeat([0, 1], 10)
    subjects = np.repeat([0, 1], 10)
    reps = bootstrap_counts(rows, codes, 2, 20, subjects, n_boot=500, seed=1)
    assert set(np.unique(reps)) <= {0.0, 10.0, 20.0}
    assert (reps.sum(axis=1) == 20).all()
    # an image bootstrap would give other values
    reps_img = bootstrap_counts(rows, codes, 2, 20, None, n_boot=500, seed=1)
    assert len(set(np.unique(reps_img)) - {0.0, 10.0, 20.0}) > 0


def test_bootstrap_profiles_match_naive_resampling_in_distribution():
    rng = np.random.default_rng(5)
    n_subj = 300
    subj = np.repeat(np.arange(n_subj), rng.integers(1, 5, n_subj))
    codes = rng.integers(0, 4, subj.size)
    rows = np.arange(subj.size)
    fast = bootstrap_counts(rows, codes, 4, subj.size, subj, n_boot=4000, seed=2)
    naive = np.empty((4000, 4))
    for b in range(4000):
        pick = rng.integers(0, n_subj, n_subj)
        w = np.bincount(pick, minlength=n_subj)
        naive[b] = np.bincount(codes, weights=w[subj], minlength=4)
    np.testing.assert_allclose(fast.mean(0), naive.mean(0), rtol=0.01)
    np.testing.assert_allclose(fast.std(0), naive.std(0), rtol=0.08)


def test_imbalanced_table_with_subjects_and_target():
    rng = np.random.default_rng(0)
    n = 600
    df = pd.DataFrame({
        "sample_id": [f"s{i}" for i in range(n)],
        "subject_id": [f"p{i // 3}" for i in range(n)],
        "gender": np.repeat(rng.choice(["F", "M"], n // 3, p=[0.2, 0.8]), 3),
    })
    df["label"] = np.where(df["gender"] == "F", rng.choice(["happy", "sad"], n, p=[0.9, 0.1]), rng.choice(["happy", "sad"], n, p=[0.3, 0.7]))
    a = audit_dataset(df, ["gender"], target="label", settings=AuditSettings(n_boot=200))
    counts = df["gender"].value_counts().reindex(["F", "M"]).to_numpy()
    assert a.representation.loc["gender", "nsd"] == pytest.approx(stats.nsd(counts))
    assert a.n_subjects == 200
    assert a.groups[("gender",)]["n_subjects"].sum() == 200
    m = a.npmi[("gender", "label")]
    assert m.loc["F", "happy"] > 0 and m.loc["F", "sad"] < 0
    assert a.association.loc[("gender", "label"), "pvalue"] < 1e-6


def test_small_groups_flagged():
    df = pd.DataFrame({"g": ["a"] * 50 + ["b"] * 3})
    a = audit_dataset(df, ["g"], settings=AuditSettings(n_boot=0))
    assert a.groups[("g",)].loc["b", "too_small"]
    assert any("too small" in w for w in a.warnings)


def test_diversity_per_group_with_embeddings():
    from fairvision.stats.diversity import vendi_score

    rng = np.random.default_rng(0)
    df = pd.DataFrame({"g": ["a"] * 20 + ["b"] * 20})
    # group a: 20 near-copies of one vector; group b: 20 random directions
    emb = np.vstack([np.tile(rng.normal(size=16), (20, 1)) + 1e-6 * rng.normal(size=(20, 16)), rng.normal(size=(20, 16))])
    a = audit_dataset(df, ["g"], embeddings=emb, settings=AuditSettings(n_boot=0))
    d = a.diversity
    assert d.loc[("g", "a"), "vendi"] == pytest.approx(1.0, abs=1e-3)
    assert d.loc[("g", "b"), "vendi"] == pytest.approx(vendi_score(emb[20:]))
    assert d.loc[("g", "b"), "vendi"] > 5
    assert d.loc[("(all)", "(all)"), "n_images"] == 40
