"""``fairvision skin stability`` and ``fairvision skin relight`` (docs/METHODS.md §2.6, §2.7): how stable
apparent skin colour is across one person's images, and under global lighting edits.

The audit, report and pandas imports stay inside the commands (as in cli/skin.py): they add about a second to
``fairvision --help``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (
    NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed, image_table, progress_bar, results_store,
)
from fairvision.cli.options import with_settings
from fairvision.cli.skin import load_or_measure, skin_app
from fairvision.errors import FairvisionError

#: the edits of ``skin relight`` and their default ranges (fairvision.skin.relight.DEFAULT_RANGES, not imported
#: here: numpy at start-up)
_EDITS = ("exposure", "white-balance", "gamma")
#: the light's temperature a white-balance shift may reach (fairvision.skin.relight.D65_CCT and CCT_RANGE)
_D65_CCT, _CCT_RANGE = 6504.0, (4000.0, 25000.0)
_FAIL_IF_HELP = ("Exit with status 1 after writing the report when a condition holds, e.g. 'max_flip_share>0.1', "
                 "'median_sd_L>3'. Repeat: any one failing fails.")


def _numbers(text: str, flag: str, count: int | None = None) -> list[float]:
    try:
        vals = [float(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise FairvisionError(f"{flag} {text!r}: expected comma-separated numbers") from None
    if not vals or (count is not None and len(vals) != count) or not all(math.isfinite(v) for v in vals):
        raise FairvisionError(f"{flag} {text!r}: expected {count or 'some'} comma-separated finite numbers")
    return vals


def _span(text: str, flag: str, edit: str) -> list[float]:
    """LO,HI of one edit's range, checked against what the edit accepts (before any image is read)."""
    lo, hi = _numbers(text, flag, 2)
    if not hi > lo:
        raise FairvisionError(f"{flag} {text!r}: LO must be below HI")
    if edit == "gamma" and lo <= 0:
        raise FairvisionError(f"{flag} {text!r}: gamma must be positive")
    if edit == "white-balance" and not (_CCT_RANGE[0] <= _D65_CCT + lo and _D65_CCT + hi <= _CCT_RANGE[1]):
        raise FairvisionError(f"{flag} {text!r}: the light's temperature, {_D65_CCT:g} K plus the shift, must stay "
                              f"within {_CCT_RANGE[0]:g}..{_CCT_RANGE[1]:g} K (the CIE daylight locus), so the shift "
                              f"within {_CCT_RANGE[0] - _D65_CCT:g}..{_CCT_RANGE[1] - _D65_CCT:g}")
    return [lo, hi]


def _names(text: str, flag: str, known) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(x.strip() for x in str(text).split(",") if x.strip()))
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise FairvisionError(f"{flag} {text!r}: choose among {', '.join(known)}")
    return names


@with_settings("min_subjects", "correction", "alpha", "n_boot", "level", "seed", "workers", "engine", "address",
               workers=2, n_boot=2000)
def stability_cmd(
    source: Path = typer.Argument(..., metavar="TABLE_OR_IMAGES", help="A table written by 'fairvision skin measure' (or any table with L, hue and ita columns), or a sample table with image_path and the subject column, measured first."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Person column: the spread is taken over each person's images."),
    attr: List[str] = typer.Option([], "--attr", "-a", help="Attribute column that defines groups (repeat: -a gender -a age); a subject's group is that of its first image."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection of attributes (2 = also every pair)."),
    samples: Optional[Path] = typer.Option(None, "--samples", metavar="TABLE", help="Sample table whose columns (subject, attributes) are joined to the measurements by image_path or sample_id."),
    output: Path = typer.Option(Path("skin-stability"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    method: str = typer.Option("thong", "--method", "-m", help="Estimator when images are measured first (median_ita: Khaziev et al.'s per-image ITA, for their sigma_ITA)."),
    faces: str = typer.Option("largest", "--faces", help="Faces measured per image when images are measured first: largest or all."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    fail_if: List[str] = typer.Option([], "--fail-if", help=_FAIL_IF_HELP + " Names: median_sd_L, median_sd_hue, median_sd_ita, max_median_sd_L, flip_share.skin_tone, flip_share.skin_hue, flip_share.st_class, max_flip_share, n_differs."),
    L_threshold: float = typer.Option(60.0, "--L-threshold", metavar="L*", help="Light if L* >= this (Thong et al.)."),
    hue_threshold: float = typer.Option(55.0, "--hue-threshold", metavar="DEGREES", help="Yellow if h* >= this (Thong et al.)."),
    settings: AuditSettings = None,
):
    """Per-subject spread of apparent skin colour: SD and range of L*, h* (circular) and ITA over each person's
    images, the share of people whose light/dark, red/yellow or ITA class flips between their images (Wilson
    CIs), the median and mean SD by group with subject-bootstrap CIs, and Kruskal-Wallis tests of equal spread
    across groups. Subjects with one usable image are left out and counted; greyscale (achromatic) images keep
    their L* but not their h* or ITA, which are noise without colour."""
    check_outdir(output)
    conditions = [parse_condition(c) for c in fail_if]  # before any work
    from fairvision.audits.skin_stability import audit_skin_stability  # lazy imports: see the module docstring
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.skin_stability import stability_section
    from fairvision.skin.batch_tables import join_samples
    from fairvision.skin.categories import check_thresholds

    L_thr, hue_thr = check_thresholds(L_threshold, hue_threshold)
    table = read_table(samples) if samples is not None else None
    df = load_or_measure(source, method, faces, settings, results_store(store, no_store))
    if table is not None:
        df = join_samples(df, table, source=str(source), samples_source=str(samples))
    result = audit_skin_stability(df, subject=subject_col, attributes=attr, max_k=max_k, settings=settings,
                                  L_threshold=L_thr, hue_threshold=hue_thr, source=str(source))
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=f"Skin colour stability: {source.name}", subtitle="fairvision skin colour stability",
                    meta={"source": str(source), "subject_col": subject_col, "attributes": ", ".join(attr) or "-",
                          "L_threshold": L_thr, "hue_threshold": hue_thr, "settings": settings.to_meta(),
                          **gate_meta(evaluated)})
    report.add(stability_section(result, conditions=evaluated))
    report.add(coverage_section(result.coverage, id="stability-coverage", title="Images left out"))
    typer.echo(result.coverage.summary_line())
    q = result.quantities()
    done(report.write(output), f"{result.n_subjects:,} subjects; median SD of L* {q['median_sd_L']:.2f}, of h* "
                              f"{q['median_sd_hue']:.2f}; light/dark flips {q['flip_share.skin_tone']:.0%}")
    exit_if_gates_failed(evaluated)


@with_settings("min_subjects", "correction", "alpha", "n_boot", "level", "seed", "workers", "engine", "address",
               workers=2, n_boot=2000)
def relight_cmd(
    source: Path = typer.Argument(..., metavar="IMAGES_OR_FOLDER_OR_TABLE", help="An image folder, a sample table with an image path column, or 'portraits' / 'demo' for the bundled photos."),
    edits: str = typer.Option("exposure,white-balance,gamma", "--edits", help="Lighting edits, comma-separated: exposure (EV), white-balance (kelvin shift of the light from D65), gamma."),
    steps: int = typer.Option(5, "--steps", min=2, max=21, help="Strengths of each edit, evenly spaced over its range (an odd number includes the unedited image)."),
    exposure_range: str = typer.Option("-1,1", "--exposure-range", metavar="LO,HI", help="Exposure range in EV (linear RGB times 2^EV)."),
    wb_range: str = typer.Option("-1500,1500", "--wb-range", metavar="LO,HI", help="White-balance range: shift of the light's colour temperature from 6504 K, in kelvin (+: bluer light)."),
    gamma_range: str = typer.Option("0.8,1.25", "--gamma-range", metavar="LO,HI", help="Gamma range (sRGB value ** gamma; steps even in log)."),
    estimators: str = typer.Option("thong", "--estimators", help="Colour estimators, comma-separated: thong, thong-published, mean, median_ita, gray_mean."),
    mask_method: str = typer.Option("mediapipe", "--mask-method", help="Skin mask of the unedited image, used for every relit copy: mediapipe, dlib, colour or auto."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="Use only the first N images (a quick run)."),
    output: Path = typer.Option(Path("skin-relight"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    fail_if: List[str] = typer.Option([], "--fail-if", help=_FAIL_IF_HELP + " Names: slope_L.<estimator>.<edit>, max_abs_slope_L.exposure, max_abs_slope_hue.white-balance, median_sd_L, max_flip_share."),
    settings: AuditSettings = None,
):
    """Lighting sensitivity of apparent skin colour: relight every image (exposure, white balance, gamma), measure
    L* and h* with each estimator on the unedited image's skin mask, and report the slope per unit of each edit
    (median over images with bootstrap CIs) by estimator and skin colour cell, the spread and flips of each
    image's relit copies, and the RMS contrast of each image beside its skin colour (Spearman correlations)."""
    check_outdir(output)
    conditions = [parse_condition(c) for c in fail_if]  # before any work
    chosen = _names(edits, "--edits", _EDITS)
    spans = {"exposure": _span(exposure_range, "--exposure-range", "exposure"),
             "white-balance": _span(wb_range, "--wb-range", "white-balance"),
             "gamma": _span(gamma_range, "--gamma-range", "gamma")}
    est = _names(estimators, "--estimators", ("thong", "thong-published", "mean", "median_ita", "gray_mean"))
    if str(source) not in ("portraits", "demo") and not source.exists():
        raise FairvisionError(f"{source}: no such file or folder")
    from fairvision.audits.skin_stability import audit_lighting_sensitivity  # lazy imports: see the module docstring
    from fairvision.engine import check_engine
    from fairvision.report import Report
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.skin_stability import lighting_section
    from fairvision.skin.batch_tables import sample_table
    from fairvision.skin.relight import RelightOptions, edit_steps, relight_images

    options = RelightOptions(steps={e: tuple(edit_steps(e, steps, spans[e])) for e in chosen}, estimators=est,
                             mask_method=mask_method)
    check_engine(settings.engine, settings.address)
    images = sample_table(image_table(str(source)) if str(source) in ("portraits", "demo") else source)
    if limit is not None:
        images = images.head(limit)
    with progress_bar("relighting and measuring") as advance:
        rows, table = relight_images(images, options, settings=settings, progress=advance)
    if not table["ok"].any():
        first = table.iloc[0]
        raise FairvisionError(f"{source}: no image could be masked and relit ({len(table):,} tried; first: "
                              f"{Path(str(first['image_path'])).name}: {first['reason']}); nothing was written")
    result = audit_lighting_sensitivity(rows, table, settings=settings)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    report = Report(title=f"Skin colour under lighting edits: {source.name}",
                    subtitle="fairvision skin colour lighting sensitivity",
                    meta={"source": str(source), "edits": ", ".join(f"{e}: {', '.join(f'{v:g}' for v in s)}"
                                                                   for e, s in options.steps.items()),
                          "estimators": ", ".join(est), "mask_method": options.mask_method,
                          "mask": "the unedited image's skin mask, used for every relit copy",
                          "settings": settings.to_meta(), **gate_meta(evaluated)})
    report.add(lighting_section(result, conditions=evaluated))
    report.add(coverage_section(result.coverage, id="relight-coverage", title="Images left out"))
    typer.echo(result.coverage.summary_line())
    q = result.quantities()
    parts = [f"{k.split('.', 1)[1]} {v:+.2f}" for k, v in q.items() if k.startswith("slope_L.")]
    done(report.write(output), f"{result.n_used:,} images; median slope of L*: " + ", ".join(parts))
    exit_if_gates_failed(evaluated)


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    """Adds ``stability`` and ``relight`` to the ``skin`` group (:mod:`fairvision.cli.skin` registers it first)."""
    skin_app.command("stability")(stability_cmd)
    skin_app.command("relight")(relight_cmd)
