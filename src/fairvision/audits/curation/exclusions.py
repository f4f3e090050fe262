"""What exclusions do to a dataset: who is left after QA failures, consent withdrawals and other removals
(docs/METHODS.md §13.12).

FHIBE removed images for quality, consent and suspected fraud, and found that the removals changed who is in the
dataset (older, lighter-skinned subjects were removed more often). Given every sample and which of them were kept,
this audit compares the two distributions: counts and shares of every group and intersection before and after,
the change in share (percentage points) with a cluster-bootstrap interval (docs/METHODS.md §4.2), NSD before and
after (docs/METHODS.md §5.1), and, per attribute, whether the share kept depends on the group (the coverage test of
docs/METHODS.md §9.3: Fisher's exact test for two groups, the chi-square test of §4.1 otherwise, corrected over
the attributes). With a reason per removed sample the same test runs for each reason, and with a subject column
people are counted as well as images (a subject whose images were all removed leaves the dataset). A sampled
manual review gives the rate of suspicious images with a Wilson interval (docs/METHODS.md §4.4) and the expected
number in the whole collection.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import FairvisionError, ParameterError
from fairvision.groups import SEP, Intersection, cell_counts, intersections, subject_codes
from fairvision.io.tables import SUBJECT_ID, validate_sample_table
from fairvision.schema import Schema
from fairvision.stats.chisquare import chi2_test
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.proportions import wilson_interval
from fairvision.stats.representation import nsd
from fairvision.stats.resample import bias_corrected_ci, bootstrap_counts, count_shares, percentile_ci

#: the reason of a removed sample whose reason cell is empty
UNKNOWN_REASON = "unknown"


@dataclass
class ExclusionsAudit(SettingsView):
    """Result of :func:`audit_exclusions`; every table is a tidy DataFrame.

    ``shifts[names]``: per group of an attribute set, ``n_before``, ``n_after``, ``n_removed``, ``removed_rate``,
    ``share_before``, ``share_after``, ``shift_pp`` with ``shift_ci_low`` / ``shift_ci_high`` (percentage points),
    with a subject column also ``n_subjects_before``, ``n_subjects_after``, ``n_subjects_lost``,
    ``subject_share_before``, ``subject_share_after``, ``subject_shift_pp``; and ``too_small``. ``nsd``: one row per
    attribute set. ``coverage``: the share kept per group with the tests of kept vs removed. ``by_reason`` and
    ``reason_tests``: the same per reason (p-values corrected over every reason and attribute). ``review``: the
    manual review's suspicious rate (one row per unit counted), ``review_by_group`` and ``review_tests``.
    """

    n_before: int
    n_after: int
    n_subjects_before: int | None
    n_subjects_after: int | None
    attributes: list[str]
    subject_col: str | None
    shifts: dict[tuple[str, ...], pd.DataFrame]
    nsd: pd.DataFrame
    coverage: Coverage
    settings: AuditSettings
    by_reason: pd.DataFrame | None = None
    reason_tests: pd.DataFrame | None = None
    review: pd.DataFrame | None = None
    review_by_group: pd.DataFrame | None = None
    review_tests: pd.DataFrame | None = None
    warnings: list[str] = field(default_factory=list)
    gates: list[dict] = field(default_factory=list)

    @property
    def n_removed(self) -> int:
        return self.n_before - self.n_after

    @property
    def n_subjects_lost(self) -> int | None:
        """Subjects all of whose images were removed (None without a subject column)."""
        if self.n_subjects_before is None:
            return None
        return int(self.n_subjects_before - self.n_subjects_after)

    @property
    def tests(self) -> pd.DataFrame:
        """Per attribute: the test of kept vs removed by group (``pvalue_adjusted``, ``differs``)."""
        return self.coverage.tests

    def significant(self) -> list[str]:
        """Attributes whose share removed depends on the group (adjusted p < alpha)."""
        t = self.tests
        return [a for a, d in t["differs"].items() if bool(d)] if len(t) else []

    def largest_shift(self, names: tuple[str, ...] | None = None) -> tuple[tuple[str, ...], object, float] | None:
        """``(attribute set, group, shift_pp)`` of the largest absolute shift in share among groups large enough
        to judge, over the single attributes (or over the set ``names``); None when there is none."""
        best = None
        for key, t in self.shifts.items():
            if (names is None and len(key) != 1) or (names is not None and key != names):
                continue
            s = t.loc[~t["too_small"].to_numpy(bool) & (t["n_before"].to_numpy() > 0), "shift_pp"].dropna()
            if len(s):
                g = s.abs().idxmax()
                if best is None or abs(s[g]) > abs(best[2]):
                    best = (key, g, float(s[g]))
        return best

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` (docs/METHODS.md §13.12).

        ``n_removed``, ``removed_share``, ``n_subjects_lost`` (with a subject column); ``max_share_shift_pp``
        (largest absolute change in a group's share, in percentage points, over the single attributes' groups
        large enough to judge) and ``max_share_shift_pp.<set>`` per attribute set; ``min_pvalue`` (smallest
        adjusted p-value of the kept-vs-removed tests) and ``pvalue.<attribute>``; ``n_significant``;
        ``nsd_change`` (the largest change in NSD over the single attributes; positive: less balanced after)
        and ``nsd_change.<set>``; with a review, ``suspicious_rate`` and ``expected_suspicious``.
        """
        q: dict[str, float] = {"n_removed": float(self.n_removed),
                               "removed_share": self.n_removed / self.n_before if self.n_before else np.nan}
        if self.n_subjects_lost is not None:
            q["n_subjects_lost"] = float(self.n_subjects_lost)
        for names in self.shifts:
            hit = self.largest_shift(names)
            q[f"max_share_shift_pp.{'+'.join(names)}"] = abs(hit[2]) if hit else np.nan
        hit = self.largest_shift()
        q["max_share_shift_pp"] = abs(hit[2]) if hit else np.nan
        t = self.tests
        for a, p in t["pvalue_adjusted"].items():
            q[f"pvalue.{a}"] = float(p)
        finite = t["pvalue_adjusted"].dropna()
        q["min_pvalue"] = float(finite.min()) if len(finite) else np.nan
        q["n_significant"] = float(len(self.significant()))
        for label, row in self.nsd.iterrows():
            q[f"nsd_change.{label.replace(SEP, '+')}"] = float(row["nsd_change"])
        singles = self.nsd.loc[self.nsd["k"] == 1, "nsd_change"].dropna()
        q["nsd_change"] = float(singles.max()) if len(singles) else np.nan
        if self.review is not None:
            first = self.review.iloc[-1]  # subjects when counted, else images
            q["suspicious_rate"] = float(first["rate"])
            q["expected_suspicious"] = float(first["expected"])
        return q

    def to_frame(self) -> pd.DataFrame:
        """Every attribute set's shift table in one long table (``attributes``, ``k``, ``group``, ...)."""
        parts = []
        for names, t in self.shifts.items():
            flat = t.copy()
            flat.index = [SEP.join(map(str, i)) if isinstance(i, tuple) else str(i) for i in t.index]
            flat.index.name = "group"
            flat.insert(0, "attributes", SEP.join(names))
            flat.insert(1, "k", len(names))
            parts.append(flat.reset_index())
        return pd.concat(parts, ignore_index=True)


def audit_exclusions(
    data: pd.DataFrame,
    kept: np.ndarray | Sequence[bool],
    attributes: Sequence[str],
    *,
    schema: Schema | None = None,
    reasons: np.ndarray | Sequence | None = None,
    subject_col: str | None = None,
    max_k: int = 2,
    review: np.ndarray | Sequence[float] | None = None,
    settings: AuditSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExclusionsAudit:
    """Compare a dataset before and after exclusions (docs/METHODS.md §13.12).

    Parameters
    ----------
    data : pandas.DataFrame
        Every sample, kept or removed (one row per image), with the attribute columns.
    kept : array of bool, one per row
        True for the samples that stay in the dataset.
    attributes : sequence of str
        Attributes that define the groups.
    schema : Schema, optional
        Declared categories, bins, multi-valued attributes (docs/METHODS.md §3.2).
    reasons : array, one per row, optional
        Why each removed sample was removed (ignored for kept rows; empty cells count as ``"unknown"``).
    subject_col : str, optional
        Column identifying the person (default ``subject_id`` when present): intervals resample subjects,
        groups are too small below ``min_subjects`` subjects, and subjects are counted before and after.
    max_k : int
        Largest intersection size.
    review : array of float, one per row, optional
        A sampled manual review: 1 for a reviewed sample found suspicious, 0 for a reviewed sample found fine,
        NaN for a sample not reviewed.
    settings : AuditSettings, optional
        ``n_boot``, ``level`` and ``seed`` (the intervals of the shifts), ``correction`` and ``alpha`` (the tests),
        ``min_subjects`` (groups too small to judge).
    progress : callable, optional
        Called with a short message at each step.

    Returns
    -------
    ExclusionsAudit
    """
    settings = settings or DEFAULT_SETTINGS
    source = data.attrs.get("source", "table")
    validate_sample_table(data, source=source)
    keep = np.asarray(kept)  # the attributes are checked where the groups are built (groups.intersections)
    if keep.shape != (len(data),) or keep.dtype != bool:
        raise ParameterError("kept", f"must be {len(data)} booleans, one per row of {source}")
    if not keep.any():
        raise FairvisionError(f"{source}: every sample is removed; nothing is left to compare")
    if subject_col is None and SUBJECT_ID in data.columns:
        subject_col = SUBJECT_ID
    say = progress or (lambda m: None)
    schema = schema or Schema()
    subj = subject_codes(data, subject_col, source=source)
    say("grouping")
    inters = intersections(data, attributes, max_k, schema, source=source, max_declared=None)
    shifts, nsd_rows = {}, []
    for inter in inters:
        say(f"comparing {inter.name}")
        table, row = _compare_set(inter, keep, subj, len(data), settings)
        shifts[inter.names] = table
        nsd_rows.append(row)
    names = [inter.names[0] for inter in inters if inter.k == 1]
    why = _reason_values(reasons, keep) if reasons is not None else None
    say("testing kept vs removed")
    cov = audit_coverage(data, keep, names, schema=schema, step="exclusions", settings=settings, reasons=why,
                         unit="images")
    by_reason, reason_tests = (_by_reason([i for i in inters if i.k == 1], keep, why, settings)
                               if why is not None and (~keep).any() else (None, None))
    review_parts = (_review(data, keep, review, names, schema, subj, settings)
                    if review is not None else (None, None, None))
    warnings = []
    unit = "subjects" if subj is not None else "images"
    for key, t in shifts.items():
        small = int((t["too_small"] & (t["n_before"] > 0)).sum())
        if small and len(key) == 1:
            warnings.append(f"{SEP.join(key)}: {small} groups have fewer than {settings.min_subjects} {unit} before "
                            "the exclusions; their shifts are shown but not judged.")
    for inter in inters[:len(names)]:  # rows without a value (--missing drop) are in no group: say how many
        has = np.zeros(len(data), dtype=bool)
        has[inter.rows] = True
        if not has.all():
            warnings.append(f"{inter.name}: {int((~has).sum()):,} images without a value ({int((~has & ~keep).sum()):,} "
                            "of them removed) are left out of its groups, shares and tests.")
    n_subj_after = int(np.unique(subj[keep]).size) if subj is not None else None
    return ExclusionsAudit(
        n_before=len(data), n_after=int(keep.sum()),
        n_subjects_before=int(subj.max()) + 1 if subj is not None else None, n_subjects_after=n_subj_after,
        attributes=names, subject_col=subject_col, shifts=shifts, nsd=pd.DataFrame(nsd_rows).set_index("attributes"),
        coverage=cov, settings=settings, by_reason=by_reason, reason_tests=reason_tests, review=review_parts[0],
        review_by_group=review_parts[1], review_tests=review_parts[2], warnings=warnings,
    )


def _compare_set(inter: Intersection, keep: np.ndarray, subj: np.ndarray | None, n: int, settings: AuditSettings):
    """The shift table of one attribute set and its NSD row (before, after, change with a bootstrap interval)."""
    g = inter.n_cells
    keep_e = keep[inter.rows]
    after = Intersection(inter.attributes, inter.levels, inter.rows[keep_e], inter.codes[keep_e], inter.cells)
    nb, sb = cell_counts(inter, subj)
    na, sa = cell_counts(after, subj)
    cols = {"n_before": nb, "n_after": na, "n_removed": nb - na, "removed_rate": _ratio(nb - na, nb),
            "share_before": _ratio(nb, nb.sum()), "share_after": _ratio(na, na.sum())}
    cols["shift_pp"] = 100 * (cols["share_after"] - cols["share_before"])
    row = {"attributes": inter.name, "k": inter.k, "n_groups": g, "nsd_before": nsd(nb), "nsd_after": nsd(na)}
    row["nsd_change"] = row["nsd_after"] - row["nsd_before"]
    cols["shift_ci_low"] = cols["shift_ci_high"] = np.full(g, np.nan)
    row["nsd_change_ci_low"] = row["nsd_change_ci_high"] = np.nan
    if settings.n_boot > 0:
        # one resampling for both: the kept rows' memberships are cells g..2g-1 of the same draw
        reps = bootstrap_counts(np.concatenate([inter.rows, after.rows]), np.concatenate([inter.codes, after.codes + g]),
                                2 * g, n, subj, settings.n_boot, settings.seed)
        diff = 100 * (count_shares(reps[:, g:]) - count_shares(reps[:, :g]))
        cols["shift_ci_low"], cols["shift_ci_high"] = percentile_ci(diff, settings.level)
        with np.errstate(invalid="ignore"):
            change = nsd(reps[:, g:]) - nsd(reps[:, :g])
        # bias-corrected as NSD's own intervals (§4.2): NSD near 0 is biased upwards in the replicates, before and
        # after by different amounts, so a plain percentile interval of the change can miss the estimate
        lo, hi = bias_corrected_ci(change, row["nsd_change"], settings.level, (-1.0, 1.0))
        row["nsd_change_ci_low"], row["nsd_change_ci_high"] = float(lo), float(hi)
    if sb is not None:
        cols.update(n_subjects_before=sb, n_subjects_after=sa, n_subjects_lost=sb - sa,
                    subject_share_before=_ratio(sb, sb.sum()), subject_share_after=_ratio(sa, sa.sum()))
        cols["subject_shift_pp"] = 100 * (cols["subject_share_after"] - cols["subject_share_before"])
        row["subject_nsd_before"], row["subject_nsd_after"] = nsd(sb), nsd(sa)
    cols["too_small"] = (sb if sb is not None else nb) < settings.min_subjects
    return pd.DataFrame(cols, index=inter.index()), row


def _ratio(num, den) -> np.ndarray:
    """``num / den`` elementwise, NaN where ``den`` is 0."""
    num, den = np.asarray(num, dtype=float), np.broadcast_to(np.asarray(den, dtype=float), np.shape(num))
    return np.divide(num, den, out=np.full(np.shape(num), np.nan), where=den > 0)


def _reason_values(reasons, keep: np.ndarray) -> np.ndarray:
    """The reason of every removed row as a string (empty: :data:`UNKNOWN_REASON`); None for kept rows."""
    vals = np.asarray(reasons, dtype=object)
    if vals.shape != keep.shape:
        raise ParameterError("reasons", f"must have one value per row ({keep.size}), not {vals.size}")
    out = np.full(keep.size, None, dtype=object)
    gone = pd.Series(vals[~keep])
    text = gone.astype(str).str.strip()
    out[~keep] = np.where(gone.isna().to_numpy() | (text == "").to_numpy(), UNKNOWN_REASON, text.to_numpy())
    return out


def _by_reason(one_way: list[Intersection], keep, why, settings: AuditSettings):
    """Per reason and group: samples removed for that reason, their rate with a Wilson interval among the samples
    not removed for another reason (the ones at risk of this reason), and the rate relative to the reason's
    overall rate; per reason and attribute, the test of the coverage audit (docs/METHODS.md §9.3: Fisher's exact
    test for two groups, the chi-square test otherwise) of removed vs kept by group, p-values corrected over every
    reason and attribute together."""
    removed = ~keep
    codes, labels = pd.factorize(why[removed])
    labels = np.asarray(labels, dtype=object)
    per = np.bincount(codes, minlength=labels.size)
    order = sorted(range(labels.size), key=lambda i: (-int(per[i]), labels[i]))
    reason_of_row = np.full(keep.size, -1, dtype=np.int64)
    reason_of_row[removed] = codes
    rows, tests = [], []
    for inter in one_way:
        g = inter.n_cells
        r = reason_of_row[inter.rows]
        kept_n = np.bincount(inter.codes[r < 0], minlength=g)
        rem = np.bincount(r[r >= 0] * g + inter.codes[r >= 0], minlength=labels.size * g).reshape(labels.size, g)
        for i in order:
            n = kept_n + rem[i]
            lo, hi = wilson_interval(rem[i], n, settings.level)
            with np.errstate(invalid="ignore", divide="ignore"):
                rate = np.where(n > 0, rem[i] / np.where(n > 0, n, 1), np.nan)
            overall = rem[i].sum() / n.sum()
            rows.append(pd.DataFrame({"reason": labels[i], "attribute": inter.names[0], "group": inter.levels[0],
                                      "n": n, "n_removed": rem[i], "removed_rate": rate, "ci_low": lo, "ci_high": hi,
                                      "relative_rate": rate / overall}))
            table = np.stack([rem[i], kept_n], axis=1)[n > 0]
            if table.shape[0] >= 2 and (table.sum(axis=0) > 0).all():
                res = chi2_test(table, exact="always" if table.shape == (2, 2) else "never", warn=False)
                test, stat, p = ("Fisher exact" if res.method == "fisher" else "chi-square"), res.statistic, res.pvalue
            else:
                test, stat, p = "not testable", np.nan, np.nan
            tests.append({"reason": labels[i], "attribute": inter.names[0], "n_removed": int(per[i]), "test": test,
                          "statistic": stat, "pvalue": p})
    rank = {labels[i]: k for k, i in enumerate(order)}
    by_reason = pd.concat(rows, ignore_index=True)
    by_reason = by_reason.iloc[np.argsort(by_reason["reason"].map(rank).to_numpy(), kind="stable")]
    by_reason = by_reason.set_index(["reason", "attribute", "group"])
    tests_df = pd.DataFrame(tests)
    tests_df = tests_df.iloc[np.argsort(tests_df["reason"].map(rank).to_numpy(), kind="stable")].reset_index(drop=True)
    tests_df["pvalue_adjusted"] = adjust_pvalues(tests_df["pvalue"].to_numpy(dtype=float), settings.correction)
    tests_df["differs"] = tests_df["pvalue_adjusted"] < settings.alpha
    return by_reason, tests_df.set_index(["reason", "attribute"])


def _review(data, keep, review, names, schema, subj, settings: AuditSettings):
    """The manual review: suspicious rate with a Wilson interval and the expected number in the collection
    (images, and subjects with a subject column), and the rate per group (coverage tables of the reviewed rows)."""
    r = np.asarray(review, dtype=float)
    if r.shape != keep.shape:
        raise ParameterError("review", f"must have one value per row ({keep.size}), not {r.size}")
    seen = np.isfinite(r)
    if not seen.any():
        raise FairvisionError("the review covers none of the samples")
    if ((r[seen] != 0) & (r[seen] != 1)).any():
        raise ParameterError("review", "values must be 0 (fine), 1 (suspicious) or NaN (not reviewed)")
    sus = r == 1
    # the collection the sample was drawn from: the kept rows when every reviewed row is kept, else all rows
    pool = keep if keep[seen].all() else np.ones_like(keep)
    counts = [("images", int(seen.sum()), int(sus.sum()), int(pool.sum()))]
    if subj is not None:
        n_subj = int(subj.max()) + 1
        rev_s = np.bincount(subj[seen], minlength=n_subj) > 0
        sus_s = np.bincount(subj[sus], minlength=n_subj) > 0
        counts.append(("subjects", int(rev_s.sum()), int(sus_s.sum()), int(np.unique(subj[pool]).size)))
    rows = []
    for unit, n, k, size in counts:
        lo, hi = wilson_interval(k, n, settings.level)
        rate = k / n
        rows.append({"unit": unit, "n_reviewed": n, "n_suspicious": k, "rate": rate, "ci_low": float(lo),
                     "ci_high": float(hi), "collection": size, "expected": rate * size,
                     "expected_ci_low": float(lo) * size, "expected_ci_high": float(hi) * size})
    sub = data.iloc[np.flatnonzero(seen)].reset_index(drop=True)
    sub.attrs = dict(data.attrs)
    cov = audit_coverage(sub, sus[seen], names, schema=schema, step="manual review", settings=settings)
    by_group = cov.by_group.rename(columns={"n": "n_reviewed", "n_ok": "n_suspicious"})
    return pd.DataFrame(rows).set_index("unit"), by_group, cov.tests
