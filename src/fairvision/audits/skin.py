"""Dataset-level apparent skin colour (Thong et al., ICCV 2023, Tables 1-2; docs/METHODS.md §2.4).

Given a table of per-image measurements (columns ``L`` and ``hue``, as written
by :func:`fairvision.skin.measure` / the batch CLI), this module builds

- the 2 x 2 light/dark x red/yellow table in percent (Thong Table 1) with a
  confidence interval for every cell percentage (Wilson score interval, or a
  cluster bootstrap over subjects when a subject column is given),
- 20-bin histograms of L* and h*,
- optionally the same cells per group of another attribute (or intersection),
  with a chi-square test of homogeneity across groups and groups too small to
  judge flagged,
- and the comparison of two image sets (Thong Table 2, e.g. training data vs a
  generator's outputs) with a chi-square test of homogeneity.

The chi-square tests are :func:`fairvision.stats.chisquare.chi2_test`
(asymptotic, docs/METHODS.md §4.1); the subject bootstrap is
:func:`fairvision.stats.resample.cluster_bootstrap` (docs/METHODS.md §4.2).

Rows whose measurement failed (``ok`` false or NaN L*/h*) are excluded and
counted.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings
from fairvision.errors import ParameterError
from fairvision.io.validate import require_columns
from fairvision.skin.batch_tables import failure_reasons
from fairvision.skin.categories import (
    HUE_THRESHOLD, HUES, ITA_CLASSES, L_THRESHOLD, ST_CLASSES, TONE_HUE, TONES, check_thresholds, parse_ita_boundaries,
    achromatic_rows, st_class, tone_hue_category,
)
from fairvision.stats.chisquare import ChiSquareResult, chi2_test
from fairvision.stats.proportions import wilson_interval
from fairvision.stats.resample import cluster_bootstrap

__all__ = ["DEFAULTS", "SkinDistribution", "SkinComparison", "audit_skin_distribution", "audit_skin_comparison",
           "chi2_homogeneity"]

#: the settings of the skin audits when given none: 2000 bootstrap replicates for the subject bootstrap
DEFAULTS = AuditSettings(n_boot=2000)

CELL_INDEX = pd.MultiIndex.from_product([list(HUES), list(TONES)], names=["skin_hue", "skin_tone"])


def chi2_homogeneity(counts: np.ndarray, columns=None) -> ChiSquareResult:
    """Chi-square test of homogeneity of the rows of a (groups x cells) count table.

    Rows and columns that are zero throughout are dropped (a column's expected
    count would be 0); ``dropped`` lists the dropped columns. Pearson's X^2
    without continuity correction and with the asymptotic p-value
    (:func:`fairvision.stats.chisquare.chi2_test` with ``exact="never"``);
    ``reliable`` is False when Cochran's rule is violated. With fewer than two
    non-empty rows or columns there is nothing to test: statistic and p-value
    are NaN.
    """
    counts = np.asarray(counts, dtype=np.float64)
    cols = list(columns) if columns is not None else list(range(counts.shape[1]))
    keep_c = counts.sum(axis=0) > 0
    keep_r = counts.sum(axis=1) > 0
    t = counts[np.ix_(keep_r, keep_c)]
    dropped = tuple(c for c, k in zip(cols, keep_c) if not k)
    if t.shape[0] < 2 or t.shape[1] < 2:
        return ChiSquareResult(float("nan"), float("nan"), df=0, n=int(counts.sum()), dropped=dropped)
    res = chi2_test(t, exact="never", warn=False)
    return dataclasses.replace(res, dropped=dropped)


@dataclass
class SkinDistribution:
    """Skin colour distribution of one image set.

    Attributes
    ----------
    name : str
    n_images, n_measured, n_failed : int
    cells : DataFrame
        Index (skin_hue, skin_tone); columns ``count``, ``percent``,
        ``ci_low``, ``ci_high`` (percent).
    table : DataFrame
        Thong Table 1 layout: rows red / yellow / Total, columns light / dark /
        Total, in percent.
    histograms : DataFrame
        Index (variable, bin); columns ``left``, ``right``, ``count``,
        ``percent``. Hue bins use the signed angle (-180, 180].
    points : DataFrame
        ``L`` and signed ``hue`` of the measured images (for a scatter plot).
    by_group : DataFrame or None
        Index (group..., skin_colour); ``count``, ``n_group``, ``percent``,
        ``ci_low``, ``ci_high``, ``too_small``.
    group_test : ChiSquareResult or None
        Homogeneity of the four skin colour cells across groups.
    thresholds : dict
    ci_method : str
    notes : list of str
    flag_counts : Series
        How many measured images carry each quality flag.
    ita_classes : DataFrame or None
        With ``ita_boundaries``: index ``st_class`` (ST1 ... ST6); ``ita_class``, ``range``, ``count``,
        ``percent``, ``ci_low``, ``ci_high`` (Wilson, percent) of the images with a finite ITA.
    """

    name: str
    n_images: int
    n_measured: int
    n_failed: int
    cells: pd.DataFrame
    table: pd.DataFrame
    histograms: pd.DataFrame
    points: pd.DataFrame
    thresholds: dict
    ci_method: str
    by_group: pd.DataFrame | None = None
    group_test: ChiSquareResult | None = None
    notes: list = field(default_factory=list)
    flag_counts: pd.Series = field(default_factory=lambda: pd.Series(dtype="int64"))
    ita_classes: pd.DataFrame | None = None

    def to_frame(self) -> pd.DataFrame:
        """The four cells with counts, percentages and CIs."""
        return self.cells


@dataclass
class SkinComparison:
    """Two image sets compared cell by cell (Thong Table 2).

    ``cells`` has index (set, skin_hue, skin_tone); ``difference`` the
    percentage-point difference (second minus first) per cell; ``test`` the
    chi-square test of homogeneity of the two 2 x 2 distributions (3 df).
    """

    names: tuple
    first: SkinDistribution
    second: SkinDistribution
    cells: pd.DataFrame
    difference: pd.Series
    test: ChiSquareResult
    notes: list = field(default_factory=list)

    def to_frame(self) -> pd.DataFrame:
        return self.cells


def _valid(df: pd.DataFrame, L: str, hue: str, name: str):
    require_columns(df, (L, hue), source=name, why=" (skin colour analysis needs it)")
    Lv = pd.to_numeric(df[L], errors="coerce").to_numpy(dtype=np.float64)
    hv = pd.to_numeric(df[hue], errors="coerce").to_numpy(dtype=np.float64)
    ok = np.isfinite(Lv) & np.isfinite(hv) & ~achromatic_rows(df)  # a greyscale photo's hue is noise (§1.4)
    if "ok" in df.columns:
        ok &= df["ok"].fillna(False).to_numpy(dtype=bool)
    return ok, Lv, np.where(hv > 180.0, hv - 360.0, hv)


def _cell_counts(Lv, hv, L_threshold, hue_threshold, weights=None) -> np.ndarray:
    """Counts in CELL_INDEX order (red-light, red-dark, yellow-light, yellow-dark)."""
    yellow = hv >= hue_threshold
    dark = Lv < L_threshold
    code = yellow.astype(int) * 2 + dark.astype(int)
    return np.bincount(code, weights=weights, minlength=4)


def _hist(Lv, hv, L_edges, h_edges) -> pd.DataFrame:
    rows = []
    for var, x, edges in (("L", Lv, L_edges), ("hue", hv, h_edges)):
        c, _ = np.histogram(x, bins=edges)
        tot = max(int(c.sum()), 1)
        for i in range(len(c)):
            rows.append({"variable": var, "bin": i, "left": edges[i], "right": edges[i + 1], "count": int(c[i]), "percent": 100.0 * c[i] / tot})
    return pd.DataFrame(rows).set_index(["variable", "bin"])


def _edges(hv_all, bins):
    L_edges = np.linspace(0.0, 100.0, bins + 1)
    lo = min(0.0, float(np.floor(np.min(hv_all)))) if hv_all.size else 0.0
    hi = max(90.0, float(np.ceil(np.max(hv_all)))) if hv_all.size else 90.0
    return L_edges, np.linspace(max(lo, -180.0), min(hi, 180.0), bins + 1)


def _cells_frame(counts, level, boot=None) -> pd.DataFrame:
    n = counts.sum()
    if boot is None:
        lo, hi = wilson_interval(counts, np.full(4, n), level)
    else:
        lo, hi = boot
    return pd.DataFrame({"count": counts.astype(np.int64), "percent": 100.0 * counts / n if n else np.full(4, np.nan),
                         "ci_low": 100.0 * lo, "ci_high": 100.0 * hi}, index=CELL_INDEX)


def _table1(counts) -> pd.DataFrame:
    n = counts.sum()
    pct = (100.0 * counts / n if n else np.full(4, np.nan)).reshape(2, 2)
    t = pd.DataFrame(pct, index=pd.Index(list(HUES), name="skin_hue"), columns=pd.Index(list(TONES), name="skin_tone"))
    t["Total"] = t.sum(axis=1)
    t.loc["Total"] = t.sum(axis=0)
    return t


def _cluster_boot(Lv, hv, subj, L_threshold, hue_threshold, level, n_boot, seed):
    """Percentile CIs of the four cell shares, resampling subjects (docs/METHODS.md §4.2)."""
    codes, uniq = pd.factorize(pd.Series(subj))
    code = (hv >= hue_threshold).astype(int) * 2 + (Lv < L_threshold).astype(int)  # CELL_INDEX order
    per_subject = np.zeros((len(uniq), 4))
    np.add.at(per_subject, (codes, code), 1.0)  # images of each subject in each cell

    def shares(weights):  # (B, n_subjects) draw counts -> (B, 4) cell shares
        c = weights @ per_subject
        return c / c.sum(axis=1, keepdims=True)

    res = cluster_bootstrap(shares, codes, n_boot=n_boot, level=level, seed=seed)
    return res.ci_low, res.ci_high


def audit_skin_distribution(data: pd.DataFrame, *, L: str = "L", hue: str = "hue", by: str | list[str] | None = None,
                            subject: str | None = None, L_threshold: float = L_THRESHOLD,
                            hue_threshold: float = HUE_THRESHOLD, bins: int = 20, min_group: int = 10,
                            name: str = "dataset", settings: AuditSettings | None = None, ita_boundaries=None,
                            _edges_override=None) -> SkinDistribution:
    """Skin colour distribution of one image set (Thong Table 1 and histograms).

    Parameters
    ----------
    data : DataFrame
        One row per image with ``L`` and ``hue`` (degrees) columns, and
        optionally ``ok`` and ``flags`` (as written by ``SkinMeasurement.to_dict``).
    by : str or list of str, optional
        Attribute column(s) to break the cells down by (a list gives
        intersections).
    subject : str, optional
        Subject column. When subjects have several images, cell CIs come from
        a cluster bootstrap over subjects (``settings.n_boot`` replicates)
        instead of the Wilson interval.
    L_threshold, hue_threshold : float
        Light if L* >= 60, yellow if h* >= 55 deg (docs/METHODS.md §1.4; checked: L* within 0..100, h* within
        -180..180).
    ita_boundaries : str, sequence or ItaBoundaries, optional
        Also count the ITA classes ST1 ... ST6 (column ``ita``) with these boundaries (``chardon``, ``paper``
        or five numbers; :func:`fairvision.skin.categories.parse_ita_boundaries`), as ``ita_classes``; the
        boundaries are added to ``thresholds``. None (default): no ITA table.
    bins : int
        Histogram bins (20).
    min_group : int
        Groups with fewer measured images are flagged ``too_small``.
    settings : AuditSettings, optional
        Uses ``level`` (of every interval), ``n_boot`` and ``seed`` (of the
        subject bootstrap); default :data:`DEFAULTS` (2000 replicates).
    """
    settings = settings or DEFAULTS
    level = settings.level
    L_threshold, hue_threshold = check_thresholds(L_threshold, hue_threshold)
    boundaries = parse_ita_boundaries(ita_boundaries) if ita_boundaries is not None else None
    if bins < 1:
        raise ParameterError("bins", f"must be positive, not {bins}")
    ok, Lv, hv = _valid(data, L, hue, name)
    n_images = int(len(data))
    Lm, hm = Lv[ok], hv[ok]
    counts = _cell_counts(Lm, hm, L_threshold, hue_threshold)
    notes = []
    ci_method = "wilson"
    boot = None
    if subject is not None:
        require_columns(data, [subject], source=name, what="subject column")
        subj = data[subject].to_numpy()[ok]
        if len(pd.unique(subj)) < len(subj) and len(subj):
            ci_method = "cluster bootstrap over subjects"
            boot = _cluster_boot(Lm, hm, subj, L_threshold, hue_threshold, level, settings.n_boot, settings.seed)
            notes.append("Several images per subject: cell CIs resample subjects (cluster bootstrap); the chi-square "
                         "tests still treat images as independent, so their p-values are optimistic.")
    cells = _cells_frame(counts, level, boot)
    L_edges, h_edges = _edges_override or _edges(hm, bins)
    hist = _hist(Lm, hm, L_edges, h_edges)
    n_failed = n_images - int(ok.sum())
    if n_failed:
        notes.append(f"{n_failed} of {n_images} images are left out: no skin colour measurement, or no hue to "
                     f"place them in a cell{_why_left_out(data, ok)}.")
    flag_counts = pd.Series(dtype="int64")
    if "flags" in data.columns:
        fl = data.loc[ok, "flags"].fillna("").astype(str)
        flag_counts = fl.str.split(";").explode().loc[lambda s: s != ""].value_counts().astype("int64")
    by_group, group_test = None, None
    if by is not None:
        by_group, group_test, small = _by_group(data[ok], Lm, hm, [by] if isinstance(by, str) else list(by),
                                                L_threshold, hue_threshold, level, min_group, name)
        if small:
            notes.append(f"Groups with fewer than {min_group} measured images are too small to judge: {', '.join(small)}.")
    points = pd.DataFrame({"L": Lm, "hue": hm})
    thresholds = {"L": L_threshold, "hue": hue_threshold}
    ita_table = None
    if boundaries is not None:
        require_columns(data, ["ita"], source=name, why=" for the ITA classes")
        ita_table = _ita_classes(data["ita"], ok, boundaries, level)
        thresholds["ita_boundaries"] = boundaries.describe()
    return SkinDistribution(name=name, n_images=n_images, n_measured=int(ok.sum()), n_failed=n_failed, cells=cells,
                            table=_table1(counts), histograms=hist, points=points,
                            thresholds=thresholds, ci_method=ci_method,
                            by_group=by_group, group_test=group_test, notes=notes, flag_counts=flag_counts,
                            ita_classes=ita_table)


def _ita_classes(ita, ok, boundaries, level) -> pd.DataFrame:
    """Counts of ST1 ... ST6 among measured rows with a finite ITA, with Wilson CIs in percent."""
    x = pd.to_numeric(ita, errors="coerce").to_numpy(dtype=np.float64)[ok]
    x = x[np.isfinite(x)]
    codes = st_class(x, boundaries).codes
    counts = np.bincount(codes[codes >= 0], minlength=len(ST_CLASSES)).astype(np.int64)
    n = int(counts.sum())
    lo, hi = wilson_interval(counts, np.full(len(counts), n), level)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = 100.0 * counts / n if n else np.full(len(counts), np.nan)
    return pd.DataFrame({"ita_class": list(ITA_CLASSES), "range": boundaries.ranges(), "count": counts,
                         "percent": pct, "ci_low": 100.0 * lo, "ci_high": 100.0 * hi},
                        index=pd.Index(list(ST_CLASSES), name="st_class"))


def _why_left_out(data: pd.DataFrame, ok: np.ndarray) -> str:
    """`` (no face found: 2, unreadable image: 1)`` for a measurement table with flags; empty otherwise."""
    if "flags" not in data.columns:
        return ""
    why = pd.Series(failure_reasons(data.assign(ok=ok))[~ok]).value_counts()
    return " (" + ", ".join(f"{r}: {int(n):,}" for r, n in why.items()) + ")" if len(why) else ""


def _by_group(sub, Lm, hm, by, L_threshold, hue_threshold, level, min_group, name):
    require_columns(sub, by, source=name, why=" to group by")
    _, _, comb = tone_hue_category(Lm, hm, L_threshold=L_threshold, hue_threshold=hue_threshold)
    keys = [sub[c] if isinstance(sub[c].dtype, pd.CategoricalDtype) else sub[c].astype("category") for c in by]
    tab = pd.crosstab([k.reset_index(drop=True) for k in keys], pd.Series(comb, name="skin_colour"), dropna=False)
    tab = tab.reindex(columns=list(TONE_HUE), fill_value=0)
    # keep every declared category (and intersection), even when empty
    full = pd.MultiIndex.from_product([list(k.cat.categories) for k in keys], names=by) if len(by) > 1 else \
        pd.Index(list(keys[0].cat.categories), name=by[0])
    tab = tab.reindex(full, fill_value=0)
    n_group = tab.sum(axis=1)
    test = chi2_homogeneity(tab.to_numpy()[n_group.to_numpy() >= min_group], columns=TONE_HUE)
    long = tab.stack().rename("count").to_frame()
    long["n_group"] = np.repeat(n_group.to_numpy(), len(TONE_HUE))
    lo, hi = wilson_interval(long["count"].to_numpy(), long["n_group"].to_numpy(), level)
    with np.errstate(invalid="ignore", divide="ignore"):
        long["percent"] = 100.0 * long["count"] / long["n_group"].where(long["n_group"] > 0)
    long["ci_low"], long["ci_high"] = 100.0 * lo, 100.0 * hi
    long["too_small"] = long["n_group"] < min_group
    small = [" × ".join(map(str, g)) if isinstance(g, tuple) else str(g) for g in n_group.index[n_group < min_group]]
    return long, test, small


def audit_skin_comparison(first: pd.DataFrame, second: pd.DataFrame, *, names: tuple[str, str] = ("first", "second"),
                          L: str = "L", hue: str = "hue", L_threshold: float = L_THRESHOLD,
                          hue_threshold: float = HUE_THRESHOLD, bins: int = 20, subject: str | None = None,
                          settings: AuditSettings | None = None, ita_boundaries=None) -> SkinComparison:
    """Compare the skin colour distributions of two image sets (Thong Table 2).

    The test is Pearson's chi-square test of homogeneity on the 2 x 4 table
    (sets x light/dark-red/yellow cells; 3 degrees of freedom, fewer if a cell
    is empty in both sets). Histograms of both sets share bin edges. Each set's
    distribution is :func:`audit_skin_distribution` with the same options
    (``settings``: its ``level``, ``n_boot`` and ``seed``; default :data:`DEFAULTS`).
    """
    if names[0] == names[1]:
        raise ParameterError("names", "must be two different names")
    _, _, h1 = _valid(first, L, hue, names[0])
    _, _, h2 = _valid(second, L, hue, names[1])
    pooled = np.concatenate([h1[np.isfinite(h1)], h2[np.isfinite(h2)]])
    edges = _edges(pooled, bins)
    kw = dict(L=L, hue=hue, L_threshold=L_threshold, hue_threshold=hue_threshold, bins=bins, subject=subject,
              settings=settings, ita_boundaries=ita_boundaries, _edges_override=edges)
    d1 = audit_skin_distribution(first, name=names[0], **kw)
    d2 = audit_skin_distribution(second, name=names[1], **kw)
    cells = pd.concat({names[0]: d1.cells, names[1]: d2.cells}, names=["set"])
    test = chi2_homogeneity(np.vstack([d1.cells["count"].to_numpy(), d2.cells["count"].to_numpy()]),
                            columns=[f"{h}-{t}" for h, t in CELL_INDEX])
    diff = (d2.cells["percent"] - d1.cells["percent"]).rename("difference_pp")
    notes = [f"[{names[0]}] {n}" for n in d1.notes] + [f"[{names[1]}] {n}" for n in d2.notes]
    if not test.reliable and np.isfinite(test.statistic):
        notes.append(f"Smallest expected count {test.min_expected:.1f}: expected counts fail Cochran's rule, so the "
                     "chi-square approximation is unreliable.")
    return SkinComparison(names=tuple(names), first=d1, second=d2, cells=cells, difference=diff, test=test, notes=notes)
