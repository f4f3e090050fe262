"""``fairvision audit vlm zero-shot``: zero-shot vision-language probe from precomputed embeddings (docs/METHODS.md §12.1)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli import vlm_embed, vlm_retrieval, vlm_vqa
from fairvision.cli.common import check_outdir, check_output_file, done, exit_if_gates_failed
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError, ParameterError


@with_settings("correction", "alpha", "n_boot", "seed", "min_subjects")
def audit_vlm_cmd(
    samples: Path = typer.Option(..., "--samples", help="Sample table: sample_id, subject_id (optional), the attribute columns."),
    image_embeddings: Path = typer.Option(..., "--image-embeddings", help="Image embeddings: .npy (+ .ids.txt), .npz (embeddings, ids), or a table with an id column."),
    text_embeddings: Optional[Path] = typer.Option(None, "--text-embeddings", help="Prompt embeddings from the same model: a table with label, prompt and the embedding, or an .npz with embeddings and labels."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Group attribute column (repeat: -a gender -a ancestry)."),
    true_col: Optional[str] = typer.Option(None, "--true-col", help="Column of the true label: adds error rates per group."),
    true_map: Optional[str] = typer.Option(None, "--true-map", help="Rename values of --true-col to labels of the probe, e.g. 'Male=man,Female=woman' (FairFace gender vs the gender probe)."),
    prompts: Optional[Path] = typer.Option(None, "--prompts", help="TOML file of prompt sets (default: the bundled ones)."),
    probe: Optional[str] = typer.Option(None, "--probe", help="Prompt set the text embeddings belong to (default: the one sharing most labels)."),
    combine: str = typer.Option("mean", "--combine", help="mean: the label whose mean prompt embedding is closest (default); max: the label of the single closest prompt (FHIBE's rule)."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Column identifying the person (bootstrap unit); every row its own subject when absent."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave the rows out), 'keep' (group '(missing)')."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection size (2 = also every pair of attributes, tested and corrected with them)."),
    output: Path = typer.Option(Path("fairvision-vlm-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_flagged>0', 'max_unspecified_gap>0.1'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Zero-shot probe of a CLIP-style model from precomputed image and prompt embeddings: the label each image
    is closest to, label and error rates per group with subject-bootstrap CIs, corrected group-vs-rest tests, a
    chi-square test of label x group and NPMI (docs/METHODS.md §12.1). No model weights ship with fairvision:
    embed the prompts with the text encoder of the model that embedded the images."""
    check_outdir(output)
    if missing not in ("error", "drop", "keep"):
        raise FairvisionError(f"--missing must be error, drop or keep, not {missing!r}")
    conditions = [parse_condition(c) for c in fail_if]
    mapping = parse_true_map(true_map) if true_map is not None else None
    if mapping is not None and true_col is None:
        raise FairvisionError("--true-map needs --true-col (the column whose values it renames)")
    check_sample_table(samples)
    # lazy: numpy, pandas and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.vlm.prompts import default_prompts_path, load_prompt_sets, read_text_embeddings
    from fairvision.audits.vlm.samples import SampleOptions
    from fairvision.audits.vlm.zero_shot import audit_vlm
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.vlm import vlm_section
    from fairvision.stats.versus_rest import count_flagged
    from fairvision.vision.clip_embeddings import read_provenance

    if text_embeddings is None:
        read_text_embeddings(None)  # raises the one-line error saying how to make them
    sets = load_prompt_sets(prompts)
    data = read_table(samples)
    if mapping is not None:
        data = apply_true_map(data, true_col, mapping, sets, probe, source=str(samples))
    try:
        result = audit_vlm(data, image_embeddings, text_embeddings, attr,
                           samples=SampleOptions(subject_col=subject_col, missing=missing), true_col=true_col,
                           prompt_sets=sets, probe=probe, combine=combine, max_k=max_k, settings=settings)
    except ParameterError as exc:
        if probe is None and exc.parameter == "probe":  # several probes in one file: name the per-probe files
            raise ParameterError("probe", f"{str(exc).removeprefix('probe ')}{per_probe_hint(text_embeddings)}") from None
        raise
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    made_by = read_provenance(image_embeddings) or read_provenance(text_embeddings) or {}  # from `audit vlm embed`
    if made_by.get("note"):
        typer.echo(f"warning: {made_by['note']}", err=True)
    report = Report(title=title or f"Zero-shot probe: {samples.name}", subtitle="fairvision audit vlm zero-shot",
                    meta={"samples": str(samples), "image embeddings": str(image_embeddings),
                          "text embeddings": str(text_embeddings), "prompts": str(prompts or default_prompts_path()),
                          "probe": result.probe or "(labels of the text embeddings)", "combine": combine,
                          "max_k": max_k, "missing": missing, "settings": settings.to_meta(),
                          **({"model": made_by["model"]} if made_by.get("model") else {}),
                          **({"model note": made_by["note"]} if made_by.get("note") else {}),
                          **gate_meta(evaluated)})
    section = vlm_section(result, conditions=evaluated)
    if made_by.get("note"):
        section.note(made_by["note"], level="warning")
    report.add(section)
    # the model's provenance travels with the predictions, so `audit vlm compare` can carry its note
    predictions = predictions_bytes(result.predictions, {**made_by, "probe": result.probe, "combine": combine,
                                                         "image_embeddings": str(image_embeddings),
                                                         "text_embeddings": str(text_embeddings)})
    paths = report.write(output, extra_files={"predictions.parquet": predictions})
    done(paths, f"predictions: {(output / 'predictions.parquet').resolve()}\n{len(result.labels)} labels; "
                f"{count_flagged(result.rates)} group differences flagged")
    exit_if_gates_failed(evaluated)


def variants_cmd(
    samples: Path = typer.Option(..., "--samples", help="Sample table with sample_id and the image path column, or a folder of images (sample_id = file name without suffix)."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder for <sample_id>__<variant>.png, variants.csv and one variants.<variant>.csv per variant."),
    masks: Optional[Path] = typer.Option(None, "--masks", help="Folder of person masks (<sample_id>.png or <image stem>.png; non-black = person). Images without one use --box-cols or mediapipe selfie segmentation."),
    box_cols: Optional[str] = typer.Option(None, "--box-cols", help="Four columns x0,y0,x1,y1 of a person box in pixels, used where no mask file exists."),
    sigma: Optional[float] = typer.Option(None, "--sigma", help="Gaussian blur sigma in pixels for person_blur (default 5% of the longer side)."),
    image_col: Optional[str] = typer.Option(None, "--image-col", help="Column of the image paths (default: image_path or a common alias)."),
):
    """Write FHIBE's four image variants of every image (original, person_black, person_blur, background_black)
    as PNGs with a table variants.csv (one row per image and variant) and one sample table per variant,
    variants.<variant>.csv, to embed with `audit vlm embed variants.<variant>.csv` (or `--variant NAME`), probe
    with `audit vlm zero-shot` and compare with `audit vlm compare` (docs/METHODS.md §12.2)."""
    check_outdir(output)
    cols = None
    if box_cols is not None:
        cols = tuple(c.strip() for c in box_cols.split(","))
        if len(cols) != 4 or not all(cols):
            raise FairvisionError(f"--box-cols needs four column names x0,y0,x1,y1, not {box_cols!r}")
    if sigma is not None and not sigma > 0:
        raise FairvisionError(f"--sigma must be positive, not {sigma}")
    # lazy: numpy, pandas and OpenCV cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.vlm.variants import write_variants
    from fairvision.datasets.demo import from_folder
    from fairvision.io.tables import read_table

    if not samples.exists():
        raise FairvisionError(f"{samples}: no such file or folder")
    data = from_folder(samples) if samples.is_dir() else read_table(samples, image_col=image_col)
    if "image_path" not in data.columns:
        raise FairvisionError(f"{samples}: no image path column (image_path, path, filename, file_name); pass --image-col")
    table = write_variants(data, output, masks_dir=masks, box_cols=cols, sigma=sigma)
    n_img = table["sample_id"].nunique()
    how = table.drop_duplicates("sample_id")["mask_source"].value_counts().to_dict()
    typer.echo(f"variants: {(output / 'variants.csv').resolve()}")
    for v in table["variant"].drop_duplicates():
        typer.echo(f"  {v}: {(output / f'variants.{v}.csv').resolve()}")
    typer.echo(f"{len(table)} images ({n_img} x {table['variant'].nunique()} variants); person masks: "
               + ", ".join(f"{k} {v}" for k, v in how.items()))


#: output suffixes that make `audit vlm compare` write only the table of changes (the documented first form)
TABLE_SUFFIXES = (".csv", ".parquet")


@with_settings("correction", "alpha", "n_boot", "seed", "min_subjects")
def compare_cmd(
    samples: Path = typer.Option(..., "--samples", help="Sample table of the original images: sample_id, subject_id (optional), the attribute columns."),
    first: Path = typer.Option(..., "--first", help="predictions.parquet of `audit vlm zero-shot` on the first variant (sample_id, predicted)."),
    second: Path = typer.Option(..., "--second", help="predictions.parquet of `audit vlm zero-shot` on the second variant."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Group attribute column (repeat)."),
    output: Path = typer.Option(Path("fairvision-vlm-compare"), "--output", "-o", help="Output folder for report.html, report.json and tables/; a .csv or .parquet file name writes only the table of changes."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Column identifying the person (bootstrap unit)."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave the rows out), 'keep' (group '(missing)')."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection size (2 = also every pair of attributes)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing when a condition holds, e.g. 'n_flagged>0', 'max_change>0.1'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Change of each zero-shot label's rate per group between two image variants: the paired test (McNemar's
    exact test on the images and its clustered version on the subjects), a subject-bootstrap CI of the change,
    corrected across groups; writes a report with a forest plot of the changes (docs/METHODS.md §12.2)."""
    table_only = output.suffix.lower() in TABLE_SUFFIXES
    if table_only:
        check_output_file(output, TABLE_SUFFIXES)
    else:
        check_outdir(output)
    if missing not in ("error", "drop", "keep"):
        raise FairvisionError(f"--missing must be error, drop or keep, not {missing!r}")
    conditions = [parse_condition(c) for c in fail_if]
    check_sample_table(samples)
    # lazy: numpy, pandas, OpenCV and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.vlm.samples import SampleOptions
    from fairvision.audits.vlm.variants import compare_variants
    from fairvision.io.tables import read_raw_table, read_table, write_table
    from fairvision.report import Report
    from fairvision.report.sections.vlm import compare_section
    from fairvision.vision.clip_embeddings import read_provenance

    data = read_table(samples)
    preds = [read_raw_table(p) for p in (first, second)]
    res = compare_variants(data, preds[0], preds[1], attr, names=_variant_names(first, second),
                           samples=SampleOptions(subject_col=subject_col, missing=missing), max_k=max_k,
                           settings=settings)
    evaluated = evaluate_conditions(conditions, res.quantities()) if conditions else []
    n_flagged = int(res.changes["flagged"].sum()) if len(res.changes) else 0
    made_by = [read_provenance(p) or {} for p in (first, second)]  # written by `audit vlm zero-shot`
    models = list(dict.fromkeys(m["model"] for m in made_by if m.get("model")))
    notes = list(dict.fromkeys(m["note"] for m in made_by if m.get("note")))
    for note in notes:
        typer.echo(f"warning: {note}", err=True)
    if table_only:
        write_table(res.changes, output)
        typer.echo(f"changes: {output.resolve()}")
    else:
        report = Report(title=title or f"Variant comparison: {first.parent.name or first.name} vs "
                                       f"{second.parent.name or second.name}",
                        subtitle="fairvision audit vlm compare",
                        meta={"samples": str(samples), "first": str(first), "second": str(second), "max_k": max_k,
                              "missing": missing, "settings": settings.to_meta(),
                              **({"model": "; ".join(models)} if models else {}),
                              **({"model note": " ".join(notes)} if notes else {}),
                              **gate_meta(evaluated)})
        section = compare_section(res, conditions=evaluated)
        for note in notes:
            section.note(note, level="warning")
        if len(models) > 1:
            section.note(f"The two prediction files come from different models ({', '.join(models)}): a change "
                         "then mixes the variant's effect with the model's.", level="warning")
        report.add(section)
        paths = report.write(output)
        done(paths, f"changes: {(output / 'tables').resolve()}")
    typer.echo(f"{len(res.labels)} labels; {n_flagged} group changes flagged")
    exit_if_gates_failed(evaluated)


vlm_app = typer.Typer(
    help="Probe a vision-language model: embed images and prompts, zero-shot labels by group, image variants and "
         "the change between them, visual question answering, text-to-image retrieval skew.",
    no_args_is_help=True,
)


def check_sample_table(samples: Path) -> None:
    """A folder where a sample table with attribute columns is needed: a one-line hint."""
    if samples.is_dir():
        raise FairvisionError(f"{samples}: is a folder; give a sample table with the attribute columns (a folder "
                              "has none), e.g. a CSV with sample_id and one column per attribute")


def parse_true_map(text: str) -> dict[str, str]:
    """``'Male=man,Female=woman'`` -> ``{"Male": "man", "Female": "woman"}``; a one-line error on a malformed pair."""
    mapping: dict[str, str] = {}
    for pair in text.split(","):
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise FairvisionError(f"--true-map: {pair.strip()!r} is not VALUE=LABEL (e.g. 'Male=man,Female=woman')")
        if key in mapping and mapping[key] != value:
            raise FairvisionError(f"--true-map: {key!r} is mapped twice ({mapping[key]!r} and {value!r})")
        mapping[key] = value
    return mapping


def apply_true_map(data, true_col: str, mapping: dict[str, str], sets: dict, probe: Optional[str], *, source: str):
    """``data`` with the values of ``true_col`` renamed by ``mapping`` (values not named stay as they are); a target
    that is no label of the probe (of ``probe``, or of any prompt set when it is not given) is a one-line error."""
    if true_col not in data.columns:
        raise FairvisionError(f"{source}: no true-label column {true_col!r}; columns are "
                              f"{', '.join(map(str, data.columns))}")
    labels = list(sets[probe]) if probe in sets else list(dict.fromkeys(l for s in sets.values() for l in s))
    bad = [v for v in mapping.values() if v not in labels]
    if bad:
        where = f"probe {probe!r}" if probe in sets else "the prompt sets"
        raise FairvisionError(f"--true-map: {bad[0]!r} is not a label of {where} ({', '.join(labels)})")
    col = data[true_col]
    seen = set(col.dropna().astype(str))
    unused = [k for k in mapping if k not in seen]
    if unused and len(unused) == len(mapping):
        raise FairvisionError(f"--true-map: none of {', '.join(map(repr, mapping))} occurs in column {true_col!r} "
                              f"of {source} (values: {', '.join(sorted(seen)[:8])})")
    data = data.copy()
    data[true_col] = col.where(col.isna(), col.astype(str).replace(mapping))
    return data


def per_probe_hint(text_embeddings: Optional[Path]) -> str:
    """``; or pass one of <files>`` naming the per-probe files `audit vlm embed` wrote next to a combined file."""
    if text_embeddings is None:
        return ""
    path = Path(text_embeddings)
    files = sorted(path.parent.glob(f"{path.stem}.*{path.suffix}")) if path.suffix else []
    files = [f for f in files if f != path]
    return f"; or pass one of the per-probe files: {', '.join(str(f) for f in files)}" if files else ""


def predictions_bytes(predictions, provenance: dict) -> bytes:
    """The zero-shot predictions as Parquet, with ``provenance`` (model, note, probe, ...) under the ``fairvision``
    key of the file's metadata, which :func:`fairvision.vision.clip_embeddings.read_provenance` reads back."""
    import pyarrow as pa  # lazy: see the command
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(predictions, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}),
                                           b"fairvision": json.dumps(provenance, default=str).encode()})
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def _variant_names(first: Path, second: Path) -> tuple[str, str]:
    """Short names of two prediction files for the report: the folder of a ``predictions.parquet`` (as
    ``zero-shot`` writes it), else the file's stem; the full paths when those are the same."""
    def short(p: Path) -> str:
        return p.parent.name if p.stem == "predictions" and p.parent.name else p.stem

    a, b = short(first), short(second)
    return (a, b) if a != b else (str(first), str(second))


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    vlm_app.command("zero-shot")(audit_vlm_cmd)
    vlm_app.command("variants")(variants_cmd)
    vlm_app.command("compare")(compare_cmd)
    vlm_embed.register(vlm_app)  # embed: model adapters
    vlm_vqa.register(vlm_app)  # vqa: question answering
    vlm_retrieval.register(vlm_app)  # retrieval: text-to-image skew and exposure
    audit_app.add_typer(vlm_app, name="vlm")
