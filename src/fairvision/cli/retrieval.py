"""``fairvision audit retrieval`` and ``fairvision retrieval knn``: distribution parity of search results.

The audit reads ranked results (or produces them with the visual-search
harness: images -> built-in face descriptor -> k-NN, or embeddings -> k-NN),
tests them for distribution parity (Khaziev et al.; docs/METHODS.md §8),
runs the power analysis and writes a report.

The numerical work (pandas, scipy, matplotlib) is imported when a command
runs, not at module level: every ``fairvision`` invocation imports this
module, and those imports cost about 2.5 s of start-up (``python -X importtime``).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, List, Optional

import typer

from fairvision.audits.gates import describe, evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (
    NO_STORE_OPTION, STORE_OPTION, StageLines, check_outdir, done, exit_if_gates_failed, image_table, progress_bars,
    results_store,
)
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

retrieval_app = typer.Typer(
    help="Visual-search harness for retrieval audits: k-nearest-neighbour results from embeddings or photos.",
    no_args_is_help=True,
)

_RESULT_SUFFIXES = (".parquet", ".csv", ".tsv", ".json", ".jsonl")


class _Stages:
    """The stages of a command (:func:`progress_bars`): ``stages(description, total)`` returns ``advance(done,
    total=None)``, which moves the stage's progress bar on a terminal and, off a terminal (a log, CI), writes one
    line when the stage reaches its total ("embedding faces: 540 of 540 in 412.0 s"); ``stages.note(line)`` adds
    what a finished stage left out, off a terminal only (on a terminal the command's last lines say it)."""

    def __init__(self, bars):
        self._bars = bars

    def __call__(self, description: str, total: int | None = None):
        bars = self._bars
        if bars is None:
            return lambda done, tot=None: None
        if total is not None:
            bars(description, 0, total)
        return lambda done, tot=None: bars(description, done, tot if tot is not None else total)

    def note(self, line: str) -> None:
        if isinstance(self._bars, StageLines):
            typer.echo(line, err=True)


@contextlib.contextmanager
def _progress(enabled: bool) -> Iterator[_Stages]:
    """:class:`_Stages` of :func:`progress_bars`: bars on a terminal, lines elsewhere, nothing with ``--no-progress``."""
    with progress_bars(enabled) as bars:
        yield _Stages(bars)


def _without_embedding(status) -> tuple[int, str]:
    """How many images of an embedding status table have no embedding, and why (``"no face: 108, unreadable: 2"``)."""
    from fairvision.audits.retrieval import reason_kind  # lazy: pandas (see the module docstring)

    failed = status.loc[~status["ok"].astype(bool), "reason"].map(reason_kind).fillna("no embedding")
    return len(failed), ", ".join(f"{r}: {int(n):,}" for r, n in failed.value_counts().items())


@dataclass(frozen=True)
class _Harness:
    """The visual-search harness of a command: where the vectors come from (photos embedded with the face
    descriptor, or an embeddings file) and how the nearest neighbours are found."""

    embed_images: Optional[str]
    embeddings: Optional[Path]
    limit: Optional[int]
    k: int
    metric: str
    p: float
    group_col: Optional[str]

    def run(self, items_df, task, *, settings: AuditSettings | None = None, store=None):
        """Run the harness; returns (results, items, embedding status or None, the ids of the embedded items)."""
        # lazy: numpy and pandas (see the module docstring)
        import numpy as np

        from fairvision.stats.knn import knn_search

        if self.embed_images is not None:
            x, ids, items_df, status = self._embed(items_df, task, settings, store)
        else:
            from fairvision.io.embeddings import read_embeddings

            (x, ids), status = read_embeddings(self.embeddings, allow_zero=self.metric != "cosine"), None
        groups = self._groups(items_df, ids) if self.group_col else None
        results = knn_search(np.asarray(x), ids, self.k, metric=self.metric, p=self.p, groups=groups,
                             progress=task("nearest neighbours", len(ids)))
        return results, items_df, status, [str(i) for i in ids]

    def _embed(self, items_df, task, settings, store):
        """Face descriptors of the photos: ``(vectors, ids, items, status)``."""
        from fairvision.io.retrieval import read_items
        from fairvision.vision.face_descriptor_batch import embed_face_images  # lazy: the engine, only for --embed-images

        table = image_table(str(self.embed_images), hint="or use 'demo' for the bundled FairFace photos")
        if self.limit:
            table = table.iloc[: int(self.limit)].reset_index(drop=True)
        items_from_images = read_items(table, name=str(self.embed_images))
        if items_df is None:
            items_df = items_from_images
        n = len(items_from_images)
        advance = task("embedding faces", n)
        fe = embed_face_images(items_from_images["image_path"].tolist(), items_from_images["item_id"].tolist(),
                               settings=settings, store=store, progress=advance)
        advance(n, n)  # images read from the results store are not counted by the embedder
        n_failed, why = _without_embedding(fe.status)
        if n_failed:
            task.note(f"embedding faces: {n_failed:,} of {n:,} images without an embedding ({why})")
        if len(fe.ids) < self.k + 1:
            raise FairvisionError(f"{self.embed_images}: only {len(fe.ids)} images with a detectable face; need more "
                                  f"than k = {self.k}")
        return fe.embeddings, fe.ids, items_df, fe.status

    def _groups(self, items_df, ids) -> list:
        """The --group-col value of every embedded item."""
        if self.group_col not in items_df.columns:
            raise FairvisionError(f"items: no column {self.group_col!r} for --group-col; columns are "
                                  f"{', '.join(map(str, items_df.columns))}")
        gmap = dict(zip(items_df["item_id"].astype(str), items_df[self.group_col]))
        missing = [i for i in ids if i not in gmap]
        if missing:
            raise FairvisionError(f"items: embedding id {missing[0]!r} has no row (needed for --group-col)")
        return [gmap[i] for i in ids]


@with_settings("alpha", "correction", "seed", "n_boot", "level", "workers", "engine", "address", alpha=0.01)
def audit_retrieval_cmd(
    outdir: Path = typer.Option(Path("fairvision-retrieval-report"), "--output", "-o", "--out", help="Output folder for report.html, report.json and tables/ (written atomically)."),
    attr: Optional[str] = typer.Option(None, "--attr", "-a", help="Protected attribute column of the item table (default with --measure-skin: st_class)."),
    results: Optional[Path] = typer.Option(None, "--results", "-r", help="Ranked results: a table (query_id, rank, item_id), a JSON mapping query -> ranked item list, or a TREC run file."),
    items: Optional[Path] = typer.Option(None, "--items", "-i", help="Item table (CSV, TSV, Parquet, JSON) with an id column (item_id, sample_id, id) and the attribute. Queries are looked up here too."),
    catalog: Optional[Path] = typer.Option(None, "--catalog", help="Catalog table (default: the item table)."),
    k: int = typer.Option(6, "-k", "--k", min=1, help="Top-K results per query that are tested (paper: 6)."),
    continuity: bool = typer.Option(False, "--continuity/--no-continuity", help="Yates' continuity correction of the 2 x 2 contrast tests (default off: Pearson chi-square, as in the paper)."),
    power_trials: int = typer.Option(1000, "--power-trials", min=0, help="Monte Carlo trials of the power analysis (0 skips it)."),
    min_queries: int = typer.Option(10, "--min-queries", min=1, help="Values with fewer queries are flagged as too small to judge."),
    measure_skin: bool = typer.Option(False, "--measure-skin", help="Measure apparent skin colour of the items' images (median ITA -> ST1..ST6) and use it as the attribute."),
    embed_images: Optional[str] = typer.Option(None, "--embed-images", help="Run the visual-search harness on photos: 'demo' (bundled FairFace), 'portraits', a folder or a sample table. Embeds faces with dlib's descriptor, then k-NN."),
    embeddings: Optional[Path] = typer.Option(None, "--embeddings", help="Run k-NN on these embeddings (.npy, .npz, Parquet/CSV with an id column) instead of reading --results."),
    metric: str = typer.Option("minkowski", "--metric", help="k-NN distance: minkowski (with --p), euclidean, manhattan, chebyshev, cosine."),
    p: float = typer.Option(2.0, "--p", help="Minkowski order p (2 = Euclidean, the paper's choice)."),
    group_col: Optional[str] = typer.Option(None, "--group-col", help="Item column with a product/group id: k-NN never returns an item of the query's own group (near-duplicates)."),
    limit: Optional[int] = typer.Option(None, "--limit", min=2, help="Use only the first N images of --embed-images (quick runs)."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    title: str = typer.Option("Retrieval audit", "--title", help="Report title."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars on stderr (off a terminal: one line per finished stage)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'omnibus_p<0.01', 'min_nrr<0.8', 'n_unfair>0', 'ndkl>0.2', 'max_skew>0.5' (repeat for several)."),
    missing: Optional[str] = typer.Option(None, "--missing", help="Items with an empty attribute cell: 'error' (stop, naming the row; the default), 'drop' (leave them out; the default with --measure-skin, where images without a measurable face have no class, as in the paper), 'keep' (a value of its own)."),
    settings: AuditSettings = None,
):
    """Test whether the protected attribute of a query leaks into its top-K results (distribution parity).

    Writes the contingency table, the omnibus (top-K set and per rank) and per-value contrast tests with risk ratios, 95% CIs and the 80% rule, exposure and skew of the rankings (NDKL, MaxSkew@K, MinSkew@K, Skew@K and position-discounted attention per value, with query-bootstrap CIs), and a power analysis (power curves, detectable bias, and whether the catalog is large enough), as report.html / report.json / tables/*.parquet.

    Examples:
      fairvision audit retrieval --results run.csv --items items.csv \\
          --attr skin_tone -o out
      fairvision audit retrieval --embed-images demo --attr gender -o out
    """
    # lazy: pandas, scipy, matplotlib (see the module docstring)
    from fairvision.audits.retrieval import PowerOptions, audit_retrieval
    from fairvision.engine import check_engine
    from fairvision.io.validate import check_missing_rule
    from fairvision.stats.chisquare import SmallExpectedCountWarning
    from fairvision.stats.parity import ParityOptions

    check_outdir(outdir)
    check_engine(settings.engine, settings.address)
    missing = check_missing_rule(missing or ("drop" if measure_skin else "error"))
    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    sources = [s for s in (results, embed_images, embeddings) if s is not None]
    if len(sources) != 1:
        raise FairvisionError("give exactly one of --results, --embeddings or --embed-images")
    if attr is None and not measure_skin:
        raise FairvisionError("--attr is required (the protected attribute column), unless --measure-skin")
    harness = _Harness(embed_images, embeddings, limit, k, metric, p, group_col)
    store_ = results_store(store, no_store) if (measure_skin or embed_images is not None) else None
    with _progress(progress) as task:
        res, items_df, attr, status, extra, searched = _audit_inputs(results, items, attr, measure_skin, harness,
                                                                     task, settings, store_)
        cat_df = _read_catalog(catalog, attr)
        if cat_df is None and searched is not None and status is None:  # --embeddings: the catalog searched
            cat_df = items_df[items_df["item_id"].isin(searched)].reset_index(drop=True)
        # a stage counts as done when the next one starts: the bar (and the line off a terminal) ends with the work
        stages = ["parity tests"] + (["power curves", "detectable bias", "catalog size check"] if power_trials else [])
        label = "parity tests and power analysis" if power_trials else "parity tests"
        step = task(label, len(stages))
        with warnings.catch_warnings():  # small-count warnings become notes in the report
            warnings.simplefilter("ignore", SmallExpectedCountWarning)
            audit = audit_retrieval(
                res, items_df, attr, catalog=cat_df, k=k, missing=missing,
                parity=ParityOptions(continuity=continuity, min_queries=min_queries),
                power=PowerOptions(trials=power_trials), embedding_status=status,
                progress=lambda msg: step(stages.index(msg) if msg in stages else 0), settings=settings,
            )
        step(len(stages))
    gates = evaluate_conditions(conditions, audit.quantities()) if conditions else []
    paths = _write_report(audit, outdir, title, attr, k, gates, settings, extra)
    om = audit.parity.omnibus
    rk = audit.ranking
    ranking_line = ([f"NDKL {rk.summary.loc['ndkl', 'estimate']:.3g} (random ranking {rk.summary.loc['ndkl', 'random']:.3g}), "
                     f"MaxSkew@{rk.k} {rk.summary.loc['max_skew', 'estimate']:.3g}, MinSkew@{rk.k} "
                     f"{rk.summary.loc['min_skew', 'estimate']:.3g}; {int(rk.groups['flagged'].sum())} values with skewed "
                     "exposure"] if rk is not None else [])
    lines = ranking_line + [cov.summary_line() for cov in (audit.coverage, audit.result_coverage) if cov is not None and cov.n_left_out]
    done(paths, "\n".join([f"omnibus chi2({om.df}) = {om.statistic:.4g}, p = {om.pvalue:.3g} "
                           f"({'bias detected' if om.pvalue < settings.alpha else 'no bias detected'} at alpha "
                           f"{settings.alpha:g})", *lines]))
    exit_if_gates_failed(gates)


def _audit_inputs(results, items, attr, measure_skin: bool, harness: _Harness, task: _Stages, settings: AuditSettings,
                  store):
    """The ranked results and the item table of the audit, read or made by the harness, with the skin colour
    measured when asked: ``(results, items, attribute, embedding status, extra report files, ids searched by the
    harness or None)``."""
    from fairvision.audits.retrieval import SKIN_ATTRIBUTE, SKIN_REASON_COLUMN, measure_skin_attribute
    from fairvision.io.retrieval import read_items, read_results

    items_df = read_items(items) if items is not None else None
    if items_df is None and harness.embed_images is None:
        raise FairvisionError(f"{'--results' if results is not None else '--embeddings'} needs --items (the table with the protected attribute)")
    extra, status, searched = {}, None, None
    if results is not None:
        res = read_results(results)
    else:
        res, items_df, status, searched = harness.run(items_df, task, settings=settings, store=store)
        extra["results.csv"] = res.to_csv(index=False).encode()
    if measure_skin:
        n = len(items_df)
        advance = task("measuring skin colour", n)
        items_df = measure_skin_attribute(items_df, progress=advance, settings=settings, store=store)
        advance(n, n)  # images read from the results store may not be counted
        unmeasured = items_df[SKIN_REASON_COLUMN].dropna().str.removeprefix("skin colour not measured (").str.rstrip(")")
        if len(unmeasured):
            task.note(f"measuring skin colour: {len(unmeasured):,} of {n:,} images without a skin colour ("
                      + ", ".join(f"{r}: {int(c):,}" for r, c in unmeasured.value_counts().items()) + ")")
        attr = attr or SKIN_ATTRIBUTE
        extra["skin.csv"] = items_df[["item_id", "ita", SKIN_ATTRIBUTE, SKIN_REASON_COLUMN]].to_csv(index=False).encode()
    if attr not in items_df.columns:
        raise FairvisionError(f"{items_df.attrs.get('source', 'items')}: no column {attr!r}; columns are {', '.join(map(str, items_df.columns))}")
    return res, items_df, attr, status, extra, searched


def _read_catalog(catalog: Optional[Path], attr: str):
    from fairvision.io.retrieval import read_items

    return read_items(catalog, attr, name="catalog") if catalog is not None else None


def _write_report(audit, outdir: Path, title: str, attr: str, k: int, gates: list, settings: AuditSettings, extra: dict):
    """Write report.html, report.json and the tables (and the extra files) of a retrieval audit."""
    from fairvision.report import Report
    from fairvision.report.sections.retrieval import left_out_sections, ranking_section, retrieval_section

    report = Report(title=title, subtitle=f"attribute {attr!r}, top-{k}",
                    meta={"command": "audit retrieval", **audit.meta, "attribute": attr, "settings": settings.to_meta(),
                          **(gate_meta(gates) if gates else {})})
    section = retrieval_section(audit)
    for g in gates:
        section.note(f"--fail-if {describe(g)}", "finding" if g["holds"] else "info")
    report.add(section)
    ranking = ranking_section(audit)
    if ranking is not None:
        report.add(ranking)
    for extra_section in left_out_sections(audit):
        report.add(extra_section)
    return report.write(outdir, extra_files=extra or None)


def knn_cmd(
    output: Path = typer.Option(Path("results.csv"), "--output", "-o", help="Results table (query_id, rank, item_id, distance): .csv, .tsv, .parquet, .json or .jsonl."),
    embeddings: Optional[Path] = typer.Option(None, "--embeddings", "-e", help="Embeddings: .npy (ids from a .ids.txt next to it), .npz (embeddings, ids), or a table with an id column."),
    embed_images: Optional[str] = typer.Option(None, "--embed-images", help="Embed photos with the built-in face descriptor first: 'demo', 'portraits', a folder or a sample table."),
    items: Optional[Path] = typer.Option(None, "--items", "-i", help="Item table, needed for --group-col."),
    k: int = typer.Option(6, "-k", "--k", min=1, help="Neighbours per query."),
    metric: str = typer.Option("minkowski", "--metric", help="minkowski (with --p), euclidean, manhattan, chebyshev or cosine."),
    p: float = typer.Option(2.0, "--p", help="Minkowski order p."),
    group_col: Optional[str] = typer.Option(None, "--group-col", help="Item column with a product/group id to exclude near-duplicates of the query."),
    limit: Optional[int] = typer.Option(None, "--limit", min=2, help="Use only the first N images of --embed-images."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars on stderr."),
):
    """k-nearest-neighbour search over embeddings (every item queries; itself excluded): the results table of a retrieval audit."""
    # lazy: pandas (see the module docstring)
    from fairvision.io.retrieval import read_items
    from fairvision.io.tables import write_table

    if output.suffix.lower() not in _RESULT_SUFFIXES:
        raise FairvisionError(f"{output}: unknown output format {output.suffix!r}; use {', '.join(_RESULT_SUFFIXES)}")
    if (embeddings is None) == (embed_images is None):
        raise FairvisionError("give exactly one of --embeddings or --embed-images")
    items_df = read_items(items) if items is not None else None
    if group_col and items_df is None and embed_images is None:
        raise FairvisionError("--group-col needs --items")
    with _progress(progress) as task:
        res, _, status, _ = _Harness(embed_images, embeddings, limit, k, metric, p, group_col).run(items_df, task)
    write_table(res, output)
    msg = f"{res['query_id'].nunique():,} queries x top-{k}"
    if status is not None and not status["ok"].astype(bool).all():
        n_failed, why = _without_embedding(status)
        msg += f"; {n_failed:,} of {len(status):,} images left out without an embedding ({why})"
    typer.echo(msg)
    typer.echo(f"results: {output.resolve()}")


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    audit_app.command("retrieval")(audit_retrieval_cmd)
    retrieval_app.command("knn")(knn_cmd)
    app.add_typer(retrieval_app, name="retrieval")
