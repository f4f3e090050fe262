"""``fairvision audit vlm retrieval``: skew and exposure of the images that neutral text queries retrieve
(docs/METHODS.md §12.5).

numpy, pandas, torch and the report stack are imported inside the command: ``fairvision --help`` must stay fast.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done, exit_if_gates_failed
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

MISSING_RULES = ("error", "drop", "keep")


@with_settings("correction", "alpha", "n_boot", "level", "seed")
def retrieval_cmd(
    samples: Path = typer.Option(..., "--samples", help="Sample table: sample_id and the attribute columns (the face set)."),
    image_embeddings: Path = typer.Option(..., "--image-embeddings", help="Image embeddings of the face set: .npy (+ .ids.txt), .npz (embeddings, ids), or a table with an id column."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Group attribute column (repeat: -a gender -a age)."),
    text_embeddings: Optional[Path] = typer.Option(None, "--text-embeddings", help="Query embeddings from the same model: a table with label and/or prompt (the query) and the embedding, or an .npz with embeddings and labels. Default: embed the queries with --backend/--model."),
    query: List[str] = typer.Option([], "--query", "-q", help="A neutral text query to embed (repeat; default: the bundled twelve, e.g. 'a photo of a doctor')."),
    backend: Optional[str] = typer.Option(None, "--backend", help="Embed the queries with: transformers (a local CLIP folder, --model), open_clip (--arch and --model) or tiny-random (offline demo model). Use the model that embedded the images."),
    model: Optional[Path] = typer.Option(None, "--model", help="Local weights for --backend (nothing is downloaded)."),
    arch: Optional[str] = typer.Option(None, "--arch", help="open_clip architecture name, e.g. ViT-B-32."),
    k: int = typer.Option(10, "-k", "--k", min=1, help="Images per query that count (top k)."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection size (2 = also every pair of attributes, e.g. gender × age, each with its own NDKL, skews and tests)."),
    desired: str = typer.Option("data", "--desired", help="Compare the top k with: data (the face set's shares, demographic parity; default) or uniform (equal shares)."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave the samples out, reported by group), 'keep' (group '(missing)')."),
    output: Path = typer.Option(Path("fairvision-vlm-retrieval"), "--output", "-o", help="Output folder for report.html, report.json, top.parquet and tables/."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_flagged>0', 'max_ndkl>0.1', 'max_skew.gender>0.3'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Rank the face set's images by cosine similarity to neutral text queries and measure who the top k are: NDKL,
    MaxSkew@k and MinSkew@k per query, and per group the top-k share, Skew@k and position-discounted exposure with
    query-bootstrap CIs and corrected tests (docs/METHODS.md §12.5). The images' and the queries' embeddings must
    come from one model; --seed also draws the weights of --backend tiny-random (use the seed that embedded the
    images)."""
    check_outdir(output)
    if missing not in MISSING_RULES:
        raise FairvisionError(f"--missing must be error, drop or keep, not {missing!r}")
    if desired not in ("data", "uniform"):
        raise FairvisionError(f"--desired must be data or uniform, not {desired!r}")
    conditions = [parse_condition(c) for c in fail_if]
    if text_embeddings is not None and (backend or model or arch or query):
        raise FairvisionError("give either --text-embeddings or the queries to embed (--backend/--model/--query), "
                              "not both")
    if text_embeddings is None and backend is None and model is None and arch is None:
        raise FairvisionError("give --text-embeddings FILE, or --backend/--model to embed the queries with the model "
                              "that embedded the images (--backend tiny-random: offline demo model)")
    if samples.is_dir():
        raise FairvisionError(f"{samples}: is a folder; give a sample table with the attribute columns")
    # lazy: numpy, pandas and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.vlm.samples import SampleOptions
    from fairvision.audits.vlm.text_retrieval import NEUTRAL_QUERIES, audit_text_retrieval
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.vlm_retrieval import text_retrieval_sections
    from fairvision.vision.clip_embeddings import read_provenance

    made_by = read_provenance(image_embeddings) or {}
    notes = [made_by["note"]] if made_by.get("note") else []
    queries_src = text_embeddings
    if text_embeddings is None:
        queries_src, note = _embed_queries(list(dict.fromkeys(query)) or list(NEUTRAL_QUERIES), backend, model, arch,
                                           settings.seed, made_by)
        notes += [note] if note and note not in notes else []
    for note in notes:
        typer.echo(f"warning: {note}", err=True)
    data = read_table(samples)
    result = audit_text_retrieval(data, image_embeddings, queries_src, attr,
                                  samples=SampleOptions(subject_col=None, missing=missing), k=k, desired=desired,
                                  max_k=max_k, settings=settings)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=title or f"Text-to-image retrieval: {samples.name}",
                    subtitle="fairvision audit vlm retrieval",
                    meta={"samples": str(samples), "image embeddings": str(image_embeddings),
                          "queries": str(text_embeddings) if text_embeddings else f"{len(result.queries)} embedded",
                          "k": k, "max k": max_k, "desired": desired, "missing": missing, "settings": settings.to_meta(),
                          **({"model": made_by["model"]} if made_by.get("model") else {}),
                          **({"model note": " ".join(notes)} if notes else {}), **gate_meta(evaluated)})
    for i, section in enumerate(text_retrieval_sections(result, conditions=evaluated)):
        for note in notes if i == 0 else []:
            section.note(note, level="warning")
        report.add(section)
    buf = io.BytesIO()
    result.top.to_parquet(buf, index=False)
    paths = report.write(output, extra_files={"top.parquet": buf.getvalue()})
    lines = [f"top-{k} images of {len(result.queries)} queries: {(output / 'top.parquet').resolve()}"]
    for a, rk in result.rankings.items():
        s = rk.summary
        lines.append(f"{a}: NDKL {s.loc['ndkl', 'estimate']:.3g} (random ranking {s.loc['ndkl', 'random']:.3g}), "
                     f"MaxSkew@{k} {s.loc['max_skew', 'estimate']:.3g}, MinSkew@{k} {s.loc['min_skew', 'estimate']:.3g}"
                     f"; {int(rk.groups['flagged'].sum())} groups flagged")
    if result.coverage is not None and result.coverage.n_left_out:
        lines.append(result.coverage.summary_line())
    done(paths, "\n".join(lines))
    exit_if_gates_failed(evaluated)


def _embed_queries(queries: list[str], backend, model, arch, seed: int, made_by: dict):
    """The queries' embeddings as a table ``label``, ``prompt``, ``embedding`` (each query its own label), and a
    note when the model differs from the one that embedded the images (docs/METHODS.md §12.4)."""
    import pandas as pd  # lazy: see the module docstring

    from fairvision.vision.clip import load_adapter

    backend = backend or ("open_clip" if arch is not None else "transformers")
    adapter = load_adapter(backend, model=model, arch=arch, seed=seed)
    vectors = adapter.encode_texts(queries)
    table = pd.DataFrame({"label": queries, "prompt": queries, "embedding": list(vectors)})
    signature = made_by.get("signature")
    note = adapter.note
    if signature and signature != adapter.describe().get("signature"):
        note = (f"the queries were embedded with {adapter.name}, the images with {made_by.get('model', 'another model')}"
                ": the similarities compare two different spaces")
    return table, note


def register(vlm_app: typer.Typer) -> None:
    vlm_app.command("retrieval")(retrieval_cmd)
