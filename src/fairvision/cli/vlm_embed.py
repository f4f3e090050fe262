"""``fairvision audit vlm embed``: image and prompt embeddings from a CLIP-style model, in the files
``audit vlm zero-shot`` reads (docs/METHODS.md §12.4).

numpy, pandas, torch and transformers are imported inside the command: together they take several seconds,
and ``fairvision --help`` must stay fast.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import NO_STORE_OPTION, STORE_OPTION, check_outdir, results_store, progress_bar
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

IMAGE_FILE = "image_embeddings.npz"
TEXT_FILE = "text_embeddings.parquet"
MANIFEST = "embed.json"
#: where torch and transformers come from (for the demo's one-line message)
TORCH_HINT_SHORT = "pip install 'fairvision[clip]'"


@with_settings("seed")
def embed_cmd(
    source: Path = typer.Argument(..., metavar="TABLE_OR_FOLDER", help="Sample table (sample_id, image path column, optional subject_id) or a folder of images (sample_id = file name without suffix)."),
    output: Path = typer.Option(..., "--output", "-o", help=f"Output folder for {IMAGE_FILE}, {TEXT_FILE} and {MANIFEST} (written when all succeeded)."),
    backend: Optional[str] = typer.Option(None, "--backend", help="transformers (a local Hugging Face CLIP folder), open_clip (--arch and a local weights file) or tiny-random (offline demo model: meaningless labels). Default: open_clip with --arch, else transformers."),
    model: Optional[Path] = typer.Option(None, "--model", help="Local weights: the checkpoint folder (transformers) or weights file (open_clip). Nothing is downloaded."),
    arch: Optional[str] = typer.Option(None, "--arch", help="open_clip architecture name, e.g. ViT-B-32."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="TOML file of prompt sets (default: the bundled ones)."),
    probe: List[str] = typer.Option([], "--probe", help="Prompt set to embed (repeat; default: every set of the file)."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Images or prompts per forward pass."),
    device: str = typer.Option("auto", "--device", help="auto (CUDA when available), cpu, cuda, cuda:1, ..."),
    image_col: Optional[str] = typer.Option(None, "--image-col", help="Column of the image paths (default: image_path or a common alias)."),
    variant: Optional[str] = typer.Option(None, "--variant", help="Embed only the rows of this image variant of a variants.csv from `audit vlm variants` (original, person_black, person_blur, background_black)."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bar on stderr (only on a terminal)."),
    settings: AuditSettings = None,
):
    """Embed every image and every prompt of the prompt sets with a CLIP-style model from local weights, and write
    the files `audit vlm zero-shot` reads: image_embeddings.npz (embeddings, ids) and text_embeddings.parquet
    (label, prompt, probe, embedding; one text_embeddings.<probe>.parquet per set when there are several). Image
    embeddings are kept in the results store by image content and model (docs/METHODS.md §12.4). --seed draws the
    weights of --backend tiny-random."""
    check_outdir(output)
    if backend is None:
        if model is None and arch is None:
            raise FairvisionError("give --model PATH (local CLIP weights) or --backend tiny-random (offline demo "
                                  "model, meaningless labels)")
        backend = "open_clip" if arch is not None else "transformers"
    if not source.exists():
        raise FairvisionError(f"{source}: no such file or folder")
    results = results_store(store, no_store)
    # lazy: numpy, pandas, torch and transformers take several seconds to import (see the module docstring)
    from fairvision.audits.vlm.prompts import default_prompts_path, load_prompt_sets
    from fairvision.datasets.demo import from_folder
    from fairvision.io.tables import read_table

    sets = load_prompt_sets(prompts)
    chosen = list(dict.fromkeys(probe)) or list(sets)
    unknown = [p for p in chosen if p not in sets]
    if unknown:
        raise FairvisionError(f"unknown probe {unknown[0]!r}; {prompts or default_prompts_path()} has {', '.join(sets)}")
    if source.is_dir():
        if variant is not None:
            raise FairvisionError("--variant needs the variants.csv of `audit vlm variants`, not a folder")
        data = from_folder(source)
    else:
        data = read_variant_table(source, variant, image_col) if variant is not None or variant_table(source) \
            else read_table(source, image_col=image_col)
    if "image_path" not in data.columns:
        raise FairvisionError(f"{source}: no image path column (image_path, path, filename, file_name); pass --image-col")
    missing = data["image_path"].isna().to_numpy()
    if missing.any():
        raise FairvisionError(f"{source}: row {int(missing.argmax()) + 1}: empty image path")
    files = write_embeddings(data, output, sets={p: sets[p] for p in chosen}, backend=backend, model=model, arch=arch,
                             batch_size=batch_size, device=device, seed=settings.seed, store=results, progress=progress,
                             source=str(source))
    typer.echo(f"image embeddings: {files['images'].resolve()}")
    typer.echo(f"text embeddings:  {files['texts'].resolve()}")
    for name, path in files["per_probe"].items():
        typer.echo(f"  {name}: {path.resolve()}")
    s = files["summary"]
    typer.echo(f"{s['images']:,} images ({s['from_store']:,} from the store), {s['prompts']:,} prompts, "
               f"{s['dim']}-d, model {s['model']}")


def variant_table(source: Path) -> bool:
    """Whether ``source`` is a table with a ``variant`` column (the variants.csv of ``audit vlm variants``)."""
    from fairvision.io.tables import read_raw_table  # lazy: see the module docstring

    return "variant" in read_raw_table(source).columns


def read_variant_table(source: Path, variant: Optional[str], image_col: Optional[str] = None):
    """The sample table of one image variant of a ``variants.csv`` (its ``variant`` column), read like any sample
    table; without ``variant``, a table of several variants (sample_id repeated) is a one-line error naming
    ``--variant`` and the per-variant files (docs/METHODS.md §12.2)."""
    import tempfile  # lazy: see the module docstring

    from fairvision.io.tables import read_raw_table, read_table

    raw = read_raw_table(source)
    if "variant" not in raw.columns:
        raise FairvisionError(f"{source}: --variant needs a 'variant' column (the variants.csv of `audit vlm variants`)")
    names = list(dict.fromkeys(raw["variant"].astype(str)))
    if variant is None:
        if len(names) > 1:
            raise FairvisionError(f"{source}: holds {len(names)} image variants per sample_id ({', '.join(names)}); "
                                  f"pick one with --variant {names[0]}, or embed variants.{names[0]}.csv")
        return read_table(source, image_col=image_col)
    if variant not in names:
        raise FairvisionError(f"{source}: no variant {variant!r}; it has {', '.join(names)}")
    one = raw.loc[(raw["variant"].astype(str) == variant).to_numpy()].reset_index(drop=True)
    with tempfile.TemporaryDirectory() as tmp:  # read_table's checks and normalisation on the chosen rows
        part = Path(tmp) / f"{source.stem}.{variant}.parquet"
        one.to_parquet(part, index=False)
        return read_table(part, image_root=source.parent, image_col=image_col)


def write_embeddings(data, output: Path, *, sets: dict, backend: str, model=None, arch=None, batch_size: int = 32,
                     device: str = "auto", seed: int = 0, store=None, progress: bool = False,
                     source: str = "") -> dict:
    """Embed the images of ``data`` and the prompts of ``sets`` and write them into ``output`` atomically
    (docs/METHODS.md §12.4). Returns the paths written and a ``summary``."""
    import numpy as np  # lazy: see the module docstring
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fairvision.io.atomic import atomic_output_dir
    from fairvision.vision.clip import load_adapter
    from fairvision.vision.clip_embeddings import embed_images

    adapter = load_adapter(backend, model=model, arch=arch, batch_size=batch_size, device=device, seed=seed)
    if adapter.note:
        typer.echo(f"warning: {adapter.note}", err=True)
    subjects = data["subject_id"].tolist() if "subject_id" in data.columns else None
    with progress_bar("embedding images", progress) as advance:
        images, summary = embed_images(data["image_path"].astype(str).tolist(), adapter, store=store,
                                       sample_ids=data["sample_id"].tolist(), subject_ids=subjects, progress=advance)
    rows = [(name, label, text) for name, labels in sets.items() for label, texts in labels.items() for text in texts]
    texts = adapter.encode_texts([r[2] for r in rows])
    if texts.shape[1] != images.shape[1]:
        raise FairvisionError(f"{adapter.name}: image embeddings have {images.shape[1]} dimensions but prompt "
                              f"embeddings {texts.shape[1]}")
    prov = adapter.describe()
    prov_json = json.dumps(prov)

    def parquet_bytes(keep) -> bytes:
        frame = pd.DataFrame({"label": [r[1] for r in rows], "prompt": [r[2] for r in rows],
                              "probe": [r[0] for r in rows]})
        table = pa.Table.from_pandas(frame, preserve_index=False).append_column(
            "embedding", pa.array(list(texts), type=pa.list_(pa.float32())))
        table = table.filter(pa.array(keep))
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), b"fairvision": prov_json.encode()})
        buf = io.BytesIO()
        pq.write_table(table, buf)
        return buf.getvalue()

    names = np.asarray([r[0] for r in rows])
    per_probe: dict[str, Path] = {}
    with atomic_output_dir(output) as stage:
        buf = io.BytesIO()
        np.savez(buf, embeddings=images, ids=np.asarray(data["sample_id"].astype(str).tolist()),
                 provenance=np.asarray(prov_json))
        (stage / IMAGE_FILE).write_bytes(buf.getvalue())
        (stage / TEXT_FILE).write_bytes(parquet_bytes(np.ones(len(rows), dtype=bool)))
        if len(sets) > 1:  # `audit vlm zero-shot` reads one prompt set per file
            for name in sets:
                (stage / f"text_embeddings.{name}.parquet").write_bytes(parquet_bytes(names == name))
                per_probe[name] = output / f"text_embeddings.{name}.parquet"
        summary = {**summary, "prompts": len(rows), "dim": int(images.shape[1]), "model": adapter.name}
        manifest = {**prov, "source": source, "probes": list(sets), **summary,
                    "files": [IMAGE_FILE, TEXT_FILE, *(p.name for p in per_probe.values())]}
        (stage / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return {"images": output / IMAGE_FILE, "texts": output / TEXT_FILE, "per_probe": per_probe, "summary": summary}


def run_vlm_demo(data, output: Path, *, n_boot: int = 1000, seed: int = 0, progress=None) -> Path | None:
    """The offline vision-language part of ``fairvision demo`` (docs/METHODS.md §12.4): embed the FairFace sample
    ``data`` (``sample_id``, ``image_path``, ``age``, ``gender``) with ``tiny-random``, then run ``audit vlm
    zero-shot`` with the gender prompt set by age and gender, with FairFace's gender as the true label. Writes
    ``output/embeddings`` and the report in ``output``; returns ``output``, or None (with a line on stderr) when
    torch or transformers is not installed. The labels are meaningless and the report's title says so."""
    import importlib.util

    missing = [m for m in ("torch", "transformers") if importlib.util.find_spec(m) is None]
    if missing:
        typer.echo(f"vision-language demo skipped: it needs {' and '.join(missing)} ({TORCH_HINT_SHORT})", err=True)
        return None
    from fairvision.audits.vlm.prompts import load_prompt_sets  # lazy: see the module docstring
    from fairvision.cli import main

    say = progress or (lambda msg: None)
    output = Path(output)
    emb = output / "embeddings"
    say("embedding the photos with tiny-random (offline demo model)")
    write_embeddings(data, emb, sets={"gender": load_prompt_sets()["gender"]}, backend="tiny-random", seed=seed,
                     source="FairFace demo sample")
    table = data[["sample_id", "image_path", "age", "gender"]].copy()
    table["true_gender"] = table["gender"].astype(str).map({"Male": "man", "Female": "woman"})
    samples = emb / "samples.parquet"
    from fairvision.io.tables import write_table

    write_table(table, samples)
    say("zero-shot probe")
    rc = main(["audit", "vlm", "zero-shot", "--samples", str(samples), "--image-embeddings", str(emb / IMAGE_FILE),
               "--text-embeddings", str(emb / TEXT_FILE), "-a", "age", "-a", "gender", "--true-col", "true_gender",
               "--n-boot", str(max(1, int(n_boot))), "--seed", str(seed), "-o", str(output),
               "--title", "fairvision demo: zero-shot probe with tiny-random (random weights: the labels are meaningless)"])
    if rc != 0:
        raise FairvisionError(f"vision-language demo: the zero-shot probe failed (exit {rc})")
    return output



def register(vlm_app: typer.Typer) -> None:
    vlm_app.command("embed")(embed_cmd)
