"""A tiny randomly initialised Stable Diffusion pipeline built from configs (no network, no downloaded weights),
shared by the tests of the diffusers image-to-image adapter and of in-painting.

``save_tiny_pipeline(folder, "StableDiffusionInpaintPipeline")`` writes a pipeline whose UNet takes 9 input
channels (an in-painting UNet); ``"StableDiffusionImg2ImgPipeline"`` one of 4. The VAE has a scale factor of 2.
Run as a script (``python tests/tiny_diffusers.py FOLDER [PIPELINE_CLASS]``) to save one for a manual run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: the UNet's input channels of each pipeline class: an in-painting UNet also takes the mask and the masked image
IN_CHANNELS = {"StableDiffusionInpaintPipeline": 9, "StableDiffusionImg2ImgPipeline": 4}


def tokenizer_files(folder: Path) -> tuple[Path, Path]:
    """A byte-pair vocabulary of single letters (word-final forms too), two merges and CLIP's special tokens."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    tokens = ["<|startoftext|>", "<|endoftext|>", "!"] + letters + [f"{c}</w>" for c in letters] + ["th", "the</w>"]
    (folder / "vocab.json").write_text(json.dumps({t: i for i, t in enumerate(tokens)}))
    (folder / "merges.txt").write_text("#version: 0.2\nt h\nth e</w>\n")
    return folder / "vocab.json", folder / "merges.txt"


def tiny_components(folder: Path, in_channels: int = 4) -> dict:
    """UNet, VAE, CLIP text encoder, tokenizer (its files written into ``folder``) and a DDIM scheduler, seeded."""
    import torch
    from diffusers import AutoencoderKL, DDIMScheduler, UNet2DConditionModel
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTokenizer

    torch.manual_seed(0)
    unet = UNet2DConditionModel(
        block_out_channels=(8, 16), layers_per_block=1, sample_size=16, in_channels=in_channels, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        cross_attention_dim=16, attention_head_dim=2, norm_num_groups=4)
    vae = AutoencoderKL(block_out_channels=(8, 16), in_channels=3, out_channels=3, latent_channels=4,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        norm_num_groups=4, sample_size=32)
    text_encoder = CLIPTextModel(CLIPTextConfig(
        bos_token_id=0, eos_token_id=1, pad_token_id=1, hidden_size=16, intermediate_size=24, num_attention_heads=2,
        num_hidden_layers=2, vocab_size=64, max_position_embeddings=77, projection_dim=16))
    vocab, merges = tokenizer_files(folder)
    tokenizer = CLIPTokenizer(str(vocab), str(merges), model_max_length=77)
    scheduler = DDIMScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear", clip_sample=False,
                              set_alpha_to_one=False, steps_offset=1)
    return {"vae": vae, "text_encoder": text_encoder, "tokenizer": tokenizer, "unet": unet, "scheduler": scheduler,
            "safety_checker": None, "feature_extractor": None, "image_encoder": None,
            "requires_safety_checker": False}


def save_tiny_pipeline(folder: Path, pipeline: str = "StableDiffusionImg2ImgPipeline") -> Path:
    """Build the tiny ``pipeline`` (a diffusers class name) and save it to ``folder / "pipe"``; returns that path."""
    import diffusers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pipe = getattr(diffusers, pipeline)(**tiny_components(folder, IN_CHANNELS[pipeline]))
    pipe.save_pretrained(folder / "pipe")
    return folder / "pipe"


if __name__ == "__main__":
    print(save_tiny_pipeline(Path(sys.argv[1]), *sys.argv[2:3]))
