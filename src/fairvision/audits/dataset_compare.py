"""Several datasets side by side: who is in each (docs/METHODS.md §5.4).

FHIBE compares the distribution of pronoun, age and apparent skin colour of its subjects with other datasets
(Extended Data Fig. 2). For every attribute this audit tabulates each dataset's shares over the union of the
categories seen in any dataset (a category one dataset lacks is a share of 0), with Wilson intervals
(docs/METHODS.md §4.4); tests whether the datasets share one distribution (the chi-square test of homogeneity,
docs/METHODS.md §4.1, corrected over the attributes, §4.3); compares every pair of datasets (Cramér's V, total
variation distance, the largest difference in share, with the pair's own test corrected over all pairs and
attributes); and scores each dataset's representation (NSD with a cluster-bootstrap interval, §5.1, §4.2).
Subjects are counted when a subject column exists (a person with several images counts once per value), images
otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import FairvisionError, ParameterError
from fairvision.groups import memberships
from fairvision.io.tables import SUBJECT_ID
from fairvision.io.validate import require_columns
from fairvision.schema import Schema
from fairvision.stats.chisquare import chi2_test
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.proportions import wilson_interval
from fairvision.stats.representation import BOUNDS, nsd, representation_summary
from fairvision.stats.resample import bias_corrected_ci, bootstrap_counts

TEST_COLUMNS = ["statistic", "df", "pvalue", "method", "min_expected", "cramers_v"]


@dataclass
class DatasetComparison(SettingsView):
    """Result of :func:`audit_dataset_compare`.

    ``counts[attribute]``: datasets x categories (units counted: ``unit``). ``shares[attribute]``: per
    ``(dataset, group)`` the count ``n``, the dataset's ``total``, ``share`` and its Wilson ``ci_low`` /
    ``ci_high``. ``tests``: per attribute the chi-square test of homogeneity (``statistic``, ``df``,
    ``pvalue``, ``method``, ``min_expected``, ``cramers_v``, ``pvalue_adjusted``, ``differs``). ``pairwise``: per
    attribute and pair of datasets ``cramers_v``, ``tvd``, ``max_share_diff_pp`` and ``largest_diff_group``, with
    the pair's test. ``representation``: per dataset and attribute NSD (with its interval), evenness, effective
    number of groups, the empty categories and ``too_small`` (fewer than ``min_subjects`` units per category).
    """

    datasets: list[str]
    attributes: list[str]
    unit: str
    sizes: pd.DataFrame
    counts: dict[str, pd.DataFrame]
    shares: dict[str, pd.DataFrame]
    tests: pd.DataFrame
    pairwise: pd.DataFrame
    representation: pd.DataFrame
    settings: AuditSettings
    warnings: list[str] = field(default_factory=list)
    gates: list[dict] = field(default_factory=list)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` (docs/METHODS.md §5.4): ``min_pvalue`` (smallest adjusted p-value of the
        tests of homogeneity) and ``pvalue.<attribute>``; ``cramers_v`` (largest over the attributes) and
        ``cramers_v.<attribute>``; ``max_share_diff_pp`` (largest difference in share between two datasets, in
        percentage points) and ``max_share_diff_pp.<attribute>``; ``nsd.<dataset>.<attribute>`` and ``max_nsd`` (over the
        datasets large enough to judge);
        ``n_datasets``."""
        q: dict[str, float] = {"n_datasets": float(len(self.datasets))}
        for a, row in self.tests.iterrows():
            q[f"pvalue.{a}"] = float(row["pvalue_adjusted"])
            q[f"cramers_v.{a}"] = float(row["cramers_v"])
        q["min_pvalue"] = float(self.tests["pvalue_adjusted"].min())
        q["cramers_v"] = float(self.tests["cramers_v"].max())
        by_attr = self.pairwise.groupby(level="attribute", sort=False)["max_share_diff_pp"].max()
        for a, v in by_attr.items():
            q[f"max_share_diff_pp.{a}"] = float(v)
        q["max_share_diff_pp"] = float(by_attr.max()) if len(by_attr) else np.nan
        for (d, a), row in self.representation.iterrows():
            q[f"nsd.{d}.{a}"] = float(row["nsd"])
        judged = self.representation.loc[~self.representation["too_small"].to_numpy(bool), "nsd"].dropna()
        q["max_nsd"] = float(judged.max()) if len(judged) else np.nan  # over the datasets large enough to judge
        return q

    def to_frame(self) -> pd.DataFrame:
        """Every attribute's shares in one long table (``attribute``, ``dataset``, ``group``, ...)."""
        return pd.concat([t.reset_index().assign(attribute=a) for a, t in self.shares.items()], ignore_index=True)


def audit_dataset_compare(
    data: pd.DataFrame,
    dataset_col: str,
    attributes: Sequence[str],
    *,
    schema: Schema | None = None,
    subject_col: str | None = None,
    datasets: Sequence[str] | None = None,
    settings: AuditSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> DatasetComparison:
    """Compare the attribute distributions of several datasets (docs/METHODS.md §5.4).

    Parameters
    ----------
    data : pandas.DataFrame
        The rows of every dataset, one per image, with the attribute columns and ``dataset_col``.
    dataset_col : str
        Column naming each row's dataset.
    attributes : sequence of str
        Attributes to compare (every dataset must have them).
    schema : Schema, optional
        Declared categories, bins, multi-valued attributes; undeclared attributes use the union of the values
        seen in any dataset.
    subject_col : str, optional
        Column identifying the person within a dataset (default ``subject_id`` when present): subjects are
        counted instead of images and resampled for the intervals.
    datasets : sequence of str, optional
        The datasets in the order to show them (default: order of first appearance).
    settings : AuditSettings, optional
        ``correction`` and ``alpha`` (the tests), ``n_boot``, ``level``, ``seed`` (the NSD intervals and the
        Monte Carlo test used when expected counts are small), ``min_subjects`` (a dataset with fewer units than
        ``min_subjects`` per category of an attribute is too small to judge its balance).
    progress : callable, optional
        Called with a short message at each step.

    Returns
    -------
    DatasetComparison
    """
    settings = settings or DEFAULT_SETTINGS
    source = data.attrs.get("source", "table")
    attributes = list(attributes)
    if not attributes:
        raise ParameterError("attributes", "is empty: give at least one attribute")
    require_columns(data, [dataset_col], source=source, what="dataset column")
    say = progress or (lambda m: None)
    if data[dataset_col].isna().any():
        raise FairvisionError(f"{source}: row {int(np.flatnonzero(data[dataset_col].isna().to_numpy())[0]) + 1}: "
                              f"empty {dataset_col!r}")
    names = [str(d) for d in (datasets if datasets is not None else pd.unique(data[dataset_col].astype(str)))]
    ds = pd.Categorical(data[dataset_col].astype(str), categories=names).codes.astype(np.int64)
    if (ds < 0).any():
        raise FairvisionError(f"{source}: dataset {data[dataset_col].iloc[int(np.flatnonzero(ds < 0)[0])]!r} is not "
                              "among the datasets given")
    if len(names) < 2:
        raise FairvisionError(f"{source}: only one dataset ({names[0]!r}); give two or more to compare")
    if subject_col is None and SUBJECT_ID in data.columns:
        subject_col = SUBJECT_ID
    if subject_col is not None:
        require_columns(data, [subject_col], source=source, what="subject column")
        if data[subject_col].isna().any():
            row = int(np.flatnonzero(data[subject_col].isna().to_numpy())[0]) + 1
            raise FairvisionError(f"{source}: row {row}: empty {subject_col!r}")
        unit_of_row = pd.factorize(pd.Series(list(zip(ds, data[subject_col].astype(str)))), sort=False)[0]
    else:
        unit_of_row = np.arange(len(data), dtype=np.int64)
    unit = "subjects" if subject_col is not None else "images"
    sizes = pd.DataFrame({"images": np.bincount(ds, minlength=len(names))}, index=pd.Index(names, name="dataset"))
    if subject_col is not None:
        sizes["subjects"] = np.bincount(ds[np.unique(unit_of_row, return_index=True)[1]], minlength=len(names))
    schema = schema or Schema()
    counts, shares, tests, pairs, reps, warnings = {}, {}, [], [], [], []
    for m in memberships(data, attributes, schema, source=source):
        say(f"comparing {m.name}")
        entries = _unique_entries(unit_of_row[m.rows], ds[m.rows], m.codes, m.n_groups)
        table = np.bincount(entries[1] * m.n_groups + entries[2], minlength=len(names) * m.n_groups)
        ct = pd.DataFrame(table.reshape(len(names), m.n_groups), index=pd.Index(names, name="dataset"),
                          columns=pd.Index(list(m.categories), name=m.name))
        counts[m.name] = ct
        shares[m.name] = _share_table(ct, settings.level)
        empty = [d for d in names if ct.loc[d].sum() == 0]
        if empty:
            warnings.append(f"{m.name}: no {unit} with a value in {', '.join(empty)}; left out of its tests.")
        # units with no value of the attribute (--missing drop) are left out of its shares: say how many
        unseen = sizes[unit].to_numpy() - np.bincount(entries[1][np.unique(entries[0], return_index=True)[1]],
                                                      minlength=len(names))
        some = {d: int(k) for d, k in zip(names, unseen) if k and d not in empty}
        if some:
            warnings.append(f"{m.name}: {sum(some.values()):,} {unit} without a value left out of its shares and tests "
                            f"({', '.join(f'{d}: {k:,}' for d, k in some.items())}).")
        tests.append({"attribute": m.name, **_test_row(ct, settings)})
        pairs += _pairwise(ct, settings)
        reps += _representation(ct, entries, settings)
    tests_df = pd.DataFrame(tests).set_index("attribute")
    tests_df["pvalue_adjusted"] = adjust_pvalues(tests_df["pvalue"].to_numpy(dtype=float), settings.correction)
    tests_df["differs"] = tests_df["pvalue_adjusted"] < settings.alpha
    pair_df = pd.DataFrame(pairs).set_index(["attribute", "dataset_a", "dataset_b"])
    pair_df["pvalue_adjusted"] = adjust_pvalues(pair_df["pvalue"].to_numpy(dtype=float), settings.correction)
    pair_df["differs"] = pair_df["pvalue_adjusted"] < settings.alpha
    rep_df = pd.DataFrame(reps).set_index(["dataset", "attribute"])
    for (d, a), row in rep_df[rep_df["too_small"].to_numpy(bool) & (rep_df["n"] > 0).to_numpy()].iterrows():
        warnings.append(f"{a}: {d} has {int(row['n']):,} {unit} with a value, fewer than {settings.min_subjects} per "
                        f"category ({len(counts[a].columns)}); its balance and shares are too uncertain to judge.")
    for a, row in tests_df.iterrows():
        if bool(row["small_expected"]):
            warnings.append(f"{a}: expected counts fail Cochran's rule (min {row['min_expected']:.2g}); the p-value "
                            f"is {'a Monte Carlo' if row['method'] == 'monte-carlo' else 'an exact'} test's.")
    return DatasetComparison(names, [m for m in counts], unit, sizes, counts, shares, tests_df, pair_df, rep_df,
                             settings, warnings)


def _unique_entries(units: np.ndarray, ds: np.ndarray, codes: np.ndarray, n_groups: int):
    """``(unit, dataset, cell)`` memberships with each unit counted once per cell (a subject with three images of
    one value is one member of that value)."""
    key = units.astype(np.int64) * n_groups + codes
    _, first = np.unique(key, return_index=True)
    first = np.sort(first)
    return units[first], ds[first], codes[first]


def _share_table(ct: pd.DataFrame, level: float) -> pd.DataFrame:
    """Long table of the shares of each dataset (of its members with a value) with Wilson intervals."""
    n = ct.to_numpy(dtype=float)
    total = n.sum(axis=1, keepdims=True) * np.ones_like(n)
    lo, hi = wilson_interval(n, total, level)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(total > 0, n / np.where(total > 0, total, 1), np.nan)
    idx = pd.MultiIndex.from_product([ct.index, ct.columns], names=["dataset", "group"])
    return pd.DataFrame({"n": n.ravel().astype(np.int64), "total": total.ravel().astype(np.int64),
                         "share": share.ravel(), "ci_low": lo.ravel(), "ci_high": hi.ravel()}, index=idx)


def _test_row(ct: pd.DataFrame, settings: AuditSettings) -> dict:
    """The chi-square test of homogeneity of one datasets x categories table (docs/METHODS.md §4.1): asymptotic,
    or the exact / Monte Carlo p-value when Cochran's rule fails."""
    res = chi2_test(ct, exact="auto", seed=settings.seed, warn=False)
    if res.df == 0:
        return {"statistic": np.nan, "df": 0, "pvalue": np.nan, "method": "not testable", "min_expected": np.nan,
                "cramers_v": np.nan, "small_expected": False}
    return {"statistic": res.statistic, "df": res.df, "pvalue": res.pvalue, "method": res.method,
            "min_expected": res.min_expected, "cramers_v": res.cramers_v, "small_expected": res.small_expected}


def _pairwise(ct: pd.DataFrame, settings: AuditSettings) -> list[dict]:
    """Every pair of datasets: Cramér's V and the test of their 2 x categories table, total variation distance of
    their shares and the category whose share differs most."""
    out = []
    n = ct.to_numpy(dtype=float)
    tot = n.sum(axis=1)
    for i, j in zip(*np.triu_indices(len(ct), 1)):  # every pair of datasets
        row = {"attribute": ct.columns.name, "dataset_a": ct.index[i], "dataset_b": ct.index[j]}
        if tot[i] == 0 or tot[j] == 0:
            out.append({**row, "cramers_v": np.nan, "tvd": np.nan, "max_share_diff_pp": np.nan,
                        "largest_diff_group": "", "statistic": np.nan, "pvalue": np.nan, "method": "not testable"})
            continue
        diff = n[i] / tot[i] - n[j] / tot[j]
        k = int(np.argmax(np.abs(diff)))
        t = _test_row(ct.iloc[[i, j]], settings)
        out.append({**row, "cramers_v": t["cramers_v"], "tvd": 0.5 * float(np.abs(diff).sum()),
                    "max_share_diff_pp": 100 * abs(float(diff[k])), "largest_diff_group": str(ct.columns[k]),
                    "statistic": t["statistic"], "pvalue": t["pvalue"], "method": t["method"]})
    return out


def _representation(ct: pd.DataFrame, entries, settings: AuditSettings) -> list[dict]:
    """Per dataset: the representation summary of its counts over the union of categories, NSD with a
    bias-corrected cluster-bootstrap interval (docs/METHODS.md §5.1, §4.2)."""
    units, ds, codes = entries
    g = ct.shape[1]
    out = []
    for d, name in enumerate(ct.index):
        c = ct.iloc[d].to_numpy(dtype=float)
        row = {"dataset": name, "attribute": ct.columns.name, "n": int(c.sum())}
        if c.sum() == 0:
            out.append({**row, "nsd": np.nan, "nsd_ci_low": np.nan, "nsd_ci_high": np.nan})
            continue
        summ = representation_summary(c)
        row.update(nsd=summ["nsd"], nsd_ci_low=np.nan, nsd_ci_high=np.nan)
        if settings.n_boot > 0:
            sel = ds == d
            local = pd.factorize(units[sel])[0].astype(np.int64)
            reps = bootstrap_counts(local, codes[sel], g, int(local.max()) + 1, None, settings.n_boot, settings.seed)
            row["nsd_ci_low"], row["nsd_ci_high"] = bias_corrected_ci(nsd(reps), summ["nsd"], settings.level,
                                                                      BOUNDS["nsd"](g))
        row.update(evenness=summ["evenness"], effective_groups=summ["effective_groups"], n_groups=summ["n_groups"],
                   n_empty_groups=summ["n_empty_groups"])
        out.append(row)
    for row in out:  # fewer than min_subjects per category even if balanced: NSD is mostly sampling noise
        row["too_small"] = row["n"] < settings.min_subjects * g
    return out
