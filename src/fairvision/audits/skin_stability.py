"""How stable apparent skin colour is: the spread of one subject's colour across their images, and how far global
lighting edits move the measurement (docs/METHODS.md §2.6, §2.7).

- :func:`audit_skin_stability`: a measurement table (one row per image, a subject column, ``L``, ``hue``,
  ``ita``) -> per-subject SD and range of L*, h* (on the circle) and ITA, the subjects whose category flips
  between their images, both by group with subject-bootstrap / Wilson intervals, and Kruskal-Wallis tests of
  whether the spread differs between groups (corrected across quantities and attribute sets).
- :func:`audit_lighting_sensitivity`: the rows of :func:`fairvision.skin.relight.relight_images` (every image
  relit over a range of exposure, white balance and gamma, measured on the unedited image's mask) -> the slope
  of L* and h* per unit of each edit (per image, then the median over images with a bootstrap interval), by
  estimator and by the unedited image's light/dark x red/yellow cell; the relit copies of one image treated as
  one subject's images (their spread and flips); and the RMS contrast of each image beside its skin colour.

Rows left out (a failed measurement, the only image of a subject, an image with no skin mask) go through
:func:`fairvision.audits.coverage.audit_coverage` with a reason each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.settings import AuditSettings, SettingsView
from fairvision.errors import ColumnError
from fairvision.groups import intersections, subject_codes
from fairvision.io.validate import require_columns
from fairvision.schema import Schema
from fairvision.skin.categories import HUE_THRESHOLD, L_THRESHOLD, TONE_HUE, achromatic_rows, st_class, tone_hue_category
from fairvision.skin.relight import EDITS, IDENTITY, UNIT_SCALE, UNITS
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.groupwise import kruskal_test
from fairvision.stats.spread import category_flips, flip_shares, group_spread, rank_correlation, subject_spread

__all__ = ["DEFAULTS", "SPREAD_QUANTITIES", "FLIP_CATEGORIES", "SkinStability", "LightingSensitivity",
           "audit_skin_stability", "audit_lighting_sensitivity", "subject_table"]

#: the settings when given none: 2000 bootstrap replicates, as the other skin audits
DEFAULTS = AuditSettings(n_boot=2000)
#: per-subject spread: name -> (column, circular)
SPREAD_QUANTITIES = {"L": ("L", False), "hue": ("hue", True), "ita": ("ita", False)}
#: categories whose flips are counted, in words (ITA class and ST class are the same six ITA intervals)
FLIP_CATEGORIES = {"skin_tone": "light/dark", "skin_hue": "red/yellow", "st_class": "ITA class (ST1-ST6)"}
#: the group of every subject (the first row of each attribute table)
ALL = "(all)"
#: the one group of the coverage table when no attribute is given
_COVER, _COVER_VALUE = "scope", "all images"


@dataclass
class SkinStability(SettingsView):
    """Spread of apparent skin colour within subjects (docs/METHODS.md §2.6).

    Attributes
    ----------
    subjects : DataFrame
        One row per subject with two or more usable images: ``subject``, ``n_images``, ``sd_<q>`` and
        ``range_<q>`` for q in L, hue, ita, ``flip_<category>``, and the subject's attribute values.
    spread : DataFrame
        Index (attribute, group, quantity): ``n_subjects``, ``median``, ``median_ci_low``, ``median_ci_high``,
        ``mean``, ``mean_ci_low``, ``mean_ci_high``, ``too_small``; attribute ``(all)`` is every subject.
    flips : DataFrame
        Index (attribute, group, category): ``n_subjects``, ``n_flip``, ``share``, ``ci_low``, ``ci_high``,
        ``too_small``.
    tests : DataFrame
        Kruskal-Wallis test of each spread quantity across the groups of each attribute set: ``statistic``,
        ``df``, ``n_groups``, ``pvalue``, ``pvalue_adjusted`` (over every row), ``differs``.
    coverage : Coverage
    n_images, n_used, n_subjects, n_single : int
        Rows, rows used, subjects used (two or more images) and subjects with one usable image (left out).
    """

    subjects: pd.DataFrame
    spread: pd.DataFrame
    flips: pd.DataFrame
    tests: pd.DataFrame
    coverage: Coverage
    n_images: int
    n_used: int
    n_subjects: int
    n_single: int
    thresholds: dict
    notes: list = field(default_factory=list)
    settings: AuditSettings = DEFAULTS

    def to_frame(self) -> pd.DataFrame:
        return self.spread

    def quantities(self) -> dict[str, float]:
        """``--fail-if`` names: ``median_sd_L`` / ``median_sd_hue`` / ``median_sd_ita`` (every subject),
        ``max_median_sd_L`` ... (the largest group median of groups large enough), ``flip_share.<category>``,
        ``max_flip_share`` (the largest of them), ``n_subjects``, ``n_single``, ``n_differs`` (tests significant
        after correction)."""
        q: dict[str, float] = {"n_subjects": float(self.n_subjects), "n_single": float(self.n_single)}
        for name in SPREAD_QUANTITIES:
            key = (ALL, ALL, f"sd_{name}")
            q[f"median_sd_{name}"] = float(self.spread.loc[key, "median"]) if key in self.spread.index else np.nan
            big = self.spread.xs(f"sd_{name}", level="quantity")
            big = big[~big["too_small"].astype(bool)]["median"]
            q[f"max_median_sd_{name}"] = float(big.max()) if len(big) else np.nan
        shares = []
        for cat in FLIP_CATEGORIES:
            key = (ALL, ALL, cat)
            v = float(self.flips.loc[key, "share"]) if key in self.flips.index else np.nan
            q[f"flip_share.{cat}"] = v
            shares.append(v)
        q["max_flip_share"] = float(np.nanmax(shares)) if np.isfinite(shares).any() else np.nan
        q["n_differs"] = float(self.tests["differs"].sum()) if len(self.tests) else 0.0
        return q


def _usable(data: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Rows with a measurement (``ok`` where there is such a column, finite L* and h*) and why the others
    are left out."""
    L = pd.to_numeric(data["L"], errors="coerce").to_numpy(dtype=float)
    h = pd.to_numeric(data["hue"], errors="coerce").to_numpy(dtype=float)
    ok = np.isfinite(L) & np.isfinite(h)
    if "ok" in data.columns:
        ok &= data["ok"].fillna(False).astype(bool).to_numpy()
    why = np.full(len(data), None, dtype=object)
    given = data["reason"] if "reason" in data.columns else pd.Series(np.nan, index=data.index)
    text = given.astype("string").fillna("").str.strip()
    said = ("measurement failed: " + text).where(text != "", "measurement failed").to_numpy(dtype=object)
    why[~ok] = said[~ok]
    return ok, why


def _blank_hue(df: pd.DataFrame, rows: np.ndarray) -> pd.DataFrame:
    """``hue`` and ``ita`` set to NaN on ``rows``: with b* near 0 both angles are noise (h* = atan2(b*, a*),
    ITA = atan((L* - 50) / b*) swings between +90 and -90 degrees); L* stays."""
    if not rows.any():
        return df
    df = df.copy()
    df["hue"] = pd.to_numeric(df["hue"], errors="coerce").mask(rows)
    df["ita"] = pd.to_numeric(df["ita"], errors="coerce").mask(rows)
    return df


def _categories(df: pd.DataFrame, L_threshold: float, hue_threshold: float, ita_boundaries) -> dict[str, np.ndarray]:
    """Integer codes (-1 missing) of each flip category of every row."""
    tone, hue, _ = tone_hue_category(df["L"], df["hue"], L_threshold=L_threshold, hue_threshold=hue_threshold)
    st = st_class(pd.to_numeric(df["ita"], errors="coerce"), ita_boundaries)
    return {"skin_tone": np.asarray(tone.codes), "skin_hue": np.asarray(hue.codes), "st_class": np.asarray(st.codes)}


def subject_table(df: pd.DataFrame, subjects: np.ndarray, *, L_threshold: float = L_THRESHOLD,
                  hue_threshold: float = HUE_THRESHOLD, ita_boundaries=None) -> pd.DataFrame:
    """Per-subject spread and flips of the usable rows ``df`` with subject codes ``subjects`` (every subject).

    ``flip_<category>`` is a nullable boolean: missing (NA) for a subject with fewer than two images that have
    that category (e.g. h* left out of achromatic images), so such a subject is not counted as "no flip"."""
    k = int(subjects.max()) + 1 if subjects.size else 0
    out = {"n_images": np.bincount(subjects, minlength=k)}
    for name, (col, circ) in SPREAD_QUANTITIES.items():
        sp = subject_spread(pd.to_numeric(df[col], errors="coerce").to_numpy(dtype=float), subjects, circular=circ,
                            n_subjects=k)
        out[f"sd_{name}"] = sp["sd"].to_numpy()
        out[f"range_{name}"] = sp["range"].to_numpy()
    for cat, codes in _categories(df, L_threshold, hue_threshold, ita_boundaries).items():
        fl = category_flips(codes, subjects, n_subjects=k)
        out[f"flip_{cat}"] = pd.array(fl["flips"].to_numpy(), dtype="boolean")
        out[f"flip_{cat}"][fl["n"].to_numpy() < 2] = pd.NA
    return pd.DataFrame(out)


def _flip_values(subj: pd.DataFrame, cat: str) -> np.ndarray:
    """``flip_<cat>`` as floats: 1, 0, or NaN where the subject has under two categorised images."""
    return subj[f"flip_{cat}"].astype("Float64").to_numpy(dtype=float, na_value=np.nan)


def _group_tables(subj: pd.DataFrame, attributes, max_k: int, schema, settings: AuditSettings):
    """Spread and flip tables by group (and every subject), and the Kruskal-Wallis tests."""
    sets = [(ALL, np.arange(len(subj)), np.zeros(len(subj), np.int64), pd.Index([ALL]))]
    if attributes:
        for inter in intersections(subj, list(attributes), max_k, schema, source="subjects"):
            idx = inter.index()
            labels = idx if inter.k == 1 else pd.Index([" × ".join(map(str, t)) for t in idx])
            sets.append((inter.name, inter.rows, inter.codes, labels))
    spread_rows, flip_rows, tests = [], [], []
    for name, rows, codes, labels in sets:
        n_groups = len(labels)
        for q in SPREAD_QUANTITIES:
            vals = subj[f"sd_{q}"].to_numpy(dtype=float)[rows]
            tab = group_spread(vals, codes, n_groups, n_boot=settings.n_boot, level=settings.level,
                               seed=settings.seed)
            for g, row in tab.iterrows():
                spread_rows.append({"attribute": name, "group": str(labels[g]), "quantity": f"sd_{q}", **row,
                                    "too_small": bool(row["n_subjects"] < settings.min_subjects) and name != ALL})
            big = np.flatnonzero(tab["n_subjects"].to_numpy() >= settings.min_subjects)
            if name != ALL and big.size >= 2:
                keep = np.isin(codes, big) & np.isfinite(vals)
                t = kruskal_test(vals[keep], codes[keep])
                tests.append({"attribute": name, "quantity": f"sd_{q}", "statistic": t.statistic, "df": t.df,
                              "n_groups": t.n_groups, "pvalue": t.pvalue})
        for cat in FLIP_CATEGORIES:
            f = _flip_values(subj, cat)[rows]
            has = np.isfinite(f)  # a subject with under two categorised images neither flips nor stays
            tab = flip_shares(f[has] > 0.5, codes[has], n_groups, level=settings.level)
            for g, row in tab.iterrows():
                flip_rows.append({"attribute": name, "group": str(labels[g]), "category": cat, **row,
                                  "too_small": bool(row["n_subjects"] < settings.min_subjects) and name != ALL})
    spread = pd.DataFrame(spread_rows).set_index(["attribute", "group", "quantity"])
    flips = pd.DataFrame(flip_rows).set_index(["attribute", "group", "category"])
    flips[["n_subjects", "n_flip"]] = flips[["n_subjects", "n_flip"]].astype("int64")
    spread["n_subjects"] = spread["n_subjects"].astype("int64")
    tests_df = pd.DataFrame(tests, columns=["attribute", "quantity", "statistic", "df", "n_groups", "pvalue"])
    tests_df["pvalue_adjusted"] = adjust_pvalues(tests_df["pvalue"].to_numpy(dtype=float), settings.correction) \
        if len(tests_df) else np.array([], dtype=float)
    tests_df["differs"] = tests_df["pvalue_adjusted"] < settings.alpha
    return spread, flips, tests_df.set_index(["attribute", "quantity"])


def audit_skin_stability(data: pd.DataFrame, *, subject: str = "subject_id", attributes: Sequence[str] = (),
                         max_k: int = 1, schema: Schema | None = None, settings: AuditSettings | None = None,
                         L_threshold: float = L_THRESHOLD, hue_threshold: float = HUE_THRESHOLD,
                         ita_boundaries=None, source: str = "table") -> SkinStability:
    """Spread of apparent skin colour within subjects, by group (docs/METHODS.md §2.6).

    Parameters
    ----------
    data : pandas.DataFrame
        One row per image: ``subject``, ``L``, ``hue`` (degrees), ``ita``, optionally ``ok`` / ``reason`` (as
        ``skin measure`` writes them) and the attribute columns.
    subject : str
        Subject column.
    attributes : sequence of str
        Attributes (columns) that define groups; a subject's group is the value of its first usable image.
    max_k : int
        Largest intersection of attributes.
    schema : Schema, optional
    settings : AuditSettings, optional
        ``n_boot``, ``level``, ``seed`` (subject bootstrap of the medians and means), ``min_subjects`` (smaller
        groups are reported, not tested), ``correction`` and ``alpha`` (tests). Default :data:`DEFAULTS`.
    L_threshold, hue_threshold, ita_boundaries
        Category thresholds (docs/METHODS.md §1.4).
    source : str
        Name of the table in messages.

    Returns
    -------
    SkinStability
    """
    settings = settings or DEFAULTS
    require_columns(data, [subject, "L", "hue", "ita", *attributes], source=source)
    ok, why = _usable(data)
    codes_all = subject_codes(data, subject, source=source)
    per_subject = np.bincount(codes_all[ok], minlength=int(codes_all.max()) + 1 if codes_all.size else 0)
    single = ok & (per_subject[codes_all] < 2)
    why[single] = "only usable image of its subject"
    used = ok & ~single
    cov_data = data.assign(**{_COVER: _COVER_VALUE})
    coverage = audit_coverage(cov_data, used, list(attributes) or [_COVER], schema=schema, settings=settings,
                              step="stability measurement", reasons=why)
    df = data.loc[used].reset_index(drop=True)
    if len(df) == 0:
        raise ColumnError(f"{source}: no subject has two or more usable images in {subject!r} "
                          f"({int(ok.sum()):,} usable images of {len(data):,}); spread needs several images a subject")
    grey = achromatic_rows(df)
    df = _blank_hue(df, grey)
    codes, ids = pd.factorize(df[subject], sort=False)
    codes = codes.astype(np.int64)
    subj = subject_table(df, codes, L_threshold=L_threshold, hue_threshold=hue_threshold,
                         ita_boundaries=ita_boundaries)
    subj.insert(0, "subject", np.asarray(ids, dtype=object))
    notes = []
    if grey.any():
        notes.append(f"{int(grey.sum()):,} images are achromatic (greyscale or washed out: median C* of the skin "
                     "below 3); their h* and ITA are noise and are left out of the h* and ITA spread and flips "
                     "(their L* is kept)")
    if attributes:
        first = np.unique(codes, return_index=True)[1]
        for a in attributes:
            subj[a] = df[a].to_numpy(dtype=object)[first]
            varies = df.groupby(codes)[a].nunique(dropna=False).to_numpy() > 1
            if varies.any():
                notes.append(f"{int(varies.sum()):,} subjects have more than one value of {a}; each is grouped by "
                             "the value of its first image")
    spread, flips, tests = _group_tables(subj, attributes, max_k, schema, settings)
    n_single = int(np.unique(codes_all[single]).size)
    return SkinStability(subj, spread, flips, tests, coverage, len(data), int(used.sum()), len(subj), n_single,
                         {"L_threshold": float(L_threshold), "hue_threshold": float(hue_threshold)}, notes, settings)


# --------------------------------------------------------------------------- lighting


@dataclass
class LightingSensitivity(SettingsView):
    """How global lighting edits move the measured skin colour (docs/METHODS.md §2.7).

    Attributes
    ----------
    slopes : DataFrame
        One row per image, estimator and edit: ``slope_L`` and ``slope_hue`` (least squares, per unit of the
        edit, :data:`fairvision.skin.relight.UNITS`), ``n_steps``, and the unedited ``L0``, ``hue0`` and
        ``skin_colour``.
    sensitivity : DataFrame
        Index (estimator, edit, group): ``unit``, ``n_images`` (with an L* slope), ``n_images_hue`` (with an h*
        slope: achromatic images have none), the median slope of L* and of h* with bootstrap intervals over
        images (``slope_L``, ``slope_L_ci_low``, ... ``slope_hue_ci_high``), and ``too_small`` (a cell with
        fewer than ``min_subjects`` images: reported, not to be read as a group's answer).
    curves : DataFrame
        Index (estimator, edit, strength): median, 25th and 75th percentiles over images of the change in L*
        (``dL``) and in h* (``dhue``, wrapped) from the unedited image.
    copies : DataFrame
        Index (estimator, edit): the relit copies of an image as one subject's images: ``n_subjects``,
        ``median_sd_L`` / ``median_sd_hue`` / ``median_sd_ita`` with intervals, and ``flip_<category>`` shares.
    contrast : DataFrame
        Every unedited image: ``sample_id``, ``estimator``, ``L``, ``hue``, ``contrast``, ``L_rms``.
    correlations : DataFrame
        Index (estimator, measure): Spearman ``rho``, ``pvalue``, ``n`` of contrast against L* and h*.
    coverage : Coverage
    """

    slopes: pd.DataFrame
    sensitivity: pd.DataFrame
    curves: pd.DataFrame
    copies: pd.DataFrame
    contrast: pd.DataFrame
    correlations: pd.DataFrame
    coverage: Coverage
    n_images: int
    n_used: int
    estimators: tuple
    edits: tuple
    settings: AuditSettings = DEFAULTS
    notes: list = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        return self.sensitivity

    def quantities(self) -> dict[str, float]:
        """``--fail-if`` names: ``slope_L.<estimator>.<edit>`` and ``slope_hue.<estimator>.<edit>`` (median
        over images), ``max_abs_slope_L.<edit>`` / ``max_abs_slope_hue.<edit>`` (over estimators),
        ``median_sd_L`` / ``median_sd_hue`` / ``max_flip_share`` of the relit copies (over estimators, all edits
        pooled: the largest), ``n_images``."""
        q: dict[str, float] = {"n_images": float(self.n_used)}
        for (est, edit, group), row in self.sensitivity.iterrows():
            if group == ALL:
                q[f"slope_L.{est}.{edit}"] = float(row["slope_L"])
                q[f"slope_hue.{est}.{edit}"] = float(row["slope_hue"])
        for edit in self.edits:
            for m in ("L", "hue"):
                vals = [abs(v) for k, v in q.items() if k.startswith(f"slope_{m}.") and k.endswith(f".{edit}")]
                q[f"max_abs_slope_{m}.{edit}"] = float(np.nanmax(vals)) if vals and np.isfinite(vals).any() else np.nan
        pooled = self.copies.xs("all edits", level="edit") if len(self.copies) else self.copies
        for m in ("L", "hue", "ita"):
            col = pooled[f"median_sd_{m}"] if len(pooled) else pd.Series(dtype=float)
            q[f"median_sd_{m}"] = float(col.max()) if len(col) else np.nan
        flips = pooled[[f"flip_{c}" for c in FLIP_CATEGORIES]].to_numpy(dtype=float) if len(pooled) else np.array([])
        q["max_flip_share"] = float(np.nanmax(flips)) if flips.size and np.isfinite(flips).any() else np.nan
        return q


def _blank_achromatic_images(rows: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Every row of an (image, estimator) whose unedited measurement is achromatic gets NaN h* and ITA (its hue
    slope, hue curve, red/yellow and ITA flips are left out; L* is kept); and the number of such images."""
    rows = rows.reset_index(drop=True)
    base = rows["edit"].to_numpy() == "none"
    grey = base & achromatic_rows(rows)
    if not grey.any():
        return rows.copy(), 0
    keys = pd.MultiIndex.from_frame(rows[["sample_id", "estimator"]])
    hit = keys.isin(keys[grey])
    return _blank_hue(rows, hit), int(rows.loc[grey, "sample_id"].nunique())


def _slopes(rows: pd.DataFrame) -> pd.DataFrame:
    """Least-squares slopes of L* and of the wrapped change in h* against each edit's strength (in its unit),
    per image, estimator and edit; vectorised over the series with ``numpy.bincount``."""
    base = rows[rows["edit"] == "none"].set_index(["sample_id", "estimator"])[["L", "hue", "skin_colour"]]
    ed = rows[(rows["edit"] != "none") & rows["ok"].astype(bool)].copy()
    ed = ed.join(base.rename(columns={"L": "L0", "hue": "hue0", "skin_colour": "skin_colour0"}),
                 on=["sample_id", "estimator"], how="inner")
    ed = ed[np.isfinite(ed["L0"].to_numpy(dtype=float))]
    ed["x"] = ed["strength"] / ed["edit"].map(UNIT_SCALE)
    ed["dL"] = ed["L"] - ed["L0"]
    ed["dhue"] = (ed["hue"] - ed["hue0"] + 180.0) % 360.0 - 180.0
    codes, keys = pd.factorize(pd.MultiIndex.from_frame(ed[["sample_id", "estimator", "edit"]]))
    k = len(keys)
    n = np.bincount(codes, minlength=k).astype(float)
    x = ed["x"].to_numpy(dtype=float)
    xc = x - (np.bincount(codes, x, k) / n)[codes]
    sxx = np.bincount(codes, xc * xc, k)
    out = pd.DataFrame(index=keys)
    with np.errstate(invalid="ignore", divide="ignore"):
        for col, name in (("dL", "slope_L"), ("dhue", "slope_hue")):
            y = ed[col].to_numpy(dtype=float)
            out[name] = np.where(sxx > 0, np.bincount(codes, xc * y, k) / sxx, np.nan)
    out["n_steps"] = n.astype(np.int64)
    first = ed.groupby(codes, sort=True)[["L0", "hue0", "skin_colour0"]].first()
    out[["L0", "hue0", "skin_colour"]] = first.to_numpy()
    out.index.names = ["sample_id", "estimator", "edit"]
    return out.reset_index(), ed


def audit_lighting_sensitivity(rows: pd.DataFrame, images: pd.DataFrame, *, settings: AuditSettings | None = None,
                               L_threshold: float = L_THRESHOLD, hue_threshold: float = HUE_THRESHOLD,
                               ita_boundaries=None) -> LightingSensitivity:
    """Sensitivity of the measured skin colour to exposure, white balance and gamma (docs/METHODS.md §2.7).

    Parameters
    ----------
    rows : pandas.DataFrame
        :func:`fairvision.skin.relight.relight_images` rows: ``sample_id``, ``edit`` (``none`` for the unedited
        image), ``strength``, ``estimator``, ``L``, ``hue``, ``ita``, ``contrast``, ``L_rms``, ``ok``.
    images : pandas.DataFrame
        Its image table: ``sample_id``, ``ok``, ``reason`` (images without a mask are left out, with why).
    settings : AuditSettings, optional
        ``n_boot``, ``level``, ``seed`` (intervals of the medians over images), ``correction``, ``alpha``.
    L_threshold, hue_threshold, ita_boundaries
        Category thresholds of the groups and flips (docs/METHODS.md §1.4).

    Returns
    -------
    LightingSensitivity
    """
    settings = settings or DEFAULTS
    require_columns(rows, ["sample_id", "edit", "strength", "estimator", "L", "hue", "ita", "contrast", "ok"],
                    source="relit measurements")
    img_ok = images["ok"].astype(bool).to_numpy()
    coverage = audit_coverage(images.assign(**{_COVER: _COVER_VALUE}), img_ok, [_COVER], settings=settings,
                              step="skin mask of the unedited image", reasons=images["reason"].to_numpy(dtype=object))
    rows, n_grey = _blank_achromatic_images(rows)
    rows["skin_colour"] = tone_hue_category(rows["L"], rows["hue"], L_threshold=L_threshold,
                                            hue_threshold=hue_threshold)[2].astype(object)
    slopes, ed = _slopes(rows)
    estimators = tuple(dict.fromkeys(rows["estimator"]))
    edits = tuple(e for e in EDITS if e in set(rows["edit"]))
    sens = []
    for (est, edit), part in slopes.groupby(["estimator", "edit"], sort=False):
        cells = [ALL] + [c for c in TONE_HUE if (part["skin_colour"] == c).any()]
        codes = np.zeros(len(part), np.int64)
        groups = [np.arange(len(part))] + [np.flatnonzero(part["skin_colour"].to_numpy() == c) for c in cells[1:]]
        rows_g = np.concatenate(groups)
        codes = np.concatenate([np.full(g.size, j) for j, g in enumerate(groups)])
        tabs = {m: group_spread(part[f"slope_{m}"].to_numpy(dtype=float)[rows_g], codes, len(cells),
                                n_boot=settings.n_boot, level=settings.level, seed=settings.seed) for m in ("L", "hue")}
        for j, cell in enumerate(cells):
            rec = {"estimator": est, "edit": edit, "group": cell, "unit": UNITS[edit],
                   "n_images": int(tabs["L"].loc[j, "n_subjects"]),
                   "n_images_hue": int(tabs["hue"].loc[j, "n_subjects"])}
            for m in ("L", "hue"):
                t = tabs[m].loc[j]
                rec.update({f"slope_{m}": t["median"], f"slope_{m}_ci_low": t["median_ci_low"],
                            f"slope_{m}_ci_high": t["median_ci_high"]})
            rec["too_small"] = cell != ALL and rec["n_images"] < settings.min_subjects
            sens.append(rec)
    sensitivity = pd.DataFrame(sens).set_index(["estimator", "edit", "group"]) if sens else \
        pd.DataFrame(columns=["unit", "n_images", "slope_L", "slope_hue"])
    curves = ed.groupby(["estimator", "edit", "strength"], sort=True)[["dL", "dhue"]].quantile([0.25, 0.5, 0.75])
    curves = curves.unstack(level=-1)
    curves.columns = [f"{c}_{ {0.25: 'q25', 0.5: 'median', 0.75: 'q75'}[q]}" for c, q in curves.columns]
    copies = _copies_spread(rows, settings, L_threshold, hue_threshold, ita_boundaries)
    base = rows[(rows["edit"] == "none") & rows["ok"].astype(bool)]
    contrast = base[["sample_id", "estimator", "L", "hue", "contrast", "L_rms"]].reset_index(drop=True)
    corr = []
    for est, part in contrast.groupby("estimator", sort=False):
        for m in ("L", "hue"):
            hue = part[m].to_numpy(dtype=float)
            if m == "hue":
                hue = np.where(hue > 180.0, hue - 360.0, hue)  # skin hues wrap at red (0 degrees)
            r = rank_correlation(part["contrast"].to_numpy(dtype=float), hue)
            corr.append({"estimator": est, "measure": m, "rho": r.statistic, "pvalue": r.pvalue, "n": r.n})
    correlations = pd.DataFrame(corr, columns=["estimator", "measure", "rho", "pvalue", "n"])
    correlations["pvalue_adjusted"] = adjust_pvalues(correlations["pvalue"].to_numpy(dtype=float),
                                                     settings.correction) if len(correlations) else []
    notes = []
    if n_grey:
        notes.append(f"{n_grey:,} images are achromatic (greyscale or washed out: median C* of the unedited skin "
                     "below 3) with at least one estimator; their h* and ITA are noise, so their h* slopes, h* "
                     "curves and red/yellow and ITA flips are left out (their L* is kept)")
    failed = ~rows["ok"].astype(bool).to_numpy() & (rows["edit"].to_numpy() != "none")
    if failed.any():
        notes.append(f"{int(failed.sum()):,} relit copies (of {int(rows.loc[failed, 'sample_id'].nunique()):,} "
                     "images) could not be measured and are left out of their image's series; a slope needs two "
                     "measured strengths")
    return LightingSensitivity(slopes, sensitivity, curves, copies, contrast,
                               correlations.set_index(["estimator", "measure"]), coverage, len(images),
                               int(img_ok.sum()), estimators, edits, settings, notes)


def _copies_spread(rows: pd.DataFrame, settings: AuditSettings, L_threshold, hue_threshold, ita_boundaries):
    """The relit copies of each image as one subject's images: median per-subject SD and flip shares, per
    estimator, for every edit and for all edits pooled."""
    ident = rows["edit"].map(IDENTITY).to_numpy(dtype=float) == rows["strength"].to_numpy(dtype=float)
    ok = rows["ok"].astype(bool).to_numpy() & ~ident  # the unedited image once (its "none" row), not once per edit
    out = []
    for est, part in rows[ok].groupby("estimator", sort=False):
        for edit in ["all edits", *[e for e in EDITS if (part["edit"] == e).any()]]:
            sub = part if edit == "all edits" else part[part["edit"].isin([edit, "none"])]
            codes = pd.factorize(sub["sample_id"])[0].astype(np.int64)
            subj = subject_table(sub.reset_index(drop=True), codes, L_threshold=L_threshold,
                                 hue_threshold=hue_threshold, ita_boundaries=ita_boundaries)
            subj = subj[subj["n_images"] >= 2]
            rec = {"estimator": est, "edit": edit, "n_subjects": len(subj)}
            zero = np.zeros(len(subj), np.int64)
            for m in SPREAD_QUANTITIES:
                t = group_spread(subj[f"sd_{m}"].to_numpy(dtype=float), zero, 1, n_boot=settings.n_boot,
                                 level=settings.level, seed=settings.seed).iloc[0]
                rec.update({f"median_sd_{m}": t["median"], f"median_sd_{m}_ci_low": t["median_ci_low"],
                            f"median_sd_{m}_ci_high": t["median_ci_high"]})
            for cat in FLIP_CATEGORIES:
                f = _flip_values(subj, cat)
                rec[f"flip_{cat}"] = float(np.mean(f[np.isfinite(f)])) if np.isfinite(f).any() else np.nan
            out.append(rec)
    if not out:
        return pd.DataFrame(columns=["n_subjects"], index=pd.MultiIndex.from_tuples([], names=["estimator", "edit"]))
    return pd.DataFrame(out).set_index(["estimator", "edit"])
