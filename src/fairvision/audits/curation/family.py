"""One multiple-testing family for the pairwise tests of a curation audit (docs/METHODS.md §13.3, §13.4).

:func:`fairvision.audits.model.audit_model` corrects the pairwise Mann-Whitney tests of each statistic and
attribute set within that table alone (with two groups: no correction at all), while the curation audits correct
their omnibus tests across every statistic and attribute set. So a pair could be "significant" in a statistic
whose omnibus test is not. :func:`correct_across` re-adjusts every pairwise test of an audit (all statistics,
attribute sets and, for the agreement audit, the vendor and group comparisons) as one family, so a pair is
significant only when it survives the audit-wide correction; the summaries, top disparities and ``--fail-if``
quantities derived from the ``significant`` flags follow.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import pandas as pd

from fairvision.groups import SEP
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.pairwise import significance_summary, top_disparity_row


def correct_across(models: Iterable, correction: str, alpha: float) -> int:
    """Adjust every pairwise test of the given model-audit results as one family, in place.

    Parameters
    ----------
    models : iterable of ModelAuditResult or None
        The results whose ``pairwise`` tables form the family (None entries are skipped).
    correction : str
        Multiple-testing correction (:func:`fairvision.stats.corrections.adjust_pvalues`).
    alpha : float
        Significance level applied to ``pvalue_adjusted``.

    Returns
    -------
    int
        The family size: pairwise tests with a p-value.

    Each pairwise table keeps its within-table adjustment as ``pvalue_adjusted_table``; ``pvalue_adjusted`` and
    ``significant`` become the audit-wide ones. Each result's ``summary`` (``n_significant``, ``disparity``) and
    ``top_disparities`` are recomputed from the new flags.
    """
    models = [m for m in models if m is not None]
    keys = [(m, k) for m in models for k in m.pairwise]
    pvals = [m.pairwise[k]["pvalue"].to_numpy(float) if len(m.pairwise[k]) else np.zeros(0) for m, k in keys]
    flat = np.concatenate(pvals) if pvals else np.zeros(0)
    adjusted = adjust_pvalues(flat, correction) if flat.size else flat
    start = 0
    for (m, k), p in zip(keys, pvals):
        pw = m.pairwise[k]
        if len(pw):
            if "pvalue_adjusted_table" not in pw.columns:
                pw.insert(list(pw.columns).index("pvalue_adjusted") + 1, "pvalue_adjusted_table", pw["pvalue_adjusted"])
            adj = adjusted[start:start + len(p)]
            pw["pvalue_adjusted"] = adj
            pw["significant"] = np.nan_to_num(adj, nan=1.0) < alpha
        start += len(p)
    for m in models:
        _refresh(m)
    return int(np.isfinite(flat).sum())


def _refresh(model) -> None:
    """Recompute the summary's significance columns and the top disparities from the pairwise flags."""
    summ = model.summary
    tops = []
    if len(summ):
        n_sig, disp = [], []
        for _, r in summ.iterrows():
            pw = model.pairwise.get((r["metric"], r["intersection"]))
            n, d = significance_summary(pw)
            n_sig.append(n)
            disp.append(d)
            top = top_disparity_row(r["metric"], r["intersection"], len(str(r["intersection"]).split(SEP)), pw)
            if top is not None:
                tops.append(top)
        summ["n_significant"] = n_sig
        summ["disparity"] = disp
    cols = list(model.top_disparities.columns) if len(model.top_disparities.columns) else None
    top = pd.DataFrame(tops, columns=cols) if cols else pd.DataFrame(tops)
    if len(top):
        top = top.sort_values(["disparity", "pvalue"], ascending=[False, True], kind="stable").reset_index(drop=True)
    model.top_disparities = top
