"""Generative audit assessments in the results store: a rerun assesses nothing it already has and gives
identical scores; a changed assessor setting recomputes only that assessor; --store / --no-store."""

import textwrap

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.generative import assessors, audit_generative, load_spec
from fairvision.cli import main
from fairvision.io.store import ResultsStore

pytestmark = pytest.mark.vision

WORDS = ["doctor", "nurse", "pilot"]
PREDICTOR = '''
import numpy as np

def predict(image):
    """A deterministic stand-in for an age/gender model: age from the mean grey level."""
    m = float(np.asarray(image, float).mean())
    return {"age": m / 4.0, "gender": "male" if m > 110 else "female", "p_male": min(1.0, m / 255.0)}
'''


def _spec(tmp_path, *, skin_method="mean", identity=True):
    (tmp_path / "fake_ag.py").write_text(textwrap.dedent(PREDICTOR))
    (tmp_path / "words.toml").write_text("[words]\nprofessions = [" + ", ".join(f'"{w}"' for w in WORDS) + "]\n")
    p = tmp_path / "spec.toml"
    p.write_text(textwrap.dedent(f"""
        name = "store"
        workdir = "work"
        [seeds]
        limit = 4
        [prompts]
        words = "words.toml"
        [generator]
        kind = "builtin"
        noise_L = 1.0
        [generator.shifts]
        doctor = {{ L = -6.0 }}
        [assessors]
        skin_method = "{skin_method}"
        identity = {str(identity).lower()}
        age_gender = "fake_ag:predict"
        [scores]
        n_boot = 100
        """))
    return p


@pytest.fixture
def counted(monkeypatch):
    """Count the per-image assessments actually run (workers=1 runs them in this process)."""
    calls = []
    real = assessors.assess_image

    def counting(task):
        calls.append(task)
        return real(task)

    monkeypatch.setattr(assessors, "assess_image", counting)
    return calls


def test_rerun_assesses_nothing_and_scores_are_identical(tmp_path, monkeypatch, counted):
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = load_spec(_spec(tmp_path))
    store = ResultsStore(tmp_path / "store")
    first = audit_generative(spec, store=store)
    n_images = 4 + 4 * len(WORDS)
    assert len(counted) == n_images
    assert first.settings["assessments"]["computed"] == {"skin": n_images, "age_gender": n_images,
                                                         "identity": n_images}
    assert first.n_assessed() == 3 * n_images and not first.images["from_store"].any()
    assert set(store.stages()) == {"generative_skin", "generative_age_gender", "generative_identity"}
    info = store.info().set_index("stage")
    assert (info["keys"] == n_images).all()

    counted.clear()
    second = audit_generative(load_spec(spec.path), store=ResultsStore(tmp_path / "store"))
    assert counted == [] and second.n_assessed() == 0
    assert second.settings["assessments"]["from_store"] == {"skin": n_images, "age_gender": n_images,
                                                            "identity": n_images}
    assert second.images["from_store"].all()
    for name in ("words", "topics", "model", "thresholds", "face_lost"):
        pd.testing.assert_frame_equal(getattr(first, name), getattr(second, name))
    pd.testing.assert_frame_equal(first.pairs, second.pairs)
    pd.testing.assert_frame_equal(first.images.drop(columns="from_store"), second.images.drop(columns="from_store"))
    ident = second.pairs["identity"]  # descriptors survive the JSON round trip (NaN: dlib found no face)
    assert ident.notna().sum() >= len(WORDS) and (ident.dropna() >= 0).all()
    # without a store everything is assessed again, to the same numbers
    counted.clear()
    third = audit_generative(load_spec(spec.path))
    assert len(counted) == n_images and third.n_assessed() == 3 * n_images
    pd.testing.assert_frame_equal(first.words, third.words)


def test_changed_skin_setting_recomputes_only_skin(tmp_path, monkeypatch, counted):
    monkeypatch.syspath_prepend(str(tmp_path))
    store = tmp_path / "store"
    audit_generative(load_spec(_spec(tmp_path, identity=False)), store=store)
    counted.clear()
    res = audit_generative(load_spec(_spec(tmp_path, skin_method="median_ita", identity=False)),
                           store=store)
    n_images = 4 + 4 * len(WORDS)
    assert res.settings["assessments"]["computed"] == {"skin": n_images, "age_gender": 0}
    assert res.settings["assessments"]["from_store"] == {"skin": 0, "age_gender": n_images}
    assert len(counted) == n_images and all(t["parts"] == ["skin"] for t in counted)


def test_identical_images_are_assessed_once(tmp_path, counted):
    from fairvision.datasets import load_portraits
    from fairvision.io.images import read_image, write_png

    img = read_image(load_portraits()["image_path"].iloc[0])
    paths = [tmp_path / "a.png", tmp_path / "b" / "same.png"]
    for p in paths:
        write_png(p, img)
    opts = {"skin": True, "age_gender": "none"}
    df = assessors.assess_images([str(p) for p in paths], opts, store=tmp_path / "store")
    assert len(counted) == 1 and df.attrs["assessments"]["computed"] == {"skin": 1}
    assert df["L"].iloc[0] == df["L"].iloc[1] and df["skin_ok"].all()


def test_cli_store_and_no_store(tmp_path, monkeypatch, capsys):
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = _spec(tmp_path, identity=False)
    store = tmp_path / "store"
    args = ["audit", "generative", str(spec), "-o", str(tmp_path / "r"), "-j", "1", "--store", str(store)]
    assert main(args) == 0
    assert "32 assessments computed, 0 from the store" in capsys.readouterr().out
    assert main(args) == 0
    assert "0 assessments computed, 32 from the store" in capsys.readouterr().out
    other = tmp_path / "other"
    monkeypatch.setenv("FAIRVISION_STORE", str(other))
    assert main(["audit", "generative", str(spec), "-o", str(tmp_path / "r2"), "-j", "1", "--no-store"]) == 0
    assert "32 assessments computed, 0 from the store" in capsys.readouterr().out
    assert not other.exists()
    assert main(args[:-2] + ["--no-store", "--store", str(store)]) == 2
