"""The diffusers image-to-image adapter, exercised with a tiny randomly initialised Stable Diffusion pipeline
built from configs and saved to a temporary folder (no network, no downloaded weights)."""

import importlib.util

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.generative.generators import DiffusersGenerator, generate, make_generator
from fairvision.errors import FairvisionError
from fairvision.io.images import write_png
from tiny_diffusers import save_tiny_pipeline  # tests/ is on sys.path

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("diffusers") is None or importlib.util.find_spec("transformers") is None,
    reason="needs the diffusers extra (pip install 'fairvision[diffusers]')")


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory):
    return save_tiny_pipeline(tmp_path_factory.mktemp("tiny-sd"), "StableDiffusionImg2ImgPipeline")


def test_adapter_loads_local_weights_and_is_seeded(tiny_pipeline):
    gen = DiffusersGenerator("sd", path=tiny_pipeline, strength=0.6, num_inference_steps=4, guidance_scale=3.0,
                             device="cpu")
    img = np.random.default_rng(0).integers(0, 256, (34, 40, 3), dtype=np.uint8)
    a = gen.edit(img, "a photo of a person who is the", 7)
    b = gen.edit(img, "a photo of a person who is the", 7)
    c = gen.edit(img, "a photo of a person who is the", 8)
    assert a.dtype == np.uint8 and a.shape == (34, 40, 3)  # tiny VAE: scale factor 2
    assert np.array_equal(a, b)  # the same generation seed gives the same output
    assert not np.array_equal(a, c)
    assert gen.pipeline() is gen.pipeline()  # loaded once
    assert gen.item_params("x")["kind"] == "diffusers" and gen.params["path"] == str(tiny_pipeline.resolve())


def test_adapter_in_a_generation_run(tiny_pipeline, tmp_path):
    img = np.random.default_rng(1).integers(0, 256, (32, 32, 3), dtype=np.uint8)
    write_png(tmp_path / "s1.png", img)
    seeds = pd.DataFrame({"sample_id": ["s1"], "image_path": [str(tmp_path / "s1.png")]})
    prompts = pd.DataFrame({"topic": "t", "word": ["nurse", "pilot"], "prompt": ["p nurse", "p pilot"]})
    cfg = {"kind": "diffusers", "name": "sd", "seeds": [0, 1], "path": str(tiny_pipeline), "num_inference_steps": 2,
           "device": "cpu"}
    rec = generate(seeds, prompts, cfg, tmp_path / "work")
    assert len(rec) == 4 and rec["ok"].all(), rec["reason"].tolist()
    assert rec["sha256"].str.len().eq(64).all()
    again = generate(seeds, prompts, cfg, tmp_path / "work")
    assert not again["generated"].any()


def test_adapter_never_downloads(tmp_path):
    with pytest.raises(FairvisionError, match="not a local diffusers pipeline folder"):
        make_generator({"kind": "diffusers", "path": "runwayml/stable-diffusion-v1-5"}, base=tmp_path)
    with pytest.raises(FairvisionError, match="strength"):
        DiffusersGenerator("sd", path=tmp_path, strength=0.0)
