"""``fairvision skin``: measure apparent skin colour of many images, report on one set, compare two sets.

The audit, report and pandas imports stay inside the commands: they add about
a second to ``fairvision --help`` (measured: 0.35 s without, 1.3-3.8 s with them).
``skin measure`` asks the results store's whole-run memo (:mod:`fairvision.io.run_memo`) before them: a run
whose inputs and options are unchanged writes the table of the run before without ever importing them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (
    CACHE_OPTION, NO_STORE_OPTION, STORE_OPTION, check_outdir, check_output_file, done, image_table, progress_bar,
    results_store, store_root,
)
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError
from fairvision.io.atomic import atomic_write_bytes, check_writable
from fairvision.io.run_memo import memo_generation, memo_temp_path, read_memo, run_images, run_key, write_memo
from fairvision.io.store_files import store_lock

_OUTPUT_SUFFIXES = (".parquet", ".csv", ".tsv", ".json", ".jsonl")
#: the results-store stage of skin measurements (fairvision.skin.batch.STAGE, not imported: see the module docstring)
_STAGE = "skin"

#: --faces: one default for every command that measures skin (fairvision.skin.batch.DEFAULT_FACES, not imported
#: here: it brings in the vision stack), so that they share results in the store
FACES_DEFAULT = "largest"
_FACES_HELP = ("Faces measured per image: largest (default: a row is one subject, and uniting every face would pool a "
               "bystander's skin into theirs) or all (unite every face found, e.g. for crowds). The same default as "
               "'audit dataset --measure-skin', so the two share their results in the store.")

L_THRESHOLD_OPTION = typer.Option(
    None, "--L-threshold", metavar="L*",
    help="Skin tone threshold: light if L* >= this (0-100; default 60, Thong et al. after Ly et al.).")
HUE_THRESHOLD_OPTION = typer.Option(
    None, "--hue-threshold", metavar="DEGREES",
    help="Skin hue threshold: yellow if h* >= this many degrees (-180-180; default 55, Thong et al.).")
ITA_BOUNDARIES_OPTION = typer.Option(
    None, "--ita-boundaries", metavar="SET_OR_EDGES",
    help="Edges of the ITA classes ST1 (darkest) ... ST6: chardon (default: -30, 10, 28, 41, 55, closed on the "
         "right), paper (Khaziev et al. Table 3: the same edges closed on the left) or five increasing numbers "
         "'a,b,c,d,e' (closed on the right). 'skin report' and 'skin compare' then add an ST1-ST6 table.")


def _category_options(L_threshold, hue_threshold, ita_boundaries):
    """The checked category options (before any work): ``(L, hue, boundaries or None, meta)``; ``meta`` is empty
    when none was given, so that the default output stays as it was."""
    from fairvision.skin.categories import (  # lazy imports: see the module docstring
        HUE_THRESHOLD, L_THRESHOLD, category_options_meta, check_thresholds, parse_ita_boundaries,
    )

    L, hue = check_thresholds(L_THRESHOLD if L_threshold is None else L_threshold,
                              HUE_THRESHOLD if hue_threshold is None else hue_threshold)
    boundaries = parse_ita_boundaries(ita_boundaries) if ita_boundaries is not None else None
    given = L_threshold is not None or hue_threshold is not None or ita_boundaries is not None
    meta = category_options_meta(L, hue, boundaries or parse_ita_boundaries(None)) if given else {}
    return L, hue, boundaries, meta


skin_app = typer.Typer(
    help=("Measure apparent skin colour (CIELAB L*, hue angle h*, ITA and categories) from images, report and "
          "compare it, and test how stable it is across a person's photos and under lighting changes."),
    no_args_is_help=True,
)


@with_settings("workers", "engine", "address", workers=2)
def measure_cmd(
    source: Path = typer.Argument(
        ..., metavar="IMAGES_OR_FOLDER_OR_TABLE",
        help="An image, a folder of images, a sample table (CSV, TSV, Parquet, JSON/JSONL) with an image path column, a listing (.txt: one image path per line), WebDataset tar shards (a .tar, a folder of them, a glob or 'shard-{000000..000009}.tar', quoted), or 'portraits' / 'demo' for the bundled photos (62 CC0 portraits / 540 FairFace photos with their age and gender).",
    ),
    output: Path = typer.Option(Path("skin.parquet"), "--output", "-o", help="Output table: .parquet, .csv, .tsv, .json or .jsonl (written atomically)."),
    method: str = typer.Option("thong", "--method", "-m", help="Colour estimator: thong (deterministic Thong et al.), thong-published, mean, median_ita, gray_mean."),
    mask_method: str = typer.Option("mediapipe", "--mask-method", help="Automatic skin mask: mediapipe (face mesh; default), dlib (BiasPainter's 68 landmarks), colour (YCrCb rule, low trust), auto (mediapipe, then dlib, then colour)."),
    masks: Optional[Path] = typer.Option(None, "--masks", help="Folder of supplied skin masks named <sample_id>.png, <image stem>.png or <image stem>_skin.png (binary, or label maps with --skin-label)."),
    skin_label: Optional[int] = typer.Option(None, "--skin-label", help="Label id of skin in label-map masks (CelebAMask-HQ / FHIBE style)."),
    faces: str = typer.Option(FACES_DEFAULT, "--faces", help=_FACES_HELP),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    cache: Optional[Path] = CACHE_OPTION,
    overlays: Optional[Path] = typer.Option(None, "--overlays", help="Write a QA overlay PNG per image here: mask outline, face outline and the thong clusters."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show a progress bar on stderr."),
    L_threshold: Optional[float] = L_THRESHOLD_OPTION,
    hue_threshold: Optional[float] = HUE_THRESHOLD_OPTION,
    ita_boundaries: Optional[str] = ITA_BOUNDARIES_OPTION,
    settings: AuditSettings = None,
):
    """Measure the apparent skin colour of every image and write one row per image:
    L*, a*, b*, hue angle, ITA, chroma, pixel count, faces found, mask method and trust, quality
    flags, the skin-colour categories, and for images that could not be measured the reason. With
    --L-threshold, --hue-threshold or --ita-boundaries the categories use those values, written in the
    columns L_threshold, hue_threshold and ita_boundaries."""
    check_output_file(output, _OUTPUT_SUFFIXES)  # before any work
    # (a source that does not exist was refused before this body ran: cli.startup.check_first)
    bundled = str(source) in ("portraits", "demo") and not source.exists()  # the bundled portraits / FairFace sample
    memo = _memo_plan(source, output, store=store, no_store=no_store, cache=cache, overlays=overlays,
                      settings=settings, masks=masks, options=dict(
                          method=method, mask_method=mask_method, skin_label=skin_label, faces=faces,
                          L_threshold=L_threshold, hue_threshold=hue_threshold, ita_boundaries=ita_boundaries))
    if memo is not None and _memo_hit(memo, output):  # inputs and options unchanged: the table of that run
        return
    from fairvision.engine import check_engine  # lazy imports: see the module docstring
    from fairvision.skin.batch import MeasureParams, measure_images  # light: its workers start before pandas

    L_thr, hue_thr, boundaries, category_meta = None, None, None, {}
    if L_threshold is not None or hue_threshold is not None or ita_boundaries is not None:  # checked when given:
        # skin.categories imports pandas (0.2 s, measured), which a default run imports once its workers started
        L_thr, hue_thr, boundaries, category_meta = _category_options(L_threshold, hue_threshold, ita_boundaries)
    params = MeasureParams(method=method, mask_method=mask_method, faces=faces, skin_label=skin_label)
    check_engine(settings.engine, settings.address)
    results = results_store(store, no_store, cache)
    render_overlay = None
    if overlays is not None:
        check_outdir(overlays)
        from fairvision.report.overlays import render_overlay  # lazy: the report package, 0.085 s (measured)
    images = image_table(str(source)) if bundled else source
    with progress_bar("measuring skin colour", progress) as advance:  # a bar on a terminal, a stage line in a log
        df = measure_images(
            images, params=params, masks_dir=masks, settings=settings, store=results, overlays_dir=overlays,
            overlay=render_overlay, progress=advance,
        )
    from fairvision.io.tables import write_table  # pandas: imported by measure_images meanwhile
    from fairvision.skin.batch_tables import summary_line
    from fairvision.skin.categories import add_categories

    s = df.attrs["summary"]
    if s["measured"] == 0:  # bad input (exit 2, not the gate's 1); an output of failures only is not written
        first = df.iloc[0]
        raise FairvisionError(f"{source}: no image could be measured ({s['images']:,} tried; first: "
                              f"{Path(str(first['image_path'])).name}: {first['reason']}); nothing was written")

    def finish(df):
        if category_meta:  # the categories again with the options given (in place), and the values used
            df = add_categories(df, L_threshold=L_thr, hue_threshold=hue_thr, ita_boundaries=boundaries)
            df = df.assign(**category_meta)
        return df

    write_table(finish(df), output)
    if memo is not None:  # the table a second run would write, for the next run with the same key
        _memo_keep(memo, df, finish, lambda: measure_images(images, params=params, masks_dir=masks,
                                                            settings=settings, store=results, progress=False))
    typer.echo(summary_line(s))
    typer.echo(f"table: {output.resolve()}")
    if overlays is not None:
        typer.echo(f"overlays: {overlays.resolve()}")


@dataclass(frozen=True)
class _Memo:
    """A run the whole-run memo can answer (:mod:`fairvision.io.run_memo`): its store, key and images."""

    root: Path
    key: str
    images: list
    options: dict
    masks: Optional[Path]
    generation: str  # the memo's generation token before the run read the store (a withdrawal renews it)


def _memo_plan(source: Path, output: Path, *, store, no_store, cache, overlays, settings, masks, options):
    """The memo of a ``skin measure`` run over a folder of images, one image or the bundled portraits, into a
    results store on the local engine, without overlays; None for any other run (it takes the normal path)."""
    root = store_root(store, no_store, cache)
    if root is None or overlays is not None or str(settings.engine).lower() != "local" or settings.address:
        return None
    images = run_images(source)
    if images is None:
        return None
    check_writable(root, kind="results store")  # as the normal path does, before any work
    options = {**options, "source": "portraits" if str(source) == "portraits" and not source.exists() else "path",
               "output": output.suffix.lower()}
    generation = memo_generation(root)  # before this run reads the store
    key = run_key(images, options, masks=masks)
    return None if key is None else _Memo(root, key, images, options, masks, generation)


def _memo_hit(memo: _Memo, output: Path) -> bool:
    """Write the memo's table to ``output`` and say so, when the store holds one for this run's key."""
    hit = read_memo(memo.root, memo.key, stage=_STAGE)
    if hit is None:
        return False
    atomic_write_bytes(output, hit.data)
    typer.echo(hit.summary_line())
    typer.echo(f"table: {output.resolve()}")
    return True


def _memo_keep(memo: _Memo, df, finish, measure_again) -> None:
    """After a run: keep, as the memo of its key, the bytes of the table a second run would write (every row from
    the store). Only when every row is in the store (not for failures it does not keep: a worker error, an image
    over the size limit), no input changed during the run and no consent withdrawal came since the run began
    (the memo's generation token is the one read before the run read the store, checked under the store's
    shared lock, which is held until the memo is written). The memo is a bonus: any failure here leaves the
    finished run as it is."""
    from fairvision.io.tables import write_table  # lazy imports: see the module docstring
    from fairvision.skin.batch_tables import summary_line

    flags = set(";".join(df["flags"].astype(str)).split(";"))
    if df["image_path"].astype(str).tolist() != memo.images or flags & {"error", "image_too_large"}:
        return
    try:
        with store_lock(memo.root):
            if memo_generation(memo.root) != memo.generation:  # a withdrawal since the run began
                return
            warm = df if bool(df["from_cache"].all()) else measure_again()  # now read from the store
            if not bool(warm["from_cache"].all()) or run_key(memo.images, memo.options, masks=memo.masks) != memo.key:
                return
            tmp = memo_temp_path(memo.root, memo.options["output"])
            try:
                write_table(finish(warm), tmp)
                data = tmp.read_bytes()
            finally:
                tmp.unlink(missing_ok=True)
            write_memo(memo.root, memo.key, data, summary=summary_line(warm.attrs["summary"]), rows=len(warm))
    except Exception:  # (not an interrupt) a store we cannot write to, a reread that failed: no memo
        return


def load_or_measure(source: Path, method: str, faces: str, settings: AuditSettings, store=None):
    """A measurement table (with L and hue columns) as is; images, folders and sample tables are measured (with
    a summary line on stderr: measured, from the store, failed)."""
    import pandas as pd  # lazy imports: see the module docstring

    from fairvision.io.tables import read_raw_table
    from fairvision.skin.batch import MeasureParams, measure_images
    from fairvision.skin.batch_tables import summary_line

    images = source
    if str(source) in ("portraits", "demo") and not source.exists():  # the bundled portraits / FairFace sample
        images = image_table(str(source))
    elif not source.exists() and not str(source).lower().endswith(".tar"):  # a .tar glob / brace pattern: resolved by the reader
        raise FairvisionError(f"{source}: no such file or folder")
    if source.is_file() and source.suffix.lower() in _OUTPUT_SUFFIXES:
        df = read_raw_table(source)
        if {"L", "hue"} <= set(df.columns):
            return df
    with progress_bar("measuring skin colour") as advance:
        df = measure_images(images, params=MeasureParams(method=method, faces=faces), settings=settings,
                            progress=advance, store=store)
    typer.echo(f"{source.name}: {summary_line(df.attrs['summary'])}", err=True)
    return pd.DataFrame(df)


def _read_samples(samples: Path, columns, source: Path):
    """The ``--samples`` table, read before any work; when ``source`` is not a table (images carry no columns), it
    must have every column asked for (``columns``: ``(option, column)`` pairs, e.g. ``--by``)."""
    from fairvision.io.tables import read_table  # lazy imports: see the module docstring
    from fairvision.io.validate import require_columns

    table = read_table(samples)
    if not (source.is_file() and source.suffix.lower() in _OUTPUT_SUFFIXES):
        for option, col in columns:
            if col is not None:
                require_columns(table, [col], source=str(samples), why=f" for {option}")
    return table


def _write_report(section, output: Path, title: str, meta: dict) -> None:
    from fairvision.report import Report  # lazy imports: see the module docstring

    report = Report(title=title, subtitle="fairvision skin colour report", meta=meta)
    report.add(section)
    done(report.write(output))


# n_boot=2000: the skin audits' own default (fairvision.audits.skin.DEFAULTS), for the subject bootstrap
@with_settings("workers", "engine", "address", workers=2, n_boot=2000)
def report_cmd(
    source: Path = typer.Argument(..., metavar="SKIN_TABLE_OR_IMAGES", help="A table written by 'fairvision skin measure' (or any table with L and hue columns), or images / a folder / a sample table to measure first."),
    output: Path = typer.Option(Path("skin-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    by: Optional[str] = typer.Option(None, "--by", help="Attribute column to break the light/dark x red/yellow cells down by (of the table, or of --samples)."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Person column: cell CIs then resample people, not images."),
    samples: Optional[Path] = typer.Option(None, "--samples", metavar="TABLE", help="Sample table (CSV, TSV, Parquet, JSON/JSONL) whose attribute columns are joined to the measurements, matched by image_path or sample_id (a folder's images are named by their file name without suffix): a folder of images carries no attributes for --by."),
    method: str = typer.Option("thong", "--method", "-m", help="Estimator when images are measured first."),
    faces: str = typer.Option(FACES_DEFAULT, "--faces", help="When images are measured first: " + _FACES_HELP),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    L_threshold: Optional[float] = L_THRESHOLD_OPTION,
    hue_threshold: Optional[float] = HUE_THRESHOLD_OPTION,
    ita_boundaries: Optional[str] = ITA_BOUNDARIES_OPTION,
    settings: AuditSettings = None,
):
    """Skin colour distribution of one image set: Thong et al.'s light/dark x red/yellow table with CIs,
    20-bin histograms of L* and h*, the L* vs h* scatter, and a breakdown by group (--by)."""
    from fairvision.audits.skin import audit_skin_distribution  # lazy imports: see the module docstring
    from fairvision.report.sections.skin import skin_section
    from fairvision.skin.batch_tables import join_samples

    check_outdir(output)
    L_thr, hue_thr, boundaries, category_meta = _category_options(L_threshold, hue_threshold, ita_boundaries)
    wanted = (("--by", by), ("--subject-col", subject_col))
    table = _read_samples(samples, wanted, source) if samples is not None else None  # before any work
    results = results_store(store, no_store)
    df = load_or_measure(source, method, faces, settings, results)
    if table is not None:
        df = join_samples(df, table, source=str(source), samples_source=str(samples))
    for option, col in wanted:
        if col is not None and col not in df.columns:
            if table is not None:
                raise FairvisionError(f"{samples}: no column {col!r} for {option} (and {source} has none); columns are "
                                      f"{', '.join(map(str, table.columns))}")
            raise FairvisionError(f"{source}: no column {col!r} for {option}; columns are "
                                  f"{', '.join(map(str, df.columns))}; images carry no attributes: join them with "
                                  f"--samples TABLE (sample_id or image_path, and a {col!r} column)")
    dist = audit_skin_distribution(df, by=by, subject=subject_col, name=source.stem, settings=settings,
                                   L_threshold=L_thr, hue_threshold=hue_thr, ita_boundaries=boundaries)
    _write_report(skin_section(dist), output, f"Skin colour: {source.name}",
                  {"source": str(source), "samples": str(samples) if samples is not None else "-", "by": by or "-",
                   **category_meta, "settings": settings.to_meta()})


# n_boot=2000: the skin audits' own default (fairvision.audits.skin.DEFAULTS), for the subject bootstrap
@with_settings("workers", "engine", "address", workers=2, n_boot=2000)
def compare_cmd(
    first: Path = typer.Argument(..., metavar="FIRST", help="First set: a skin table from 'fairvision skin measure', or images / a folder / a sample table."),
    second: Path = typer.Argument(..., metavar="SECOND", help="Second set, same kinds of input (e.g. a generator's outputs)."),
    output: Path = typer.Option(Path("skin-comparison"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    names: Optional[str] = typer.Option(None, "--names", help="Names of the two sets, comma-separated (default: the file or folder names)."),
    method: str = typer.Option("thong", "--method", "-m", help="Estimator when images are measured first."),
    faces: str = typer.Option(FACES_DEFAULT, "--faces", help="When images are measured first: " + _FACES_HELP),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    L_threshold: Optional[float] = L_THRESHOLD_OPTION,
    hue_threshold: Optional[float] = HUE_THRESHOLD_OPTION,
    ita_boundaries: Optional[str] = ITA_BOUNDARIES_OPTION,
    settings: AuditSettings = None,
):
    """Compare the skin colour of two image sets (Thong et al. Table 2: e.g. training data against a
    generator's outputs): both light/dark x red/yellow tables with CIs, their difference in percentage
    points and a chi-square test of homogeneity."""
    from fairvision.audits.skin import audit_skin_comparison  # lazy imports: see the module docstring
    from fairvision.report.sections.skin import skin_section

    pair = tuple(n.strip() for n in names.split(",")) if names else (first.stem or first.name, second.stem or second.name)
    if len(pair) != 2 or not all(pair):
        raise FairvisionError(f"--names needs two comma-separated names, got {names!r}")
    check_outdir(output)
    L_thr, hue_thr, boundaries, category_meta = _category_options(L_threshold, hue_threshold, ita_boundaries)
    results = results_store(store, no_store)
    a = load_or_measure(first, method, faces, settings, results)
    b = load_or_measure(second, method, faces, settings, results)
    result = audit_skin_comparison(a, b, names=pair, settings=settings, L_threshold=L_thr, hue_threshold=hue_thr,
                                   ita_boundaries=boundaries)
    _write_report(skin_section(result), output, f"Skin colour: {pair[0]} vs {pair[1]}",
                  {"first": str(first), "second": str(second), **category_meta, "settings": settings.to_meta()})
    t = result.test
    typer.echo(f"chi-square({t.df}) = {t.statistic:.2f}, p = {t.pvalue:.3g}")


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    skin_app.command("measure")(measure_cmd)
    skin_app.command("report")(report_cmd)
    skin_app.command("compare")(compare_cmd)
    app.add_typer(skin_app, name="skin")
