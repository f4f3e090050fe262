"""Dataset audit: who is in a human-centric image dataset (FHIBE section "dataset";
bias-transfer paper's representation and stereotype metrics; docs/METHODS.md §5).

For the chosen attributes it counts every group and every k-way intersection
(samples and subjects), summarises the intersections in the layout of the
FHIBE paper's Table 1, scores representation (NSD, evenness, effective number
of groups, imbalance ratio) with cluster-bootstrap CIs that resample subjects,
and measures association between attributes (NMI, chi-square with Cramér's V,
NPMI for every value pair). Groups and intersections come from
:mod:`fairvision.groups` (docs/METHODS.md §3.2), the bootstrap from
:mod:`fairvision.stats.resample` (docs/METHODS.md §4.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS, SettingsView
from fairvision.errors import FairvisionError
from fairvision.groups import combine, count_table, intersection_summary, intersections, memberships, subject_codes
from fairvision.io.tables import SUBJECT_ID, validate_sample_table
from fairvision.schema import Schema
from fairvision.stats import association, representation
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.diversity import vendi_score
from fairvision.stats.resample import bias_corrected_ci, bootstrap_counts, count_shares, percentile_ci


@dataclass
class DatasetAudit(SettingsView):
    """Result of :func:`audit_dataset`. Every table is a tidy DataFrame; ``settings`` are the settings the audit
    ran with (``min_subjects``, ``n_boot``, ``level`` and ``correction`` are also attributes)."""

    n_samples: int
    n_subjects: int | None
    attributes: list[str]
    target: str | None
    subject_col: str | None
    groups: dict[tuple[str, ...], pd.DataFrame]
    summary: pd.DataFrame
    representation: pd.DataFrame
    association: pd.DataFrame
    npmi: dict[tuple[str, str], pd.DataFrame]
    settings: AuditSettings
    warnings: list[str] = field(default_factory=list)
    diversity: pd.DataFrame | None = None
    gates: list[dict] = field(default_factory=list)

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` gates (see :mod:`fairvision.audits.gates`).

        Per attribute set (``gender``, ``age+gender``): ``nsd.<set>``,
        ``evenness.<set>``, ``effective_groups.<set>``, ``imbalance_ratio.<set>``,
        ``n_empty_groups.<set>``, ``n_small_groups.<set>``. Summaries: ``nsd``,
        ``imbalance_ratio`` (largest over single attributes), ``evenness``
        (smallest), ``n_empty_groups`` and ``n_small_groups`` (over all sets),
        ``nmi`` and ``cramers_v`` (largest over attribute pairs), ``n_samples``.
        """
        q: dict[str, float] = {"n_samples": float(self.n_samples)}
        singles = self.representation[self.representation["k"] == 1]
        for label, row in self.representation.iterrows():
            key = label.replace(" × ", "+")
            for m in ("nsd", "evenness", "effective_groups", "imbalance_ratio", "n_empty_groups"):
                q[f"{m}.{key}"] = float(row[m])
        for names, t in self.groups.items():
            q[f"n_small_groups.{'+'.join(names)}"] = float((t["too_small"] & (t["n_samples"] > 0)).sum())
        q["nsd"] = float(singles["nsd"].max())
        q["imbalance_ratio"] = float(singles["imbalance_ratio"].max())
        q["evenness"] = float(singles["evenness"].min())
        q["n_empty_groups"] = float(self.representation["n_empty_groups"].sum())
        q["n_small_groups"] = float(sum(v for k, v in q.items() if k.startswith("n_small_groups.")))
        if len(self.association):
            q["nmi"] = float(self.association["nmi"].max())
            q["cramers_v"] = float(self.association["cramers_v"].max())
        return q

    def to_frame(self) -> pd.DataFrame:
        """All group counts in one long table: attribute set, group label, counts, shares."""
        parts = []
        for names, t in self.groups.items():
            flat = t.copy()
            flat.index = [" × ".join(map(str, i)) if isinstance(i, tuple) else str(i) for i in t.index]
            flat.index.name = "group"
            flat.insert(0, "attributes", " × ".join(names))
            flat.insert(1, "k", len(names))
            parts.append(flat.reset_index())
        return pd.concat(parts, ignore_index=True)


def audit_dataset(
    data: pd.DataFrame,
    attributes: Sequence[str],
    *,
    schema: Schema | None = None,
    target: str | None = None,
    subject_col: str | None = None,
    max_k: int = 2,
    ci_max_k: int = 1,
    embeddings: np.ndarray | None = None,
    settings: AuditSettings | None = None,
    progress: Callable[[str], None] | None = None,
) -> DatasetAudit:
    """Audit the composition of a sample table.

    Parameters
    ----------
    data : DataFrame
        One row per image (see :func:`fairvision.io.read_table`).
    attributes : list of str
        Attribute columns (or schema names) that define groups.
    schema : Schema, optional
        Declared categories, order, bins, multi-valued and hierarchical
        attributes. Undeclared attributes use the values seen.
    target : str, optional
        A label column (e.g. the class a model is trained to predict); its
        association with each attribute (stereotypical bias: NPMI, NMI) is
        reported.
    subject_col : str, optional
        Column identifying the person; default ``subject_id`` when present.
        Subjects, not images, are resampled for CIs and counted for the
        minimum group size.
    max_k : int
        Largest intersection size.
    ci_max_k : int
        Bootstrap CIs are computed for attribute sets of size up to
        ``ci_max_k`` (0 disables them).
    embeddings : array (n_rows, d), optional
        Image embeddings aligned with the table's rows; adds the Vendi score
        (visual diversity, FHIBE; docs/METHODS.md §5.3) of the whole set and
        of every group.
    settings : AuditSettings, optional
        Uses ``min_subjects`` (groups with fewer subjects are flagged as too
        small to judge; FHIBE keeps groups with at least 10 subjects,
        docs/METHODS.md §3.3), ``n_boot``, ``level`` and ``seed`` (the subject
        bootstrap) and ``correction`` (of the association tests over the
        attribute pairs, docs/METHODS.md §4.3). Default: ``AuditSettings()``.
    progress : callable, optional
        Called with a short message at each step.

    Returns
    -------
    DatasetAudit
        ``association`` has columns ``nmi``, ``statistic`` (X^2), ``df``,
        ``pvalue``, ``cramers_v``, ``min_expected``, ``pvalue_adjusted``.
    """
    settings = settings or DEFAULT_SETTINGS
    source = data.attrs.get("source", "table")
    validate_sample_table(data, source=source)  # the attributes are checked where the groups are built
    if target is not None and target in attributes:
        raise FairvisionError(f"{target!r} is both an attribute and the target")
    if subject_col is None and SUBJECT_ID in data.columns:
        subject_col = SUBJECT_ID
    say = progress or (lambda msg: None)
    schema = schema or Schema()

    say("grouping")
    subj = subject_codes(data, subject_col, source=source)
    n = len(data)
    attr_names = [schema.get(x).name for x in attributes]
    inters = intersections(data, attr_names, max_k, schema, source=source, max_declared=None)
    groups, representation_df = _group_tables(inters, subj, n, ci_max_k, settings, say)
    summary = intersection_summary(groups, min_subjects=settings.min_subjects)
    warnings = _size_warnings(groups, "subjects" if subject_col else "samples", settings.min_subjects)

    say("association")
    pairs = [(a, b, "attributes") for i, a in enumerate(attr_names) for b in attr_names[i + 1:]]
    pairs += [(a, schema.get(target).name, "target") for a in attr_names] if target else []
    built = {inter.names: inter for inter in inters}
    assoc, npmi_tables = _associations(data, pairs, built, schema, settings.correction, warnings, source)

    diversity = None
    if embeddings is not None:
        say("diversity")
        diversity = _diversity(embeddings, n, [built[(a,)] for a in attr_names], settings.min_subjects)

    return DatasetAudit(
        n_samples=n,
        n_subjects=int(subj.max()) + 1 if subj is not None else None,
        attributes=attr_names,
        target=target,
        subject_col=subject_col,
        groups=groups,
        summary=summary,
        representation=representation_df,
        association=assoc,
        npmi=npmi_tables,
        settings=settings,
        warnings=warnings,
        diversity=diversity,
    )


def _group_tables(inters, subj, n: int, ci_max_k: int, settings: AuditSettings, say):
    """Count table of every attribute set (with share CIs and ``too_small``) and its representation row
    (NSD, evenness, ...; with bias-corrected bootstrap CIs for sets of up to ``ci_max_k`` attributes)."""
    groups: dict[tuple[str, ...], pd.DataFrame] = {}
    rep_rows = []
    for inter in inters:
        frame = count_table(inter, subj)
        ns = frame["n_samples"].to_numpy()
        row = {"attributes": " × ".join(inter.names), "k": inter.k}
        row.update(representation.representation_summary(ns))
        if inter.k <= ci_max_k and settings.n_boot > 0:
            say(f"bootstrap {row['attributes']}")
            reps = bootstrap_counts(inter.rows, inter.codes, inter.n_cells, n, subj, settings.n_boot, settings.seed)
            for mname, fn in representation.METRICS.items():
                vals = fn(reps)
                row[f"{mname}_ci_low"], row[f"{mname}_ci_high"] = bias_corrected_ci(
                    vals, row[mname], settings.level, representation.BOUNDS[mname](inter.n_cells)
                )
            frame["share_ci_low"], frame["share_ci_high"] = percentile_ci(count_shares(reps), settings.level)
        size = frame["n_subjects"] if "n_subjects" in frame.columns else frame["n_samples"]
        frame["too_small"] = size.to_numpy() < settings.min_subjects
        groups[inter.names] = frame
        rep_rows.append(row)
    return groups, pd.DataFrame(rep_rows).set_index("attributes")


def _size_warnings(groups: dict[tuple[str, ...], pd.DataFrame], unit: str, min_subjects: int) -> list[str]:
    """One warning per attribute set with empty declared groups, and one with groups too small to judge."""
    warnings = []
    for names, t in groups.items():
        label = " × ".join(names)
        empty = int((t["n_samples"] == 0).sum())
        small = int((t["too_small"] & (t["n_samples"] > 0)).sum())
        if empty:
            warnings.append(f"{label}: {empty} of {len(t)} declared groups have no samples.")
        if small:
            warnings.append(f"{label}: {small} non-empty groups have fewer than {min_subjects} {unit}; too small to judge.")
    return warnings


ASSOCIATION_COLUMNS = ["x", "y", "role", "nmi", "statistic", "df", "pvalue", "cramers_v", "min_expected"]


def _associations(data, pairs, built, schema, correction, warnings, source):
    """NMI, chi-square with Cramér's V (p-values corrected over the pairs) and the NPMI table of every
    ``(x, y, role)`` pair of attribute names (role ``"attributes"`` or ``"target"``); appends the chi-square
    caveats to ``warnings``. ``built`` holds the intersections already made, by their names."""
    n = len(data)
    rows = []
    npmi_tables: dict[tuple[str, str], pd.DataFrame] = {}
    # the two-way intersections are already built; only pairs with the target (or max_k = 1) need memberships
    ms = {}
    for xn, yn, role in pairs:
        comb = built.get((xn, yn))
        if comb is None:
            for name in (xn, yn):
                if name not in ms:
                    ms[name] = memberships(data, [name], schema, source=source)[0]
            comb = combine([ms[xn], ms[yn]], n)
        lx, ly = comb.levels
        ct = np.bincount(comb.codes, minlength=comb.n_cells).reshape(len(lx), len(ly)).astype(float)
        ct_df = pd.DataFrame(ct, index=pd.Index(lx, name=xn), columns=pd.Index(ly, name=yn))
        npmi_tables[(xn, yn)] = association.npmi(ct_df, xn, yn)
        row = {"x": xn, "y": yn, "role": role, "nmi": association.nmi(ct_df, xn, yn)}
        try:
            chi = association.chi2_independence(ct_df, xn, yn)
            row.update(statistic=chi.statistic, df=chi.df, pvalue=chi.pvalue, cramers_v=chi.cramers_v,
                       min_expected=chi.min_expected)
            if chi.small_expected:
                warnings.append(f"{xn} × {yn}: expected counts fail Cochran's rule (min {chi.min_expected:.2g}); "
                                "the chi-square p-value is approximate.")
        except FairvisionError as exc:
            row.update(statistic=np.nan, df=np.nan, pvalue=np.nan, cramers_v=np.nan, min_expected=np.nan)
            warnings.append(str(exc))
        rows.append(row)
    assoc = pd.DataFrame(rows, columns=ASSOCIATION_COLUMNS)
    if len(assoc):
        assoc["pvalue_adjusted"] = adjust_pvalues(assoc["pvalue"].to_numpy(), correction)
        assoc = assoc.set_index(["x", "y"])
    return assoc, npmi_tables


def _diversity(embeddings: np.ndarray, n: int, one_way, min_size: int) -> pd.DataFrame:
    """Vendi score of all images and of each group (docs/METHODS.md §5.3); VS / n is comparable across sizes."""
    x = np.asarray(embeddings)
    if x.ndim != 2 or x.shape[0] != n:
        raise FairvisionError(f"embeddings: expected {n} rows (one per image), got shape {x.shape}")
    rows = [{"attribute": "(all)", "group": "(all)", "n_images": n, "vendi": vendi_score(x)}]
    for m in one_way:
        for g, cat in enumerate(m.levels[0]):
            idx = m.rows[m.codes == g]
            rows.append({"attribute": m.names[0], "group": cat, "n_images": int(idx.size),
                         "vendi": vendi_score(x[idx]) if idx.size else np.nan})
    out = pd.DataFrame(rows).set_index(["attribute", "group"])
    out["vendi_per_image"] = out["vendi"] / out["n_images"].where(out["n_images"] > 0)
    out["too_small"] = out["n_images"] < min_size
    return out
