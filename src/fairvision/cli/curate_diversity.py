"""``fairvision curate diversity``: Vendi scores of whole images, scenes and subjects per group
(docs/METHODS.md §13.1, §13.2)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed, progress_bar,
                                 results_store)
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

_VARIANTS = ("whole", "scene", "subject")
_EMBEDDERS = ("efficientnet", "dlib-face")

@with_settings("n_boot", "min_subjects", "correction", "alpha", "seed")
def diversity_cmd(
    samples: Path = typer.Argument(..., metavar="SAMPLES", help="Sample table: sample_id, image_path, subject_id (optional), the attribute columns."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Group attribute column (repeat: -a gender -a age)."),
    embeddings: Optional[Path] = typer.Option(None, "--embeddings", help="Precomputed whole-image embeddings (.npy with .ids.txt, .npz, or a table with sample ids): skips the model; only the whole variant is scored."),
    variants: Optional[str] = typer.Option(None, "--variants", help="Comma-separated: whole (the image), scene (the person masked), subject (the scene masked). Default: all three; whole alone with --embeddings, which cannot give the others (asking for them with --embeddings is an error)."),
    masks_dir: Optional[Path] = typer.Option(None, "--masks-dir", help="Folder of person masks (<sample_id>.png or <image stem>.png; non-black = person). Images without one use --box-cols or mediapipe selfie segmentation."),
    box_cols: Optional[str] = typer.Option(None, "--box-cols", help="Four columns x0,y0,x1,y1 of a person box in pixels, used where no mask file exists."),
    embedder: str = typer.Option("efficientnet", "--embedder", help="efficientnet (EfficientNet-Lite0 ImageNet features, 1280-d; default) or dlib-face (dlib's 128-d face descriptor of the largest face)."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Column identifying the person (bootstrap and subsampling unit); every row its own subject when absent."),
    image_col: Optional[str] = typer.Option(None, "--image-col", help="Column of the image paths (default: image_path or a common alias)."),
    output: Path = typer.Option(Path("fairvision-diversity-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    n_draws: int = typer.Option(100, "--n-draws", min=1, help="Random subsets per group for the score at a common size."),
    rarefy_size: Optional[int] = typer.Option(None, "--rarefy-size", min=2, help="Subjects per subset for the score at a common size (default: the smallest group's, at most 256)."),
    n_null: int = typer.Option(1000, "--n-null", min=1, help="Random sets of subjects from the whole dataset that a group's score at the common size is compared with."),
    batch_size: int = typer.Option(32, "--batch-size", min=1, help="Images per forward pass of the embedder."),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads of the embedder (default: the available CPUs, at most 8)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr (on a terminal)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_low>0', 'min_rarefied_ratio<0.8'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Visual diversity per group beyond head counts: Vendi scores of the whole images, the scenes (person
    masked) and the subjects (scene masked), with subject-bootstrap intervals and at a common number of subjects
    (FHIBE Table 4; docs/METHODS.md §13.2). Embeddings are made offline by EfficientNet-Lite0 or dlib's face
    descriptor and kept in the results store. Groups with fewer than --min-subjects subjects get no score at the
    common size and no interval (flagged too_small); --correction and --alpha are those of the low-diversity test."""
    check_outdir(output)
    if variants is None:  # the default: every variant the input can give
        chosen = ["whole"] if embeddings is not None else list(_VARIANTS)
    else:
        chosen = [v.strip() for v in variants.split(",") if v.strip()]
    bad = [v for v in chosen if v not in _VARIANTS]
    if bad or not chosen:
        raise FairvisionError(f"--variants: unknown variant {bad[0] if bad else variants!r}; use {', '.join(_VARIANTS)}")
    if embedder not in _EMBEDDERS:
        raise FairvisionError(f"--embedder must be one of {', '.join(_EMBEDDERS)}, not {embedder!r}")
    cols = None
    if box_cols is not None:
        cols = tuple(c.strip() for c in box_cols.split(","))
        if len(cols) != 4 or not all(cols):
            raise FairvisionError(f"--box-cols needs four column names x0,y0,x1,y1, not {box_cols!r}")
    if masks_dir is not None and not masks_dir.is_dir():
        raise FairvisionError(f"{masks_dir}: no such masks folder")
    if embeddings is not None and set(chosen) != {"whole"}:
        raise FairvisionError(f"--variants {variants}: --embeddings are of the whole images, so only the whole "
                              "variant can be scored (leave out --embeddings to embed the scene and subject variants)")
    conditions = [parse_condition(c) for c in fail_if]
    # lazy: numpy, pandas and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.curation.diversity import Rarefaction, audit_diversity
    from fairvision.audits.curation.diversity_embedding import EmbeddingOptions
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.curation_diversity import diversity_section

    data = read_table(samples, image_col=image_col)
    if embeddings is None and "image_path" not in data.columns:
        raise FairvisionError(f"{samples}: no image path column (image_path, path, filename, file_name); pass "
                              "--image-col, or give --embeddings")
    results = results_store(store, no_store) if embeddings is None else None
    with progress_bar(f"embedding images ({embedder})", progress) as advance:
        result = audit_diversity(data, attr, embeddings=embeddings, variants=tuple(dict.fromkeys(chosen)),
                                 embedding=EmbeddingOptions(embedder=embedder, masks_dir=masks_dir, box_cols=cols,
                                                            batch_size=batch_size, threads=threads),
                                 store=results, subject_col=subject_col,
                                 rarefaction=Rarefaction(n_draws=n_draws, size=rarefy_size, n_null=n_null),
                                 progress=advance, settings=settings)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=title or f"Diversity: {samples.name}", subtitle="fairvision curate diversity",
                    meta={"samples": str(samples), "embeddings": str(embeddings) if embeddings else result.embedder,
                          "variants": ", ".join(result.variants),
                          "masks": None if set(result.variants) == {"whole"} else str(masks_dir) if masks_dir else
                          (f"boxes {box_cols}" if box_cols else "mediapipe selfie segmentation"),
                          "n_draws": n_draws, "n_null": n_null, "settings": settings.to_meta(),
                          "store": str(results.root) if results is not None else "off", **gate_meta(evaluated)})
    report.add(diversity_section(result, conditions=evaluated))
    buf = io.BytesIO()
    result.status.to_parquet(buf, index=False)
    paths = report.write(output, extra_files={"status.parquet": buf.getvalue()})
    n_low = int(result.scores["low_diversity"].sum())
    done(paths, f"{len(data)} images, variants {', '.join(result.variants)}; {n_low} low-diversity groups")
    exit_if_gates_failed(evaluated)


def register(curate_app: typer.Typer) -> None:
    curate_app.command("diversity")(diversity_cmd)
