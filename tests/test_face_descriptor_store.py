"""Face descriptors kept in the results store (vision.face_descriptor_batch.embed_face_images with a store): a second run
describes no face again and gives the same vectors; a worker failure is not stored."""

from __future__ import annotations

import numpy as np
import pytest

import fairvision.vision.face_descriptor_batch as batch
from fairvision.datasets.demo import load_portraits
from fairvision.io.store import ResultsStore

pytestmark = pytest.mark.vision


def test_second_run_reads_descriptors_from_the_store(tmp_path, monkeypatch):
    df = load_portraits().head(5)
    paths = df["image_path"].tolist() + [str(tmp_path / "missing.jpg")]
    ids = df["sample_id"].tolist() + ["missing"]
    store = ResultsStore(tmp_path / "store")
    first = batch.embed_face_images(paths, ids, store=store)
    plain = batch.embed_face_images(paths, ids)  # no store: the reference
    assert first.ids == plain.ids and np.allclose(first.embeddings, plain.embeddings)
    assert first.status[["item_id", "ok", "n_faces"]].equals(plain.status[["item_id", "ok", "n_faces"]])

    def fail(*a, **k):
        raise AssertionError("described again")

    monkeypatch.setattr(batch, "embed_faces", fail)
    again = batch.embed_face_images(paths[:5], ids[:5], store=store)
    assert again.ids == first.ids and np.array_equal(again.embeddings, first.embeddings)
    assert ResultsStore(tmp_path / "store").info().set_index("stage").loc["face_descriptor", "keys"] == 5


def test_a_failed_chunk_is_not_stored(tmp_path, monkeypatch):
    df = load_portraits().head(3)
    store = ResultsStore(tmp_path / "store")

    def broken(paths, ids, **kw):
        raise RuntimeError("worker crashed")

    monkeypatch.setattr(batch, "embed_faces", broken)
    with pytest.raises(RuntimeError):
        batch.embed_face_images(df["image_path"], df["sample_id"], store=store)
    assert "face_descriptor" not in ResultsStore(tmp_path / "store").stages()
