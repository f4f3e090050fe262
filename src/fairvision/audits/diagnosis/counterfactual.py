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
    GAN: inside the skin mask only, shift CIELAB L* by ``delta`` or rotate the
    hue angle h* by ``delta`` degrees at constant L* and chroma, map colours
    that leave the sRGB gamut back by reducing chroma at constant L* and h*,
    quantise to uint8, and *measure* the result: the region's mean L* and the
    hue of its mean (a*, b*) are recomputed from the uint8 output, the shift is
    corrected iteratively until it matches the request, and the other axis is
    reported so a user can check it stayed put. Pixels outside the mask are
    copied unchanged (docs/METHODS.md §7.5).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError
from fairvision.skin.colour import lab_to_srgb, srgb_to_lab
from fairvision.skin.estimators import estimate
from fairvision.stats.corrections import DEFAULT_CORRECTION, adjust_pvalues
from fairvision.stats.stratified import mcnemar

DEFAULT_VARIANTS = ("original", "reconstructed", "+light", "+dark", "+red", "+yellow")
#: Thong et al.'s manipulations as transect settings: (axis, sign). Redder = lower hue angle.
VARIANT_AXES = {"+light": ("L", 1.0), "+dark": ("L", -1.0), "+red": ("h", -1.0), "+yellow": ("h", 1.0)}


@dataclass
class CounterfactualResult:
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
    """

    accuracy: pd.DataFrame
    accuracy_long: pd.DataFrame
    tests: pd.DataFrame
    reference: str
    variants: list[str]
    classes: list
    correction: str
    alpha: float
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
    correction: str = DEFAULT_CORRECTION,
    alpha: float = 0.05,
    exact_below: int = 25,
) -> CounterfactualResult:
    """Thong et al. Table 4 from a long table of predictions on counterfactual variants.

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
    correction : {"holm", "bonferroni", "bh", "none"}
        Correction over all McNemar tests of a model (default
        :data:`~fairvision.stats.corrections.DEFAULT_CORRECTION`).
    alpha : float
        Significance level applied to the adjusted p-values.
    exact_below : int
        Exact binomial McNemar test when there are fewer discordant pairs.

    Returns
    -------
    CounterfactualResult
    """
    src = str(data.attrs.get("source", "predictions"))
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
        mapped = raw.map(lambda v: {True: True, False: False, 1: True, 0: False, "true": True, "false": False,
                                    "True": True, "False": False, "1": True, "0": False}.get(v))
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
    present = list(pd.unique(df["variant"]))
    if reference not in present:
        raise FairvisionError(f"{src}: no rows for the reference variant {reference!r}; variants are {', '.join(present)}")
    order = list(variants) if variants is not None else [v for v in DEFAULT_VARIANTS if v in present] + \
        [v for v in present if v not in DEFAULT_VARIANTS]
    df = df[df["variant"].isin(order)]
    classes = sorted(pd.unique(df["label"]), key=str)

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
    tests = pd.DataFrame(test_rows, columns=["model", "variant", "class", "n_pairs", "acc_reference", "acc_variant",
                                             "change", "b", "c", "statistic", "pvalue", "method"])
    if len(tests):
        tests["pvalue_adjusted"] = np.concatenate([adjust_pvalues(g["pvalue"].to_numpy(), correction)
                                                   for _, g in tests.groupby("model", sort=False)])
    else:
        tests["pvalue_adjusted"] = []
    tests["significant"] = tests["pvalue_adjusted"].to_numpy(dtype=float) < alpha
    tests = tests.set_index(["model", "variant", "class"])
    return CounterfactualResult(accuracy=wide, accuracy_long=acc_long, tests=tests, reference=reference,
                                variants=order, classes=classes, correction=correction, alpha=alpha,
                                n_unpaired=n_unpaired)


# ---------------------------------------------------------------------------
# (b) colorimetric transect


def region_colour(lab: np.ndarray) -> tuple[float, float]:
    """Mean L* and the hue angle (degrees, [0, 360)) of the mean (a*, b*) of ``(N, 3)`` Lab pixels.

    The hue of the mean chroma vector is used instead of a mean of angles: it
    is well defined for near-grey pixels and a rotation of every pixel's hue
    by ``d`` rotates it by exactly ``d``.
    """
    lab = np.asarray(lab, dtype=np.float64)
    return float(lab[:, 0].mean()), float(np.degrees(np.arctan2(lab[:, 2].mean(), lab[:, 1].mean())) % 360.0)


def _wrap(deg: float) -> float:
    return float((deg + 180.0) % 360.0 - 180.0)


def _in_gamut_rgb(lab: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rgb = lab_to_srgb(lab, clip=False)
    ok = np.all((rgb >= -1e-6) & (rgb <= 1 + 1e-6), axis=-1)
    return rgb, ok


def gamut_map_chroma(lab: np.ndarray, *, iterations: int = 22) -> tuple[np.ndarray, np.ndarray]:
    """Bring out-of-gamut Lab colours into sRGB by scaling chroma down at constant L* and h*.

    Vectorised bisection on the chroma scale of the out-of-gamut rows only.
    L* must lie in [0, 100] (the grey axis is then in gamut).

    Returns
    -------
    (lab_mapped, was_out) : arrays ``(N, 3)`` and ``(N,)`` bool
    """
    lab = np.asarray(lab, dtype=np.float64).copy()
    _, ok = _in_gamut_rgb(lab)
    out = ~ok
    if out.any():
        sub = lab[out]
        lo, hi = np.zeros(len(sub)), np.ones(len(sub))
        for _ in range(iterations):
            mid = (lo + hi) / 2
            trial = sub.copy()
            trial[:, 1:] *= mid[:, None]
            _, good = _in_gamut_rgb(trial)
            lo = np.where(good, mid, lo)
            hi = np.where(good, hi, mid)
        sub[:, 1:] *= lo[:, None]
        lab[out] = sub
    return lab, out


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
    """Shift the skin region's L* (or rotate its h*) by ``delta`` and verify it.

    Implements a colorimetric version of Thong et al.'s skin-colour transects
    (section 4.3): one colour property is changed at a time, the other kept.

    Parameters
    ----------
    image_rgb : ndarray (H, W, 3) uint8
    mask : ndarray (H, W) bool
        Skin pixels; only these change.
    axis : {"L", "h"}
        ``L``: add ``delta`` to L* (positive = lighter). ``h``: rotate the hue
        angle by ``delta`` degrees at constant L* and chroma (positive =
        yellower, negative = redder).
    delta : float
        Requested change of the region's mean L* (L* units) or of the hue of
        its mean (a*, b*) (degrees).
    tolerance, other_tolerance : float
        Accepted error on the requested axis and drift of the other axis.
    max_iter : int
        Corrections of the applied offsets: gamut mapping, L* clipping to
        [0, 100] and uint8 rounding shrink the achieved shift and make the
        other axis drift, so the requested offset absorbs the measured error
        until it is within 0.05, and a compensating offset on the other axis
        is applied when that one drifts by more than a quarter of its
        tolerance (steps are halved when the error changes sign; the best
        iterate is kept).
    min_chroma : float
        Below this chroma of the region's mean (a*, b*) the hue is undefined
        (e.g. black-and-white photos): h* transects are refused and L*
        transects report no hue check (``other_change`` NaN).
    estimator : str, optional
        Also report how a skin colour estimator of :mod:`fairvision.skin.estimators`
        (``thong``, ``mean``, ``median_ita``) sees the shift:
        ``estimator_L_change`` and ``estimator_h_change`` (informational; the
        Thong estimator works on histogram modes, so it moves in bin steps).

    Returns
    -------
    TransectResult
    """
    img = np.asarray(image_rgb)
    if img.ndim != 3 or img.shape[2] != 3 or img.dtype != np.uint8:
        raise FairvisionError(f"transect expects an (H, W, 3) uint8 RGB image, got shape {img.shape} {img.dtype}")
    m = np.asarray(mask)
    if m.shape != img.shape[:2]:
        raise FairvisionError(f"skin mask shape {m.shape} does not match the image {img.shape[:2]}")
    m = m.astype(bool)
    if axis not in ("L", "h"):
        raise FairvisionError(f"unknown transect axis {axis!r}; use L (lightness) or h (hue angle)")
    if not np.isfinite(delta):
        raise FairvisionError("the transect delta must be a finite number")
    if not m.any():
        raise FairvisionError("the skin mask is empty; nothing to shift")
    px = img[m]
    lab0 = srgb_to_lab(px, dtype=np.float64)
    l0, h0 = region_colour(lab0)
    c0 = float(np.hypot(lab0[:, 1].mean(), lab0[:, 2].mean()))
    hue_defined = c0 >= min_chroma
    if axis == "h" and not hue_defined:
        raise FairvisionError(f"the skin region is almost grey (mean chroma {c0:.2f} < {min_chroma}); "
                              "its hue angle is undefined, so an h* transect is impossible")
    target_l = float(delta) if axis == "L" else 0.0
    target_h = float(delta) if axis == "h" else 0.0
    off_l, off_h = target_l, target_h
    gain = {"L": 1.0, "h": 1.0}
    prev: dict = {"L": None, "h": None}
    best = None
    for it in range(1, max_iter + 1):
        lab = lab0.copy()
        lab[:, 0] += off_l
        if off_h:
            th = np.radians(off_h)
            a, b = lab[:, 1].copy(), lab[:, 2].copy()
            lab[:, 1], lab[:, 2] = a * np.cos(th) - b * np.sin(th), a * np.sin(th) + b * np.cos(th)
        clipped_l = (lab[:, 0] < 0) | (lab[:, 0] > 100)
        lab[:, 0] = np.clip(lab[:, 0], 0.0, 100.0)
        mapped, was_out = gamut_map_chroma(lab)
        new_px = lab_to_srgb(mapped, as_uint8=True)
        lab1 = srgb_to_lab(new_px, dtype=np.float64)
        l1, h1 = region_colour(lab1)
        err_l = (l1 - l0) - target_l
        err_h = _wrap(h1 - h0) - target_h if hue_defined else 0.0
        main, other = (err_l, err_h) if axis == "L" else (err_h, err_l)
        score = max(abs(main) / tolerance, abs(other) / other_tolerance)
        if best is None or score < best[0]:
            best = (score, new_px, l1, h1, was_out.mean(), clipped_l.mean(), it, off_l, off_h)
        if abs(main) <= 0.05 and abs(other) <= 0.25 * other_tolerance:
            break
        # the applied offsets absorb the measured shortfall (gamut mapping, clipping, rounding); the other
        # axis is only corrected when it drifts noticeably (on low-chroma skin, uint8 rounding couples L* and
        # h*), and a step whose error changes sign is halved next time, which stops oscillation
        for ax_name, err in (("L", err_l), ("h", err_h)):
            if ax_name != axis and abs(err) <= 0.25 * other_tolerance:
                continue
            if prev[ax_name] is not None and np.sign(err) != np.sign(prev[ax_name]):
                gain[ax_name] *= 0.5
            prev[ax_name] = err
            if ax_name == "L":
                off_l -= gain["L"] * err
            else:
                off_h -= gain["h"] * err
    _, new_px, l1, h1, share_out, share_clip, it, off_l, off_h = best
    out = img.copy()
    out[m] = new_px
    d_l, d_h = l1 - l0, (_wrap(h1 - h0) if hue_defined else float("nan"))
    achieved, other = (d_l, d_h) if axis == "L" else (d_h, d_l)
    check = {
        "axis": axis, "requested": float(delta), "achieved": float(achieved), "error": float(achieved - delta),
        "other_axis": "h" if axis == "L" else "L", "other_change": float(other),
        "L_before": l0, "L_after": l1, "h_before": h0 if hue_defined else float("nan"),
        "h_after": h1 if hue_defined else float("nan"), "chroma_before": c0, "hue_defined": bool(hue_defined),
        "n_pixels": int(m.sum()), "share_gamut_mapped": float(share_out), "share_L_clipped": float(share_clip),
        "iterations": int(it), "applied_L_offset": float(off_l), "applied_h_offset": float(off_h),
        "outside_unchanged": bool(np.array_equal(out[~m], img[~m])),
    }
    if estimator is not None:
        e0, e1 = estimate(estimator, lab0), estimate(estimator, srgb_to_lab(new_px, dtype=np.float64))
        check["estimator"] = estimator
        check["estimator_L_change"] = float(e1["L"] - e0["L"])
        check["estimator_h_change"] = _wrap(e1["hue"] - e0["hue"]) if hue_defined else float("nan")
    other_ok = (not np.isfinite(other)) or abs(other) <= other_tolerance
    check["ok"] = bool(abs(achieved - delta) <= tolerance and other_ok and check["outside_unchanged"])
    return TransectResult(out, check)
