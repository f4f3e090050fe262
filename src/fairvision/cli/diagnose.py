"""``fairvision diagnose``: why a model is worse for a group.

Subcommands: ``errors`` (direct error modelling), ``patterns`` (FP-growth
rules for low scores), ``confounders`` (does a disparity survive
stratification), ``counterfactual`` (Thong et al. Table 4 with McNemar tests)
and ``transect`` (shift skin L* or h* in images and check the shift).

The commands import pandas, the audits (scikit-learn, scipy) and the report
(matplotlib) when they run: at module level these would add about 2.5 s to
every ``fairvision`` start-up, ``--help`` included (``python -X importtime``).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done, progress_bar, status
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError, InputFileError
from fairvision.io.suffixes import folder_images

diagnose_app = typer.Typer(
    help=(
        "Diagnose why a model is worse for a group: error modelling, error patterns, confounder control, "
        "counterfactual image sets and colorimetric skin-colour transects. Each command writes report.html, "
        "report.json and tables/."
    ),
    no_args_is_help=True,
)

_SAMPLES = typer.Option(..., "--samples", "-s", help="Sample table (CSV, TSV, Parquet, JSON/JSONL): one row per image with its annotations.")
_SCORES = typer.Option(None, "--scores", help="Optional table of per-sample scores joined to --samples on sample_id (e.g. the output of a model audit).")
_METRIC = typer.Option(..., "--metric", "-m", help="Per-sample score column (e.g. average_recall, pck, lpips).")
_OUT = typer.Option(Path("fairvision-diagnosis"), "--output", "-o", help="Output folder for report.html, report.json and tables/.")
_SUBJ = typer.Option(None, "--subject-col", help="Column identifying the person (default: subject_id if present); resampling and tests count people, not images.")
_LOWER = typer.Option(False, "--lower-is-better", help="The score is an error (LPIPS, distance): lower is better.")
_MISSING = typer.Option("error", "--missing", help="Empty cells in the columns used: 'error' (stop, naming the row; default), 'drop' (leave those rows out), 'keep' (an empty cell is a value of its own).")


def _apply_missing(df, columns, rule: str):
    """The shared --missing rule over the columns a command uses; 'keep' leaves empty cells to the audit."""
    from fairvision.io.validate import missing_rows  # lazy: pandas (start-up, see module doc)

    keep = missing_rows(df, columns, rule, source=df.attrs.get("source", "table"))
    if keep.all():
        return df
    out = df.loc[keep].reset_index(drop=True)
    out.attrs.update(df.attrs)
    return out


def load_scored_table(samples: Path, scores: Optional[Path], metric: str, subject_col: Optional[str] = None):
    """Read the sample table, join the score table on sample_id, and check the metric column."""
    from fairvision.io.tables import SAMPLE_ID, SUBJECT_ID, read_table  # lazy: pandas (start-up, see module doc)
    from fairvision.io.validate import finite_values

    df = read_table(samples, subject_col=subject_col)
    src = str(samples)
    if scores is not None:
        sc = read_table(scores)
        finite_values(sc, metric, source=str(scores), what="score column")  # errors name the scores file and row
        keep = [SAMPLE_ID, metric] + [c for c in sc.columns if c not in df.columns and c not in (SAMPLE_ID, metric)]
        merged = df.drop(columns=[metric], errors="ignore").merge(sc[keep], on=SAMPLE_ID, how="inner")
        if merged.empty:
            raise FairvisionError(f"{scores}: no sample_id in common with {samples}")
        df = merged
        src = f"{samples} + {scores}"
    else:
        finite_values(df, metric, source=src, what="score column")
    df.attrs["source"] = src
    return df, (SUBJECT_ID if SUBJECT_ID in df.columns else None)


def _default_features(df, metric: str) -> list[str]:
    skip = {"sample_id", "subject_id", "image_path", metric}
    return [c for c in df.columns if c not in skip]


def _write(section, output: Path, title: str, meta: dict, extra_files=None):
    from fairvision.report import Report  # lazy: matplotlib (start-up, see module doc)

    rep = Report(title=title, meta=meta)
    rep.add(section)
    return rep.write(output, extra_files=extra_files)


@with_settings("n_boot", "seed", n_boot=5000)
def errors_cmd(
    samples: Path = _SAMPLES,
    scores: Optional[Path] = _SCORES,
    metric: str = _METRIC,
    feature: List[str] = typer.Option([], "--feature", "-f", help="Predictor column (repeat: -f pose -f visible_keypoints). Default: every other column."),
    output: Path = _OUT,
    subject_col: Optional[str] = _SUBJ,
    lower_is_better: bool = _LOWER,
    importance: str = typer.Option("impurity", "--importance", help="Ranking for the elbow rule: impurity (FHIBE) or permutation (held-out)."),
    n_top: Optional[int] = typer.Option(None, "--n-top", min=1, help="Keep this many top features instead of the elbow rule."),
    max_depth: int = typer.Option(3, "--max-depth", min=1, max=6, help="Depth of the explanatory decision tree."),
    n_estimators: int = typer.Option(200, "--trees", min=10, help="Trees in the random forest."),
    label: Optional[str] = typer.Option(None, "--label", help="Name of the score in rule sentences (e.g. AR)."),
    prune: bool = typer.Option(True, "--prune/--no-prune", help="Prune the tree by subject-grouped cross-validation (1-SE rule) so noise splits do not become rules; --no-prune keeps the full-depth tree."),
    missing: str = _MISSING,
    settings: AuditSettings = None,
):
    """Direct error modelling (FHIBE): which annotations predict the per-sample score, ranked by random forest
    importance, the elbow-selected top features, and decision-tree rules such as
    "visible keypoints <= 12 and pose = lying: mean AR 0.41, n = 230" with bootstrap standard errors."""
    # lazy: scikit-learn, pandas, matplotlib (start-up, see module doc)
    from fairvision.audits.diagnosis.error_model import ErrorModelOptions, audit_error_model
    from fairvision.io.validate import check_missing_rule
    from fairvision.report.sections.diagnosis import error_model_section

    check_missing_rule(missing)
    check_outdir(output)
    options = ErrorModelOptions(importance=importance, n_top=n_top, max_depth=max_depth, n_estimators=n_estimators,
                                prune=prune)
    df, subj = load_scored_table(samples, scores, metric, subject_col)
    features = list(feature) or _default_features(df, metric)
    with status("modelling errors"):
        res = audit_error_model(df, metric, features, subject_col=subj, label=label,
                                higher_is_better=not lower_is_better, missing=missing, options=options,
                                settings=settings)
        paths = _write(error_model_section(res), output, "fairvision: error modelling",
                       {"samples": str(samples), "scores": str(scores) if scores else None, "metric": metric,
                        "features": features, "prune": prune, "settings": settings.to_meta()})
    done(paths, f"top feature: {res.importances.index[0]}; worst rule: {res.rules.iloc[0]['rule']}")


@with_settings("correction")
def patterns_cmd(
    samples: Path = _SAMPLES,
    scores: Optional[Path] = _SCORES,
    metric: str = _METRIC,
    attr: List[str] = typer.Option([], "--attr", "-a", help="Attribute column whose values become items (repeat). Default: every other column."),
    output: Path = _OUT,
    low_quantile: float = typer.Option(0.2, "--low-quantile", min=0.001, max=0.999, help="Low score = at or below this quantile of the scores."),
    low_threshold: Optional[float] = typer.Option(None, "--low-threshold", help="Low score = at or below this absolute value (overrides --low-quantile)."),
    lower_is_better: bool = _LOWER,
    min_support: float = typer.Option(0.05, "--min-support", min=0.0001, max=1.0, help="FP-growth minimum support (share of samples)."),
    max_len: int = typer.Option(3, "--max-len", min=2, max=6, help="Longest rule, counting the low-score item."),
    save_groups: Optional[Path] = typer.Option(None, "--save-groups", help="Write the sample table with a new column error_pattern (matches/other) for the top significant rule, to audit it as a group."),
    missing: str = _MISSING,
    settings: AuditSettings = None,
):
    """Error pattern recognition (FHIBE): FP-growth association rules of attribute values that co-occur with a
    low score, ranked by lift with support, confidence and a corrected Fisher exact test."""
    # lazy: pandas, scipy, matplotlib (start-up, see module doc)
    from fairvision.audits.diagnosis.patterns import add_rule_attribute, audit_error_patterns
    from fairvision.io.tables import write_table
    from fairvision.report.sections.diagnosis import patterns_section

    check_outdir(output)
    df, _ = load_scored_table(samples, scores, metric)
    attrs = list(attr) or _default_features(df, metric)
    df = _apply_missing(df, attrs, missing)
    with status("mining error patterns"):
        res = audit_error_patterns(df, metric, attrs, low_quantile=low_quantile, low_threshold=low_threshold,
                                   higher_is_better=not lower_is_better, min_support=min_support, max_len=max_len,
                                   settings=settings)
        sig = res.rules[res.rules["significant"]]
        if save_groups is not None:
            if sig.empty:
                raise FairvisionError("--save-groups: no significant rule to turn into a group")
            write_table(add_rule_attribute(df, sig.iloc[0]["antecedent"]), save_groups)
        paths = _write(patterns_section(res), output, "fairvision: error patterns",
                       {"samples": str(samples), "metric": metric, "attributes": attrs, "threshold": res.threshold,
                        "settings": settings.to_meta()})
    top = sig.iloc[0]["items"] if len(sig) else "none significant"
    done(paths, f"{len(res.rules)} rules, {len(sig)} significant; top: {top}")


@with_settings("correction")
def confounders_cmd(
    samples: Path = _SAMPLES,
    scores: Optional[Path] = _SCORES,
    metric: str = _METRIC,
    attr: str = typer.Option(..., "--attr", "-a", help="Sensitive attribute whose groups are compared (e.g. skin_tone)."),
    strata: str = typer.Option(..., "--strata", help="Suspected confounder to stratify by (e.g. visible_keypoints)."),
    output: Path = _OUT,
    subject_col: Optional[str] = _SUBJ,
    n_bins: int = typer.Option(3, "--n-bins", min=2, max=10, help="Quantile strata for a numeric confounder."),
    edges: List[float] = typer.Option([], "--edge", help="Stratum edge for a numeric confounder (repeat; overrides --n-bins)."),
    outcome: str = typer.Option("auto", "--outcome", help="auto, continuous (van Elteren) or binary (Cochran-Mantel-Haenszel)."),
    min_count: int = typer.Option(10, "--min-count", min=1, help="Smallest group (subjects) tested inside a stratum (FHIBE: 10)."),
    missing: str = _MISSING,
    settings: AuditSettings = None,
):
    """Confounder control: compare the groups of --attr with and without holding --strata fixed (van Elteren or
    Cochran-Mantel-Haenszel) and report whether the disparity survives."""
    # lazy: pandas, scipy, matplotlib (start-up, see module doc)
    from fairvision.audits.diagnosis.confounders import audit_confounder
    from fairvision.report.sections.diagnosis import confounder_section

    check_outdir(output)
    df, subj = load_scored_table(samples, scores, metric, subject_col)
    df = _apply_missing(df, [attr, strata], missing)
    with status("stratified comparison"):
        res = audit_confounder(df, metric, attr, strata, outcome=outcome, subject_col=subj, n_bins=n_bins,
                               edges=list(edges) or None, min_count=min_count, settings=settings)
        paths = _write(confounder_section(res), output, "fairvision: confounder control",
                       {"samples": str(samples), "metric": metric, "attribute": attr, "confounder": strata,
                        "settings": settings.to_meta()})
    done(paths, res.message)


@with_settings("correction")
def counterfactual_cmd(
    predictions: Path = typer.Option(..., "--predictions", "-p", help="Long table: one row per sample and variant with the true label and the model's prediction (or a correct flag)."),
    output: Path = _OUT,
    sample_col: str = typer.Option("sample_id", "--sample-col", help="Sample id column (pairs variants of one image)."),
    variant_col: str = typer.Option("variant", "--variant-col", help="Variant column: original, reconstructed, +light, +dark, +red, +yellow, ..."),
    label_col: str = typer.Option("label", "--label-col", help="True class column."),
    prediction_col: str = typer.Option("prediction", "--prediction-col", help="Predicted class column."),
    correct_col: Optional[str] = typer.Option(None, "--correct-col", help="Column of true/false (1/0) correctness, instead of comparing predictions with labels."),
    model_col: Optional[str] = typer.Option(None, "--model-col", help="Model column, for several models in one table (one row each in Table 4)."),
    reference: str = typer.Option("reconstructed", "--reference", help="Variant every other one is compared with (Thong et al.: reconstructed)."),
    settings: AuditSettings = None,
):
    """Counterfactual image sets (Thong et al. 2023, Table 4): accuracy per variant and class, and McNemar paired
    tests of each manipulated variant against the reconstructed images."""
    # lazy: pandas, scipy, matplotlib (start-up, see module doc)
    from fairvision.audits.diagnosis.counterfactual import audit_counterfactuals
    from fairvision.report.sections.diagnosis import counterfactual_section

    check_outdir(output)
    df = _read_long_table(predictions)
    res = audit_counterfactuals(df, sample_col=sample_col, variant_col=variant_col, label_col=label_col,
                                prediction_col=prediction_col, correct_col=correct_col, model_col=model_col,
                                reference=reference, settings=settings)
    paths = _write(counterfactual_section(res), output, "fairvision: counterfactual skin colour",
                   {"predictions": str(predictions), "reference": reference, "settings": settings.to_meta()})
    done(paths, f"{int(res.tests['significant'].sum())} of {len(res.tests)} variant × class changes significant")


def _read_long_table(path: Path):
    """Read a long table (sample ids repeat, one row per variant) as it is: CSV, TSV, Parquet, JSON or JSONL."""
    import pandas as pd  # lazy: pandas (start-up, see module doc)

    if not path.is_file():
        raise InputFileError(f"{path}: no such file")
    suffix = path.suffix.lower()
    try:
        if suffix in (".csv", ".txt"):
            df = pd.read_csv(path)
        elif suffix == ".tsv":
            df = pd.read_csv(path, sep="\t")
        elif suffix in (".parquet", ".pq"):
            df = pd.read_parquet(path)
        elif suffix in (".jsonl", ".ndjson"):
            df = pd.read_json(path, lines=True)
        elif suffix == ".json":
            df = pd.read_json(path)
        else:
            raise InputFileError(f"{path}: unknown table format {suffix!r}; use .csv, .tsv, .parquet, .json or .jsonl")
    except InputFileError:
        raise
    except Exception as exc:  # parser errors of every format
        msg = str(exc).splitlines()[-1] if str(exc) else type(exc).__name__
        raise InputFileError(f"{path}: cannot read the table: {msg}") from None
    if df.empty:
        raise InputFileError(f"{path}: the table has no rows")
    df.columns = [str(c) for c in df.columns]
    df.attrs["source"] = str(path)
    return df


def _image_list(images: List[Path]) -> list[Path]:
    out: list[Path] = []
    for p in images:
        if p.is_dir():
            found = folder_images(p)
            if not found:
                raise FairvisionError(f"{p}: no images found in the folder")
            out.extend(found)
        elif p.is_file():
            out.append(p)
        else:
            raise FairvisionError(f"{p}: no such image or folder")
    return out


def transect_cmd(
    images: List[Path] = typer.Argument(..., help="Image files or folders of images."),
    axis: str = typer.Option("L", "--axis", help="L (lightness, L*) or h (hue angle, h*)."),
    delta: float = typer.Option(..., "--delta", "-d", help="Shift: L* units for --axis L (+ lighter), degrees for --axis h (+ yellower, - redder)."),
    output: Path = typer.Option(Path("fairvision-transect"), "--output", "-o", help="Output folder: images/ (PNG), checks.csv, report.html."),
    mask_method: str = typer.Option("mediapipe", "--mask-method", help="Skin mask: mediapipe, dlib, colour or auto."),
    tolerance: float = typer.Option(1.0, "--tolerance", min=0.0, help="Accepted error of the requested shift."),
    other_tolerance: float = typer.Option(2.0, "--other-tolerance", min=0.0, help="Accepted drift of the other axis."),
    estimator: Optional[str] = typer.Option(None, "--estimator", help="Also report the shift a skin colour estimator sees: thong, mean or median_ita (informational)."),
):
    """Colorimetric transect: shift the skin region's L* (or rotate its h*) by --delta inside the skin mask only,
    write the manipulated images as PNG, and check on the 8-bit result that the requested axis moved by the
    requested amount and the other stayed within tolerance. Run a classifier on images/ to measure the causal effect
    of skin colour (Thong et al. 2023, section 4.3) without a GAN."""
    # lazy: pandas, scipy, image decoding, skin masks, matplotlib (start-up, see module doc)
    import pandas as pd

    from fairvision.audits.diagnosis.counterfactual import audit_colour_transect
    from fairvision.engine.pool import quiet_native_stderr
    from fairvision.io.images import encode_png, read_image
    from fairvision.report.sections.diagnosis import transect_section
    from fairvision.skin.masks import skin_mask

    if axis not in ("L", "h"):
        raise FairvisionError(f"--axis must be L or h, not {axis!r}")
    check_outdir(output)
    files = _image_list(images)
    tag = f"{axis}{delta:+g}"
    rows, extra = [], {}
    seen: set[str] = set()
    with quiet_native_stderr(), progress_bar(f"transect {tag}") as advance:
        for i, f in enumerate(files, 1):
            name = f"{f.stem}_{tag}.png"
            if name in seen:
                name = f"{f.parent.name}_{name}"
            seen.add(name)
            img = read_image(f)
            mr = skin_mask(img, method=mask_method)
            row = {"image": str(f), "output": f"images/{name}"}
            if mr.mask is None:
                row.update(output=None, status="skipped", reason=mr.reason or "no skin mask")
            else:
                try:
                    res = audit_colour_transect(img, mr.mask, axis=axis, delta=delta, tolerance=tolerance,
                                                other_tolerance=other_tolerance, estimator=estimator)
                except FairvisionError as exc:
                    row.update(output=None, status="skipped", reason=str(exc))
                else:
                    row.update(status="done", reason=None, **res.check)
                    extra[f"images/{name}"] = encode_png(res.image)
            rows.append(row)
            advance(i, len(files))
    checks = pd.DataFrame(rows)
    for col in ("achieved", "ok"):
        if col not in checks:
            checks[col] = pd.Series(dtype=float if col == "achieved" else bool)
    checks["ok"] = checks["ok"].fillna(False).astype(bool)
    buf = io.StringIO()
    checks.to_csv(buf, index=False)
    extra["checks.csv"] = buf.getvalue().encode()
    paths = _write(transect_section(checks, axis=axis, delta=delta), output, "fairvision: colorimetric transect",
                   {"axis": axis, "delta": delta, "mask_method": mask_method, "estimator": estimator, "images": len(files)},
                   extra_files=extra)
    n_done = int((checks["status"] == "done").sum())
    done(paths, f"{n_done} of {len(files)} images shifted, {int(checks['ok'].sum())} within tolerance; "
                f"images in {Path(output) / 'images'}")


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    diagnose_app.command("errors")(errors_cmd)
    diagnose_app.command("patterns")(patterns_cmd)
    diagnose_app.command("confounders")(confounders_cmd)
    diagnose_app.command("counterfactual")(counterfactual_cmd)
    diagnose_app.command("transect")(transect_cmd)
    app.add_typer(diagnose_app, name="diagnose")
