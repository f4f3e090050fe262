"""CLIP-style model adapters and ``audit vlm embed`` (docs/METHODS.md §12.4).

Everything runs offline: a tiny randomly initialised CLIPModel saved with ``save_pretrained`` and loaded back
through the transformers adapter, a stand-in ``open_clip`` module with open_clip's API (open_clip itself needs
torchvision, which cannot be installed here), and the built-in ``tiny-random`` model. Expected embeddings are
computed directly from the underlying model objects, not through the adapters.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import numpy as np
import pandas as pd
import pytest

from fairvision.cli import main
from fairvision.datasets.demo import demo_path, load_portraits
from fairvision.errors import FairvisionError
from fairvision.io.images import read_image
from fairvision.io.store import ResultsStore

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("transformers") is None,
    reason="needs torch and transformers (pip install 'fairvision[diffusers]')")

clip = pytest.importorskip("fairvision.vision.clip")
clip_embeddings = pytest.importorskip("fairvision.vision.clip_embeddings")
PORTRAITS = demo_path("portraits")
PROMPTS = ["a photograph of a man", "a picture showing someone", "an indoor scene"]


@pytest.fixture(scope="module")
def portraits():
    df = load_portraits().iloc[:6].reset_index(drop=True)
    return df, [read_image(p) for p in df["image_path"]]


@pytest.fixture(scope="module")
def hf_checkpoint(tmp_path_factory):
    """A tiny CLIPModel with a byte-level tokenizer and a PIL image processor, saved like a Hub checkpoint."""
    import torch
    import transformers
    from transformers import CLIPConfig, CLIPModel, CLIPProcessor, CLIPTokenizer

    ip_cls = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    vocab = clip.byte_level_vocab()
    common = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2)
    cfg = CLIPConfig(
        text_config=dict(vocab_size=len(vocab), bos_token_id=vocab["<|startoftext|>"],
                         eos_token_id=vocab["<|endoftext|>"], pad_token_id=vocab["<|endoftext|>"], **common),
        vision_config=dict(image_size=48, patch_size=16, **common), projection_dim=24)
    torch.manual_seed(0)
    model = CLIPModel(cfg).eval()
    proc = CLIPProcessor(image_processor=ip_cls(size={"shortest_edge": 48}, crop_size={"height": 48, "width": 48}),
                         tokenizer=CLIPTokenizer(vocab=vocab, merges=[]))
    folder = tmp_path_factory.mktemp("hf") / "tiny-clip"
    model.save_pretrained(folder)
    proc.save_pretrained(folder)
    return folder, model, proc


def _unit(x):
    x = np.asarray(x, dtype=np.float64)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _features(out):
    return (out if hasattr(out, "shape") else out.pooler_output).detach().numpy()


# --------------------------------------------------------------------------- preprocessing


def test_clip_preprocess_matches_hugging_face(portraits, hf_checkpoint):
    """Square portraits and a wide and a tall crop of one: the numpy/PIL path gives the processor's pixels."""
    _, images = portraits
    _, _, proc = hf_checkpoint
    imgs = images[:2] + [images[2][100:400, :], images[3][:, 60:440]]  # 300 x 500 and 500 x 380
    ours = clip.clip_preprocess(imgs, 48)
    theirs = proc.image_processor(images=imgs, return_tensors="np")["pixel_values"]
    assert ours.shape == theirs.shape == (4, 3, 48, 48)
    assert ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, atol=1e-4)


def test_clip_preprocess_by_hand():
    """A flat image: every pixel normalises to (v / 255 - mean) / std."""
    img = np.full((30, 50, 3), (255, 0, 128), dtype=np.uint8)
    x = clip.clip_preprocess([img], 16)
    want = (np.array([255, 0, 128]) / 255 - np.array(clip.CLIP_MEAN)) / np.array(clip.CLIP_STD)
    np.testing.assert_allclose(x[0].reshape(3, -1), np.repeat(want[:, None], 256, axis=1), atol=1e-5)


# --------------------------------------------------------------------------- transformers adapter


def test_transformers_adapter_local_checkpoint(portraits, hf_checkpoint):
    import torch

    _, images = portraits
    folder, model, proc = hf_checkpoint
    adapter = clip.load_adapter("transformers", model=folder, batch_size=4, device="cpu")
    got = adapter.encode_images(images)
    with torch.no_grad():
        want = _features(model.get_image_features(pixel_values=proc(images=images, return_tensors="pt")["pixel_values"]))
        enc = proc.tokenizer(PROMPTS, padding=True, return_tensors="pt")
        want_t = _features(model.get_text_features(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]))
    assert got.shape == (6, 24) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1, atol=1e-6)
    np.testing.assert_allclose(got, _unit(want), atol=1e-5)
    np.testing.assert_allclose(adapter.encode_texts(PROMPTS), _unit(want_t), atol=1e-5)
    assert adapter.calls == 2 + 1  # 6 images in batches of 4, 3 prompts in one batch
    assert adapter.note is None and adapter.signature


def test_transformers_adapter_without_processor_uses_numpy_preprocessing(portraits, hf_checkpoint, tmp_path):
    import shutil

    _, images = portraits
    folder, _, _ = hf_checkpoint
    bare = tmp_path / "bare"
    shutil.copytree(folder, bare)
    for name in ("processor_config.json", "preprocessor_config.json"):
        (bare / name).unlink(missing_ok=True)
    with_proc = clip.TransformersCLIP(folder, device="cpu")
    without = clip.TransformersCLIP(bare, device="cpu")
    np.testing.assert_allclose(without.encode_images(images), with_proc.encode_images(images), atol=1e-4)
    assert without.signature != with_proc.signature  # the preprocessing is part of what keys the store


@pytest.mark.parametrize("case", ["missing", "file", "no_config", "not_clip"])
def test_transformers_bad_model_folder_exits_2(case, tmp_path, capsys):
    target = tmp_path / "model"
    if case == "file":
        target.write_text("x")
    elif case == "no_config":
        target.mkdir()
    elif case == "not_clip":
        target.mkdir()
        (target / "config.json").write_text(json.dumps({"model_type": "bert"}))
    rc = main(["audit", "vlm", "embed", str(PORTRAITS), "-o", str(tmp_path / "out"), "--model", str(target), "--no-store"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and str(target) in err
    assert not (tmp_path / "out").exists()


def test_embed_needs_a_model_or_tiny_random(tmp_path, capsys):
    assert main(["audit", "vlm", "embed", str(tmp_path), "-o", str(tmp_path / "o")]) == 2
    assert "--backend tiny-random" in capsys.readouterr().err


# --------------------------------------------------------------------------- open_clip stand-in


def _fake_open_clip(calls: dict):
    """A module with open_clip's API (create_model_and_transforms, get_tokenizer, list_models), backed by a tiny
    torch model whose weights come from the file passed as ``pretrained``."""
    import torch
    from PIL import Image

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.visual = torch.nn.Linear(3 * 8 * 8, 12)
            self.token = torch.nn.Embedding(260, 12)

        def encode_image(self, x):
            return self.visual(x.flatten(1))

        def encode_text(self, ids):
            return self.token(ids).sum(1)

    def preprocess(pil):
        assert isinstance(pil, Image.Image)
        arr = np.asarray(pil.convert("RGB").resize((8, 8), Image.Resampling.BILINEAR), dtype=np.float32) / 255
        return torch.from_numpy(arr.transpose(2, 0, 1).copy())

    def tokenizer(texts):
        ids = np.zeros((len(texts), 16), dtype=np.int64)
        for i, t in enumerate(texts):
            b = list(t.encode())[:16]
            ids[i, :len(b)] = np.asarray(b) + 1
        return torch.from_numpy(ids)

    def create_model_and_transforms(name, pretrained=None, device="cpu", **kw):
        calls["create"] = (name, pretrained, device)
        model = Tiny()
        model.load_state_dict(torch.load(pretrained, weights_only=True))
        return model, preprocess, preprocess

    mod = types.ModuleType("open_clip")
    mod.__version__ = "0.0-standin"
    mod.list_models = lambda: ["Tiny-8"]
    mod.create_model_and_transforms = create_model_and_transforms
    mod.get_tokenizer = lambda name: tokenizer
    mod.Tiny, mod.preprocess, mod.tokenizer = Tiny, preprocess, tokenizer
    return mod


def test_open_clip_adapter_with_standin(portraits, tmp_path, monkeypatch):
    import torch

    _, images = portraits
    calls: dict = {}
    fake = _fake_open_clip(calls)
    monkeypatch.setitem(sys.modules, "open_clip", fake)
    torch.manual_seed(1)
    ref = fake.Tiny().eval()
    weights = tmp_path / "tiny.pt"
    torch.save(ref.state_dict(), weights)
    adapter = clip.load_adapter("open_clip", model=weights, arch="Tiny-8", batch_size=4, device="cpu")
    assert calls["create"] == ("Tiny-8", str(weights), "cpu")
    from PIL import Image

    with torch.no_grad():
        want = ref.encode_image(torch.stack([fake.preprocess(Image.fromarray(im)) for im in images])).numpy()
        want_t = ref.encode_text(fake.tokenizer(PROMPTS)).numpy()
    np.testing.assert_allclose(adapter.encode_images(images), _unit(want), atol=1e-6)
    np.testing.assert_allclose(adapter.encode_texts(PROMPTS), _unit(want_t), atol=1e-6)
    with pytest.raises(FairvisionError, match="unknown open_clip architecture 'ViT-Nope'"):
        clip.OpenCLIP("ViT-Nope", weights)
    with pytest.raises(FairvisionError, match="no such file"):
        clip.OpenCLIP("Tiny-8", tmp_path / "absent.pt")


def test_open_clip_missing_is_one_line(tmp_path, monkeypatch, capsys):
    weights = tmp_path / "w.pt"
    weights.write_bytes(b"x")
    monkeypatch.setitem(sys.modules, "open_clip", None)  # import open_clip raises ImportError
    rc = main(["audit", "vlm", "embed", str(PORTRAITS), "-o", str(tmp_path / "o"), "--arch", "ViT-B-32",
               "--model", str(weights), "--no-store"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "pip install open_clip_torch" in err


# --------------------------------------------------------------------------- tiny-random


def test_tiny_random_is_deterministic(portraits):
    _, images = portraits
    a, b = clip.TinyRandomCLIP(seed=0), clip.TinyRandomCLIP(seed=0, batch_size=5)
    c = clip.TinyRandomCLIP(seed=1)
    ea, eb, ec = a.encode_images(images), b.encode_images(images), c.encode_images(images)
    np.testing.assert_allclose(ea, eb, atol=1e-6)  # batching changes nothing
    np.testing.assert_array_equal(a.encode_texts(PROMPTS), clip.TinyRandomCLIP(seed=0).encode_texts(PROMPTS))
    assert a.signature == b.signature != c.signature
    assert np.abs(ea - ec).max() > 0.1
    np.testing.assert_allclose(np.linalg.norm(ea, axis=1), 1, atol=1e-6)
    sim = ea @ ea.T
    assert sim[np.triu_indices(6, 1)].max() < 0.999  # images are told apart (not one vector for all)
    assert "meaningless" in a.note and a.describe()["note"] == a.note
    # the weights come from numpy generators: a parameter is reproducible on its own
    import zlib

    model, _, _ = clip.tiny_clip_parts(3)
    name = "visual_projection.weight"
    w = model.state_dict()[name].numpy()
    rng = np.random.default_rng([3, zlib.crc32(name.encode())])
    np.testing.assert_array_equal(w, rng.normal(0, 1 / np.sqrt(w.shape[1]), w.shape).astype(np.float32))


def test_embed_images_reads_the_store_second_time(portraits, tmp_path):
    df, images = portraits
    paths = df["image_path"].tolist() + [df["image_path"].iloc[0]]  # the same bytes twice: embedded once
    store = ResultsStore(tmp_path / "store")
    adapter = clip.TinyRandomCLIP(seed=0, batch_size=4)
    first, s1 = clip_embeddings.embed_images(paths, adapter, store=store, sample_ids=[f"s{i}" for i in range(7)])
    assert s1 == {"images": 7, "from_store": 0, "computed": 7}
    assert adapter.calls == 2  # 6 distinct images in batches of 4
    np.testing.assert_allclose(first[:6], clip.TinyRandomCLIP(seed=0).encode_images(images), atol=1e-6)
    np.testing.assert_array_equal(first[6], first[0])
    again = clip.TinyRandomCLIP(seed=0, batch_size=4)
    second, s2 = clip_embeddings.embed_images(paths, again, store=ResultsStore(tmp_path / "store"))
    assert again.calls == 0 and s2["from_store"] == 7
    np.testing.assert_array_equal(second, first)  # stored float32 bytes, exactly
    other = clip.TinyRandomCLIP(seed=1, batch_size=4)  # another model is another key
    _, s3 = clip_embeddings.embed_images(paths, other, store=ResultsStore(tmp_path / "store"))
    assert s3["from_store"] == 0 and other.calls == 2


def test_embed_images_unreadable_image_is_one_line(tmp_path):
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(FairvisionError, match="bad.jpg: not a readable image"):
        clip_embeddings.embed_images([str(bad)], clip.TinyRandomCLIP(), store=ResultsStore(tmp_path / "store"))


# --------------------------------------------------------------------------- the command, end to end


def _sample_table(tmp_path, df) -> str:
    table = df.assign(sample_id="img" + df["sample_id"], subject_id=[f"p{i // 2}" for i in range(len(df))],
                      group=["a", "b"] * (len(df) // 2))
    path = tmp_path / "samples.csv"
    table.to_csv(path, index=False)
    return str(path)


def test_embed_then_zero_shot(portraits, tmp_path, capsys):
    df, images = portraits
    samples = _sample_table(tmp_path, df)
    out = tmp_path / "emb"
    args = ["audit", "vlm", "embed", samples, "-o", str(out), "--backend", "tiny-random", "--probe", "gender",
            "--batch-size", "4", "--store", str(tmp_path / "store")]
    assert main(args) == 0
    cap = capsys.readouterr()
    assert "warning: tiny-random" in cap.err and "meaningless" in cap.err
    assert "6 images (0 from the store)" in cap.out

    z = np.load(out / "image_embeddings.npz", allow_pickle=False)
    assert list(z["ids"]) == ("img" + df["sample_id"]).tolist()
    np.testing.assert_allclose(z["embeddings"], clip.TinyRandomCLIP(seed=0).encode_images(images), atol=1e-6)
    assert "meaningless" in json.loads(str(z["provenance"]))["note"]
    text = pd.read_parquet(out / "text_embeddings.parquet")
    assert list(text.columns) == ["label", "prompt", "probe", "embedding"]
    assert len(text) == 12 and set(text["probe"]) == {"gender"}
    np.testing.assert_allclose(np.stack(text["embedding"].to_numpy()),
                               clip.TinyRandomCLIP(seed=0).encode_texts(text["prompt"].tolist()), atol=1e-6)
    assert clip_embeddings.read_provenance(out / "text_embeddings.parquet")["backend"] == "tiny-random"
    manifest = json.loads((out / "embed.json").read_text())
    assert manifest["images"] == 6 and manifest["probes"] == ["gender"]

    assert main(args) == 0  # second run: every image from the store
    assert "6 images (6 from the store)" in capsys.readouterr().out

    report = tmp_path / "zs"
    assert main(["audit", "vlm", "zero-shot", "--samples", samples, "--image-embeddings",
                 str(out / "image_embeddings.npz"), "--text-embeddings", str(out / "text_embeddings.parquet"),
                 "-a", "group", "--n-boot", "50", "-o", str(report)]) == 0
    pred = pd.read_parquet(report / "predictions.parquet")
    assert len(pred) == 6 and set(pred["predicted"]) <= {"man", "woman", "unspecified"}


def test_embed_folder_with_every_probe_writes_one_file_per_set(tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for p in load_portraits()["image_path"].iloc[:4]:
        (folder / p.rsplit("/", 1)[-1]).write_bytes(open(p, "rb").read())
    out = tmp_path / "emb"
    assert main(["audit", "vlm", "embed", str(folder), "-o", str(out), "--backend", "tiny-random", "--no-store"]) == 0
    capsys.readouterr()
    text = pd.read_parquet(out / "text_embeddings.parquet")
    assert set(text["probe"]) == {"gender", "indoor_outdoor", "urban_rural"}
    for probe in ("gender", "indoor_outdoor", "urban_rural"):
        part = pd.read_parquet(out / f"text_embeddings.{probe}.parquet")
        assert set(part["probe"]) == {probe}
        pd.testing.assert_frame_equal(part.reset_index(drop=True),
                                      text[text["probe"] == probe].reset_index(drop=True))
    samples = tmp_path / "s.parquet"  # Parquet keeps the ids' leading zeros (a CSV reader makes "001" the number 1)
    pd.DataFrame({"sample_id": ["001", "002", "003", "004"], "g": ["x", "y", "x", "y"]}).to_parquet(samples)
    assert main(["audit", "vlm", "zero-shot", "--samples", str(samples), "--image-embeddings",
                 str(out / "image_embeddings.npz"), "--text-embeddings", str(out / "text_embeddings.indoor_outdoor.parquet"),
                 "-a", "g", "--n-boot", "20", "-o", str(tmp_path / "zs")]) == 0


def test_embed_unknown_probe_exits_2(tmp_path, capsys):
    assert main(["audit", "vlm", "embed", str(tmp_path), "-o", str(tmp_path / "o"), "--backend", "tiny-random",
                 "--probe", "nope", "--no-store"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "unknown probe 'nope'" in err


def test_zero_shot_report_says_tiny_random_labels_are_meaningless(portraits, tmp_path, capsys):
    df, _ = portraits
    samples = _sample_table(tmp_path, df)
    out = tmp_path / "emb"
    assert main(["audit", "vlm", "embed", samples, "-o", str(out), "--backend", "tiny-random", "--probe", "gender",
                 "--no-store"]) == 0
    report = tmp_path / "zs"
    assert main(["audit", "vlm", "zero-shot", "--samples", samples, "--image-embeddings",
                 str(out / "image_embeddings.npz"), "--text-embeddings", str(out / "text_embeddings.parquet"),
                 "-a", "group", "--n-boot", "20", "-o", str(report)]) == 0
    assert "meaningless" in capsys.readouterr().err
    meta = json.loads((report / "report.json").read_text())
    assert "meaningless" in json.dumps(meta)


def test_vlm_demo_on_a_fairface_subset(tmp_path, capsys):
    from fairvision.cli.vlm_embed import run_vlm_demo
    from fairvision.datasets import load_demo

    df = load_demo().groupby("gender", observed=True).head(12).reset_index(drop=True)
    out = run_vlm_demo(df, tmp_path / "vlm", n_boot=20)
    report = json.loads((out / "report.json").read_text())
    assert "meaningless" in report["title"]
    pred = pd.read_parquet(out / "predictions.parquet")
    assert len(pred) == 24 and set(pred["true"]) == {"man", "woman"}
    assert "meaningless" in capsys.readouterr().err


def test_variants_loop_embed_zero_shot_compare_carries_the_model_note(tmp_path, capsys):
    """The README loop: variants -> embed each variant -> zero-shot each -> compare two; the tiny-random note
    travels in predictions.parquet's metadata into the compare report (docs/METHODS.md §12.2, §12.4)."""
    df = load_portraits().iloc[:4].reset_index(drop=True)
    samples = tmp_path / "s.csv"
    df.assign(sample_id="img" + df["sample_id"], group=["a", "b"] * 2, x0=100, y0=50, x1=400, y1=480).to_csv(
        samples, index=False)
    assert main(["audit", "vlm", "variants", "--samples", str(samples), "-o", str(tmp_path / "var"),
                 "--box-cols", "x0,y0,x1,y1"]) == 0
    # the combined table has four rows per sample_id: embed says how to pick one variant
    assert main(["audit", "vlm", "embed", str(tmp_path / "var" / "variants.csv"), "-o", str(tmp_path / "bad"),
                 "--backend", "tiny-random", "--no-store"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--variant" in err and "variants.original.csv" in err
    preds = {}
    for v, source in (("original", ["variants.original.csv"]), ("background_black", ["variants.csv", "--variant",
                                                                                        "background_black"])):
        emb = tmp_path / f"emb-{v}"
        assert main(["audit", "vlm", "embed", str(tmp_path / "var" / source[0]), *source[1:], "-o", str(emb),
                     "--backend", "tiny-random", "--probe", "gender", "--no-store"]) == 0
        z = np.load(emb / "image_embeddings.npz", allow_pickle=False)
        assert list(z["ids"]) == ("img" + df["sample_id"]).tolist()
        expected = clip.TinyRandomCLIP(seed=0).encode_images(
            [read_image(tmp_path / "var" / f"img{sid}__{v}.png") for sid in df["sample_id"]])
        np.testing.assert_allclose(z["embeddings"], expected, atol=1e-6)
        assert main(["audit", "vlm", "zero-shot", "--samples", str(samples), "--image-embeddings",
                     str(emb / "image_embeddings.npz"), "--text-embeddings", str(emb / "text_embeddings.parquet"),
                     "-a", "group", "--n-boot", "20", "-o", str(tmp_path / f"zs-{v}")]) == 0
        preds[v] = tmp_path / f"zs-{v}" / "predictions.parquet"
        prov = clip_embeddings.read_provenance(preds[v])
        assert prov["backend"] == "tiny-random" and "meaningless" in prov["note"] and prov["probe"] == "gender"
    capsys.readouterr()
    assert main(["audit", "vlm", "compare", "--samples", str(samples), "--first", str(preds["original"]),
                 "--second", str(preds["background_black"]), "-a", "group", "--n-boot", "20",
                 "-o", str(tmp_path / "cmp")]) == 0
    assert "warning:" in capsys.readouterr().err
    doc = json.loads((tmp_path / "cmp" / "report.json").read_text())
    assert "meaningless" in doc["meta"]["model note"] and "tiny-random" in doc["meta"]["model"]
    assert "meaningless" in json.dumps(doc["sections"])


def test_combined_prompt_file_without_probe_names_the_per_probe_files(tmp_path, capsys):
    folder = tmp_path / "imgs"
    folder.mkdir()
    for p in load_portraits()["image_path"].iloc[:2]:
        (folder / p.rsplit("/", 1)[-1]).write_bytes(open(p, "rb").read())
    out = tmp_path / "emb"
    assert main(["audit", "vlm", "embed", str(folder), "-o", str(out), "--backend", "tiny-random", "--no-store"]) == 0
    samples = tmp_path / "s.parquet"
    pd.DataFrame({"sample_id": ["001", "002"], "g": ["x", "y"]}).to_parquet(samples)
    capsys.readouterr()
    assert main(["audit", "vlm", "zero-shot", "--samples", str(samples), "--image-embeddings",
                 str(out / "image_embeddings.npz"), "--text-embeddings", str(out / "text_embeddings.parquet"),
                 "-a", "g", "--n-boot", "5", "-o", str(tmp_path / "zs")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--probe" in err
    assert str(out / "text_embeddings.gender.parquet") in err and "text_embeddings.urban_rural.parquet" in err
