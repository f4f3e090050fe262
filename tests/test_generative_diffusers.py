"""The diffusers image-to-image adapter, exercised with a tiny randomly initialised Stable Diffusion pipeline
built from configs and saved to a temporary folder (no network, no downloaded weights)."""

import importlib.util
import json

import numpy as np
import pandas as pd
import pytest

from fairvision.audits.generative.generators import DiffusersGenerator, generate, make_generator
from fairvision.errors import FairvisionError
from fairvision.io.images import write_png

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("diffusers") is None or importlib.util.find_spec("transformers") is None,
    reason="needs the diffusers extra (pip install 'fairvision[diffusers]')")


def _tokenizer_files(folder):
    """A byte-pair vocabulary of single letters (word-final forms too), two merges and CLIP's special tokens."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = ["<|startoftext|>", "<|endoftext|>", "!"] + letters + [f"{c}</w>" for c in letters] + ["th", "the</w>"]
    vocab = {t: i for i, t in enumerate(tokens)}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\nt h\nth e</w>\n")
    return folder / "vocab.json", folder / "merges.txt"


@pytest.fixture(scope="module")
def tiny_pipeline(tmp_path_factory):
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, StableDiffusionImg2ImgPipeline, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    folder = tmp_path_factory.mktemp("tiny-sd")
    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16), layers_per_block=1, sample_size=16, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16, attention_head_dim=2, norm_num_groups=4)
    vae = AutoencoderKL(block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        norm_num_groups=4, sample_size=32)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=16, intermediate_size=24, num_attention_heads=2,
        num_hidden_layers=2, vocab_size=64, max_position_embeddings=77, projection_dim=16))
    vocab, merges = _tokenizer_files(folder)
    tokenizer = CLIPTokenizer(str(vocab), str(merges), model_max_length=77)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    pipe = StableDiffusionImg2ImgPipeline(vae=vae, text_encoder=text_encoder, tokenizer=tokenizer, unet=unet,
                                          scheduler=scheduler, safety_checker=None, feature_extractor=None,
                                          image_encoder=None, requires_safety_checker=False)
    pipe.save_pretrained(folder / "pipe")
    return folder / "pipe"


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
