"""Counterfactual skin-colour analyses (Thong et al., ICCV 2023, section 4.3).

Two parts:

(a) :func:`audit_counterfactuals` - a user's counterfactual image sets
    (original, reconstructed and manipulated variants such as ``+light``,
    ``+dark``, ``+red``, ``+yellow``) with a model's predictions, laid out like
    Thong et al. Table 4 (accuracy per variant per class and overall), with
    paired McNemar tests of every variant against the *reconstructed* set (the
    paper compares with the reconstruction, not the original, so that
    reconstruction artefacts do not count as skin-colour effects;
    docs/METHODS.md §7.4).

(b) :func:`audit_colour_transect` - a built-in colorimetric transect that needs no
    GAN: the skin region's L* is shifted or its hue angle h* rotated inside the
    skin mask only (:func:`fairvision.skin.transect.shift_region_colour`), and
    the shift is checked on the uint8 result: the requested axis moved by the
    requested amount, the other axis stayed within tolerance, and pixels outside
    the mask are unchanged (docs/METHODS.md §7.5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import ColumnError, FairvisionError
from fairvision.skin.estimators import estimate
from fairvision.skin.transect import RegionShift, shift_region_colour, wrap_degrees
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.stratified import mcnemar

DEFAULT_VARIANTS = ("original", "reconstructed", "+light", "+dark", "+red", "+yellow")
#: Thong et al.'s manipulations as transect settings: (axis, sign). Redder = lower hue angle.
VARIANT_AXES = {"+light": ("L", 1.0), "+dark": ("L", -1.0), "+red": ("h", -1.0), "+yellow": ("h", 1.0)}
#: spellings of a correctness flag
_CORRECT_VALUES = {True: True, False: False, 1: True, 0: False, "true": True, "false": False,
                   "True": True, "False": False, "1": True, "0": False}
_TEST_COLUMNS = ["model", "variant", "class", "n_pairs", "acc_reference", "acc_variant", "change", "b", "c",
                 "statistic", "pvalue", "method"]


@dataclass
class CounterfactualResult(SettingsView):
    """Accuracy per variant and class, and paired tests against the reference variant.

    Attributes
    ----------
    accuracy : DataFrame
        Thong et al. Table 4 layout: one row per model, columns
        ``(variant, class)`` with ``All`` last in every variant; values in percent.
    accuracy_long : DataFrame
        Indexed by ``(model, variant, class)``: ``n``, ``correct``, ``accuracy`` (0-1).
    tests : DataFrame
        Indexed by ``(model, variant, class)`` for every variant except the
        reference: ``n_pairs``, ``acc_reference``, ``acc_variant``, ``change``
        (percentage points), ``b`` (right on reference, wrong on variant),
        ``c`` (the reverse), ``statistic``, ``pvalue``, ``method``,
        ``pvalue_adjusted`` and ``significant``.
    settings : AuditSettings
        The options of the audit (``correction``, ``alpha``).
    """

    accuracy: pd.DataFrame
    accuracy_long: pd.DataFrame
    tests: pd.DataFrame
    reference: str
    variants: list[str]
    classes: list
    settings: AuditSettings
    n_unpaired: int = 0

    def to_frame(self) -> pd.DataFrame:
        return self.accuracy_long


def audit_counterfactuals(
    data: pd.DataFrame,
    *,
    sample_col: str = "sample_id",
    variant_col: str = "variant",
    label_col: str = "label",
    prediction_col: str | None = "prediction",
    correct_col: str | None = None,
    model_col: str | None = None,
    reference: str = "reconstructed",
    variants: Sequence[str] | None = None,
    exact_below: int = 25,
    settings: AuditSettings | None = None,
) -> CounterfactualResult:
    """Thong et al. Table 4 from a long table of predictions on counterfactual variants (docs/METHODS.md §7.4).

    Parameters
    ----------
    data : DataFrame
        Predictions: one row per (model, sample, variant): the sample id, the variant name,
        the true class and either the prediction or a ``correct`` flag.
    sample_col, variant_col, label_col, prediction_col, correct_col, model_col : str
        Column names; ``correct_col`` (bool or 0/1) wins over comparing
        ``prediction_col`` with ``label_col``; without ``model_col`` all rows
        belong to one model called ``model``.
    reference : str
        Variant the others are compared with (default ``reconstructed``, as in the paper).
    variants : sequence of str, optional
        Variant order of the table (default: Thong et al.'s order, then any others).
    exact_below : int
        Exact binomial McNemar test when there are fewer discordant pairs.
    settings : AuditSettings, optional
        ``correction`` over all McNemar tests of a model, and ``alpha`` applied to the adjusted p-values.

    Returns
    -------
    CounterfactualResult
    """
    settings = settings or DEFAULT_SETTINGS
    src = str(data.attrs.get("source", "predictions"))
    df = _prediction_table(data, sample_col, variant_col, label_col, prediction_col, correct_col, model_col, src)
    present = list(pd.unique(df["variant"]))
    if reference not in present:
        raise FairvisionError(f"{src}: no rows for the reference variant {reference!r}; variants are {', '.join(present)}")
    order = list(variants) if variants is not None else [v for v in DEFAULT_VARIANTS if v in present] + \
        [v for v in present if v not in DEFAULT_VARIANTS]
    df = df[df["variant"].isin(order)]
    classes = sorted(pd.unique(df["label"]), key=str)
    acc_long, wide = _accuracy_tables(df, order, classes)
    tests, n_unpaired = _mcnemar_tests(df, order, classes, reference, exact_below, settings)
    return CounterfactualResult(accuracy=wide, accuracy_long=acc_long, tests=tests, reference=reference,
                                variants=order, classes=classes, settings=settings, n_unpaired=n_unpaired)


def _prediction_table(data: pd.DataFrame, sample_col: str, variant_col: str, label_col: str,
                      prediction_col: str | None, correct_col: str | None, model_col: str | None,
                      src: str) -> pd.DataFrame:
    """``model``, ``sample``, ``variant``, ``label`` and ``correct`` of every row, checked."""
    need = [sample_col, variant_col, label_col] + ([correct_col] if correct_col else [prediction_col])
    if model_col:
        need.append(model_col)
    for c in need:
        if c is None or c not in data.columns:
            raise ColumnError(f"{src}: no column {c!r}; columns are {', '.join(map(str, data.columns))}")
    df = pd.DataFrame({
        "model": data[model_col].astype(str) if model_col else "model",
        "sample": data[sample_col].astype(str),
        "variant": data[variant_col].astype(str),
        "label": data[label_col],
    })
    if df["label"].isna().any():
        row = int(np.flatnonzero(df["label"].isna().to_numpy())[0]) + 1
        raise ColumnError(f"{src}: row {row}: missing {label_col!r}")
    if correct_col:
        raw = data[correct_col]
        mapped = raw.map(lambda v: _CORRECT_VALUES.get(v))
        if mapped.isna().any():
            row = int(np.flatnonzero(mapped.isna().to_numpy())[0]) + 1
            raise ColumnError(f"{src}: row {row}: {correct_col!r} must be true/false or 1/0, got {raw.iloc[row - 1]!r}")
        df["correct"] = mapped.astype(bool).to_numpy()
    else:
        df["correct"] = (data[prediction_col].astype(str) == data[label_col].astype(str)).to_numpy()
    dup = df.duplicated(["model", "sample", "variant"])
    if dup.any():
        row = int(np.flatnonzero(dup.to_numpy())[0]) + 1
        raise ColumnError(f"{src}: row {row}: sample {df['sample'].iloc[row - 1]!r} appears twice for variant "
                          f"{df['variant'].iloc[row - 1]!r}")
    return df


def _accuracy_tables(df: pd.DataFrame, order: list[str], classes: list) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Accuracy per model, variant and class: the long table and Thong et al.'s Table 4 layout (percent)."""
    long_rows = []
    for (m, v), sub in df.groupby(["model", "variant"], sort=False):
        for cl in classes + ["All"]:
            part = sub if cl == "All" else sub[sub["label"] == cl]
            long_rows.append((m, v, cl, len(part), int(part["correct"].sum()),
                              part["correct"].mean() if len(part) else np.nan))
    acc_long = pd.DataFrame(long_rows, columns=["model", "variant", "class", "n", "correct", "accuracy"])
    acc_long["variant"] = pd.Categorical(acc_long["variant"], categories=order, ordered=True)
    acc_long = acc_long.sort_values(["model", "variant"], kind="mergesort").set_index(["model", "variant", "class"])
    wide = acc_long["accuracy"].mul(100).unstack(["variant", "class"])
    cols = [(v, c) for v in order for c in classes + ["All"] if (v, c) in wide.columns]
    wide = wide[cols]
    wide.columns = pd.MultiIndex.from_tuples(cols, names=["variant", "class"])
    return acc_long, wide


def _mcnemar_tests(df: pd.DataFrame, order: list[str], classes: list, reference: str, exact_below: int,
                   settings: AuditSettings) -> tuple[pd.DataFrame, int]:
    """McNemar tests of every variant against the reference per model and class, corrected per model;
    and the number of variant rows without a reference pair."""
    test_rows = []
    n_unpaired = 0
    for m, sub in df.groupby("model", sort=False):
        piv = sub.pivot(index="sample", columns="variant", values="correct")
        lab = sub[sub["variant"] == reference].set_index("sample")["label"]
        for v in order:
            if v == reference or v not in piv.columns:
                continue
            both = piv[[reference, v]].dropna()
            n_unpaired += int(piv[v].notna().sum() - len(both))
            for cl in classes + ["All"]:
                idx = both.index if cl == "All" else both.index[lab.reindex(both.index).to_numpy() == cl]
                ref, var = both.loc[idx, reference].astype(bool).to_numpy(), both.loc[idx, v].astype(bool).to_numpy()
                t = mcnemar(ref, var, exact_below=exact_below)
                test_rows.append((m, v, cl, len(idx), ref.mean() if len(idx) else np.nan, var.mean() if len(idx) else np.nan,
                                  100 * (var.mean() - ref.mean()) if len(idx) else np.nan, t.b, t.c, t.statistic, t.pvalue, t.method))
    tests = pd.DataFrame(test_rows, columns=_TEST_COLUMNS)
    if len(tests):
        tests["pvalue_adjusted"] = np.concatenate([adjust_pvalues(g["pvalue"].to_numpy(), settings.correction)
                                                   for _, g in tests.groupby("model", sort=False)])
    else:
        tests["pvalue_adjusted"] = []
    tests["significant"] = tests["pvalue_adjusted"].to_numpy(dtype=float) < settings.alpha
    return tests.set_index(["model", "variant", "class"]), n_unpaired


# ---------------------------------------------------------------------------
# (b) colorimetric transect


@dataclass
class TransectResult:
    """One image shifted along L* or h* inside its skin mask.

    Attributes
    ----------
    image : ndarray (H, W, 3) uint8
        The manipulated image; pixels outside the mask are the input's.
    check : dict
        ``axis``, ``requested``, ``achieved`` (measured on the uint8 output),
        ``error`` (achieved - requested), ``other_axis``, ``other_change``,
        ``L_before``/``L_after``, ``h_before``/``h_after``, ``n_pixels``,
        ``share_gamut_mapped``, ``share_L_clipped``, ``iterations``,
        ``outside_unchanged`` and ``ok`` (within ``tolerance`` on the
        requested axis and ``other_tolerance`` on the other).
    """

    image: np.ndarray
    check: dict = field(default_factory=dict)


def audit_colour_transect(
    image_rgb: np.ndarray,
    mask: np.ndarray,
    *,
    axis: str = "L",
    delta: float = 10.0,
    tolerance: float = 1.0,
    other_tolerance: float = 2.0,
    max_iter: int = 10,
    min_chroma: float = 2.0,
    estimator: str | None = None,
) -> TransectResult:
    """Shift the skin region's L* (or rotate its h*) by ``delta`` and verify it (docs/METHODS.md §7.5).

    Implements a colorimetric version of Thong et al.'s skin-colour transects
    (section 4.3): one colour property is changed at a time, the other kept.
    The edit is :func:`fairvision.skin.transect.shift_region_colour`; this audit
    checks it.

    Parameters
    ----------
    image_rgb : ndarray (H, W, 3) uint8
    mask : ndarray (H, W) bool
        Skin pixels; only these change.
    axis, delta, max_iter, min_chroma :
        As :func:`~fairvision.skin.transect.shift_region_colour` (``axis`` ``"L"`` or ``"h"``; ``delta`` in L*
        units or degrees; an h* transect of an almost grey region is refused, and an L* transect of one
        reports no hue check, ``other_change`` NaN).
    tolerance, other_tolerance : float
        Accepted error on the requested axis and drift of the other axis.
    estimator : str, optional
        Also report how a skin colour estimator of :mod:`fairvision.skin.estimators`
        (``thong``, ``mean``, ``median_ita``) sees the shift:
        ``estimator_L_change`` and ``estimator_h_change`` (informational; the
        Thong estimator works on histogram modes, so it moves in bin steps).

    Returns
    -------
    TransectResult
    """
    shift = shift_region_colour(image_rgb, mask, axis=axis, delta=delta, tolerance=tolerance,
                                other_tolerance=other_tolerance, max_iter=max_iter, min_chroma=min_chroma)
    return TransectResult(shift.image, _transect_check(shift, np.asarray(image_rgb), delta, tolerance=tolerance,
                                                       other_tolerance=other_tolerance, estimator=estimator))


def _transect_check(shift: RegionShift, image: np.ndarray, delta: float, *, tolerance: float = 1.0,
                   other_tolerance: float = 2.0, estimator: str | None = None) -> dict:
    """The check of one transect (:attr:`TransectResult.check`): requested against achieved change, the
    other axis's drift, whether pixels outside the mask are ``image``'s, and ``ok``."""
    m, hue_defined = shift.mask, shift.hue_defined
    d_l, d_h = shift.L_change, shift.h_change
    achieved, other = (d_l, d_h) if shift.axis == "L" else (d_h, d_l)
    check = {
        "axis": shift.axis, "requested": float(delta), "achieved": float(achieved), "error": float(achieved - delta),
        "other_axis": "h" if shift.axis == "L" else "L", "other_change": float(other),
        "L_before": shift.L_before, "L_after": shift.L_after,
        "h_before": shift.h_before if hue_defined else float("nan"),
        "h_after": shift.h_after if hue_defined else float("nan"), "chroma_before": shift.chroma_before,
        "hue_defined": hue_defined, "n_pixels": int(m.sum()), "share_gamut_mapped": shift.share_gamut_mapped,
        "share_L_clipped": shift.share_L_clipped, "iterations": shift.iterations,
        "applied_L_offset": shift.applied_L_offset, "applied_h_offset": shift.applied_h_offset,
        "outside_unchanged": bool(np.array_equal(shift.image[~m], image[~m])),
    }
    if estimator is not None:
        e0, e1 = estimate(estimator, shift.lab_before), estimate(estimator, shift.lab_after)
        check["estimator"] = estimator
        check["estimator_L_change"] = float(e1["L"] - e0["L"])
        check["estimator_h_change"] = wrap_degrees(e1["hue"] - e0["hue"]) if hue_defined else float("nan")
    other_ok = (not np.isfinite(other)) or abs(other) <= other_tolerance
    check["ok"] = bool(abs(achieved - delta) <= tolerance and other_ok and check["outside_unchanged"])
    return check
