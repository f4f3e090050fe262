"""Report section of the retrieval audit (docs/METHODS.md §8; Khaziev et al.).

Turns a :class:`fairvision.audits.retrieval.RetrievalAudit` into a
:class:`fairvision.report.Section`: key figures, the contingency table as a
heatmap of row shares, the contrast table, a forest plot of the risk ratios
with the 80%-rule band (0.8-1.25), the per-rank (strong condition) tests, and
the power analysis in the layout of the paper's Figure 3: (a) power of the
omnibus test against RR for several catalog sizes, (b) and (c) the detectable
nRR at the target power against catalog size for RR < 1 and RR > 1. No images.
:func:`left_out_sections` reports the rows the audit left out (docs/METHODS.md §9.3).
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.ticker import NullFormatter, ScalarFormatter

from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import ci_text, group_text, num, p_text
from fairvision.report.sections.coverage import coverage_section

_CONTRAST_COLS = ["n_queries", "n_results", "share", "catalog_share", "statistic", "pvalue", "method", "pvalue_adjusted",
                  "reject", "rr", "rr_ci_low", "rr_ci_high", "nrr", "fair_80", "too_small"]


def _plain_log_ticks(ax, axis: str = "x") -> None:
    """Log scale with plain numbers (0.5, 1, 2) instead of 5 x 10^-1."""
    a = ax.xaxis if axis == "x" else ax.yaxis
    fmt = ScalarFormatter()
    fmt.set_scientific(False)
    a.set_major_formatter(fmt)
    a.set_minor_formatter(NullFormatter())


def _power_figure(audit):
    pc, det = audit.power_curves, audit.detectable
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    ax = axes[0]
    for i, n in enumerate(pc.index.get_level_values("n").unique()):
        sub = pc.loc[n]
        ax.plot(sub.index.to_numpy(), sub["omnibus"].to_numpy(), marker="o", ms=3, color=plots.PALETTE[i % len(plots.PALETTE)],
                label=f"n = {n:,}" + (" (this catalog)" if n == audit.parity.n_queries else ""))
    ax.axhline(audit.target_power, color="#888", lw=1, ls="--")
    ax.axvspan(0.8, 1.25, color="#66a182", alpha=0.12, lw=0)
    ax.set_xscale("log")
    ax.set_xticks([0.5, 0.8, 1.0, 1.25, 2.0])
    _plain_log_ticks(ax)
    ax.set_xlabel("risk ratio RR")
    ax.set_ylabel("power (omnibus test)")
    ax.set_title("(a) power vs risk ratio", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    for ax, side, title in ((axes[1], "below", "(b) detectable nRR, RR < 1"), (axes[2], "above", "(c) detectable nRR, RR > 1")):
        sub = det.loc[side]
        for i, col in enumerate(sub.columns):
            style = dict(lw=2.2, color="black") if col == "omnibus" else dict(lw=1.2, color=plots.PALETTE[i % len(plots.PALETTE)])
            ax.plot(sub.index.to_numpy(), sub[col].to_numpy(dtype=float), marker="o", ms=3, label=str(col), **style)
        ax.axhline(0.8, color="#888", lw=1, ls="--")
        ax.set_xscale("log")
        _plain_log_ticks(ax)
        ax.set_ylim(0, 1)
        ax.set_xlabel("catalog size n")
        ax.set_ylabel(f"nRR detectable at {audit.target_power:.0%} power")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, frameon=False, ncol=2)
    for ax in axes:
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def retrieval_section(audit, *, title: str = "Retrieval distribution parity") -> Section:
    """Build the report section of a retrieval audit."""
    par = audit.parity
    attr = audit.attribute
    sec = Section(
        "retrieval",
        title,
        intro=(
            f"Does the {attr!r} of a query leak into its top-{par.k} results? Distribution parity "
            "(Khaziev et al.; docs/METHODS.md §8.1, §8.2): the contingency table counts the values of the results of "
            "all queries with each value, plus a catalog row. The omnibus chi-square test checks the whole table "
            "(top-K set: the weak condition; per rank: the strong condition); the contrast test of each value "
            "compares its queries' share of same-value results with the catalog share, with the risk ratio RR, a 95% "
            f"Katz-log CI and the 80% rule (fair if nRR = min(RR, 1/RR) >= 0.8). Significance level {par.alpha:g}; "
            f"contrast p-values corrected with {par.correction}; continuity correction {'on' if par.continuity else 'off'}."
        ),
    )
    om = par.omnibus
    sec.metrics("overview", {
        "queries": par.n_queries,
        "catalog items": par.n_catalog,
        "K": par.k,
        f"omnibus chi2({om.df})": om.statistic,
        "omnibus p": om.pvalue,
        "bias detected": bool(om.pvalue < par.alpha),
        "values failing 80% rule": int((~par.contrasts["fair_80"].fillna(True).astype(bool)).sum()),
    })
    add_findings(sec, audit)
    if om.pvalue < par.alpha:
        sec.note(f"The omnibus test rejects distribution parity (chi2({om.df}) = {om.statistic:.4g}, "
                 f"p = {om.pvalue:.3g} < {par.alpha:g}).", level="finding")
    else:
        sec.note(f"The omnibus test does not reject distribution parity (chi2({om.df}) = {om.statistic:.4g}, "
                 f"p = {om.pvalue:.3g}); check the power analysis below before reading this as fairness.")
    if om.method != "chi2":
        sec.note(f"Small expected counts in the omnibus table (smallest {om.min_expected:.3g}): its p-value is a "
                 "Monte Carlo test conditional on the margins.", level="warning")
    for msg in par.warnings:
        if not msg.startswith("omnibus"):
            sec.note(msg, level="warning")
    small = par.contrasts.index[par.contrasts["too_small"]].tolist()
    if small:
        sec.note("Too small to judge reliably (few queries or expected counts below 5): " + ", ".join(map(str, small)) + ".",
                 level="warning")
    dropped = {k: v for k, v in (par.dropped or {}).items() if v}
    if dropped:
        sec.note("Left out for a missing attribute: " + ", ".join(f"{v:,} {k.replace('_', ' ')}" for k, v in dropped.items()) + ".",
                 level="warning")

    table = par.table
    shares = table.div(table.sum(axis=1).replace(0, np.nan), axis=0)
    sec.figure("contingency", plots.heatmap(shares, title=f"Share of each result value per query value (top-{par.k})",
                                            fmt="{:.2f}", vmin=0, vmax=1, cbar_label="row share"),
               caption="Contingency table as row shares; the last row is the catalog. Parity means every row looks like the catalog row.",
               data={"counts": table.to_numpy().tolist(), "rows": [str(i) for i in table.index], "columns": [str(c) for c in table.columns]})
    sec.table("contingency_counts", table.reset_index().rename(columns={"query": "query value"}).set_index("query value"),
              caption="Counts: rows are query values (plus the catalog), columns the values of the results.")
    con = par.contrasts
    sec.table("contrasts", con[[c for c in _CONTRAST_COLS if c in con.columns]],
              caption="Contrast test per query value (2 x 2 against the catalog), RR with 95% CI, nRR and the 80% rule.",
              highlight="reject")
    fdf = con[np.isfinite(con["rr"].to_numpy(dtype=float)) & (con["rr"].to_numpy(dtype=float) > 0)].copy()
    if len(fdf):
        fdf["flag"] = fdf["reject"].astype(bool) & ~fdf["fair_80"].astype(bool)
        hi_cap = np.where(np.isfinite(fdf["rr_ci_high"].to_numpy(dtype=float)), fdf["rr_ci_high"].to_numpy(dtype=float), np.nan)
        fdf["rr_ci_high_plot"] = hi_cap
        plot_df = fdf.copy()
        plot_df.index = [group_text(attr, v) for v in fdf.index]
        fig = plots.forest(plot_df, estimate="rr", low="rr_ci_low", high="rr_ci_high_plot", reference=1.0, band=(0.8, 1.25),
                           flag="flag", xlabel="risk ratio RR (log scale)", title="Risk ratio of same-value results per query value")
        fig.axes[0].set_xscale("log")
        _plain_log_ticks(fig.axes[0])
        sec.figure("risk_ratio", fig, caption="RR with 95% Katz CI; the shaded band 0.8-1.25 is fair under the 80% rule; "
                   "red: significant after correction and outside the band.",
                   data=fdf[["rr", "rr_ci_low", "rr_ci_high"]].reset_index().to_dict(orient="list"))
    pr = par.per_rank
    if len(pr):
        sec.table("per_rank", pr[["statistic", "df", "pvalue", "method", "pvalue_adjusted", "reject"]],
                  caption="Strong condition: the omnibus test at each rank (corrected over ranks).", highlight="reject")
    if audit.power_curves is not None:
        sec.text(
            f"Power analysis (Algorithm 1, {audit.power_trials:,} Monte Carlo trials per point) for this catalog's "
            f"distribution of {attr!r}, K = {par.k}, alpha = {par.alpha:g}. The simulated catalog size is the "
            "number of queries (every catalog item queries, as in the paper)."
        )
        sec.figure("power", _power_figure(audit),
                   caption="Layout of Khaziev et al.'s Figure 3: (a) omnibus power against RR; (b, c) detectable nRR at "
                           f"{audit.target_power:.0%} power against catalog size for the omnibus (black) and contrast tests.",
                   data={"power": audit.power_curves.reset_index().to_dict(orient="list"),
                         "detectable": audit.detectable.reset_index().to_dict(orient="list")})
        sec.table("power_curves", audit.power_curves, caption="Power against RR and catalog size.", max_rows=60)
        sec.table("detectable_nrr", audit.detectable, caption=f"Detectable nRR at {audit.target_power:.0%} power (NaN: not detectable at any RR).")
    if audit.adequacy is not None:
        adq = audit.adequacy.table
        sec.table("catalog_size_check", adq, caption="Is this catalog large enough to detect an 80%-rule violation?",
                  highlight="large_enough")
        for ans in adq["answer"]:
            sec.note(ans, level="info" if ans.startswith("Yes") else "warning")
    if audit.embedding_status is not None:
        st = audit.embedding_status
        failed = int((~st["ok"]).sum())
        sec.metrics("embeddings", {"images": len(st), "embedded": int(st["ok"].sum()), "no face / unreadable": failed},
                    caption="Visual-search harness: images embedded with the built-in face descriptor.")
        if failed:
            sec.table("embedding_failures", st.loc[~st["ok"], ["item_id", "reason"]].set_index("item_id"),
                      caption="Images left out of the catalog (no embedding).")
    return sec


def left_out_sections(audit) -> list[Section]:
    """Coverage sections of the rows a retrieval audit left out (docs/METHODS.md §9.3): the candidate queries
    (images without an embedding, items without a value of the attribute), shown when the harness embedded images
    or any was left out, and the result pairs left out for a result without a value, when any was."""
    out = []
    cov = audit.coverage
    if cov is not None and (audit.embedding_status is not None or cov.n_left_out):
        out.append(coverage_section(cov, id="retrieval-coverage",
                                    title=f"Left out of the retrieval audit: {cov.unit} by {audit.attribute}"))
    if audit.result_coverage is not None:
        out.append(coverage_section(audit.result_coverage, id="retrieval-result-coverage",
                                    title=f"Left out of the retrieval audit: results by the query's {audit.attribute}"))
    return out


def add_findings(sec: Section, audit) -> None:
    """Findings of a retrieval audit (docs/METHODS.md §9.1): the omnibus test, every value whose contrast
    test rejects parity or whose nRR fails the 80% rule, and values the catalog is too small to judge."""
    par, attr = audit.parity, audit.attribute
    om = par.omnibus
    if np.isfinite(om.pvalue):
        if om.pvalue < par.alpha:
            sec.finding(f"The {attr} of a query changes the {attr} of its top-{par.k} results: omnibus chi2({om.df}) = "
                        f"{om.statistic:.4g}, {p_text(om.pvalue, adjusted=False)}", "high", target="overview",
                        quantity="omnibus_p", value=om.pvalue, pvalue=om.pvalue)
        else:
            sec.finding(f"No evidence that the {attr} of a query changes its top-{par.k} results (omnibus "
                        f"{p_text(om.pvalue, adjusted=False)}); see the power analysis before reading this as parity",
                        "info", target="overview", quantity="omnibus_p", value=om.pvalue, pvalue=om.pvalue)
    con = par.contrasts
    for value, row in con.iterrows():
        nrr = float(row["nrr"])
        if not np.isfinite(nrr):
            continue
        reject = bool(row.get("reject", False))
        unfair = nrr < 0.8
        if not (reject or unfair):
            continue
        too_small = bool(row.get("too_small", False))
        sev = "info" if too_small else "high" if reject and unfair else "medium"
        p = row.get("pvalue_adjusted", row.get("pvalue"))
        rule = "fails" if unfair else "meets"
        sec.finding(f"{group_text(attr, value)}: same-value results at RR {num(row['rr'])}"
                    f"{ci_text(row['rr_ci_low'], row['rr_ci_high'])} times the catalog share; nRR {num(nrr)} {rule} "
                    f"the 80% rule ({p_text(p)})" + ("; too few queries to judge" if too_small else ""), sev, target="contrasts", quantity=f"rr.{value}", value=row["rr"],
                    ci_low=row["rr_ci_low"], ci_high=row["rr_ci_high"], pvalue=p, size=1.0 - nrr)
    if audit.adequacy is not None:
        adq = audit.adequacy.table
        small = [v for v in adq.index[~adq["large_enough"].astype(bool)] if v != "omnibus"]
        if small:
            sec.finding("The catalog is too small to detect an 80%-rule violation for "
                        + ", ".join(group_text(attr, v) for v in small[:5]) + (", ..." if len(small) > 5 else "")
                        + f" (power below {audit.target_power:.0%})", "medium", target="catalog_size_check",
                        quantity="n_too_small_to_test", value=len(small))


_RANKING_COLS = ["desired", "share", "share_ci_low", "share_ci_high", "skew", "skew_ci_low", "skew_ci_high",
                 "exposure", "attention", "attention_ci_low", "attention_ci_high", "attention_ratio", "pool_share", "pvalue_adjusted",
                 "attention_pvalue_adjusted", "flagged"]


def add_ranking_blocks(sec: Section, ranking, attr: str, *, desired: str = "the catalog share") -> None:
    """Key figures, group table, Skew@k forest plot and findings of a
    :class:`fairvision.stats.ranking.RankingFairness` (docs/METHODS.md §8.5), added to ``sec``."""
    summ, grp = ranking.summary, ranking.groups
    level = f"{ranking.level:.0%}"
    values = {}
    for measure, label in (("ndkl", "NDKL"), ("max_skew", f"MaxSkew@{ranking.k}"), ("min_skew", f"MinSkew@{ranking.k}")):
        row = summ.loc[measure]
        values[label] = float(row["estimate"])
        if np.isfinite(row["ci_low"]):
            values[f"{label} {level} CI"] = f"{num(row['ci_low'])} to {num(row['ci_high'])}"
        values[f"{label} of a random ranking"] = float(row["random"])
    values["queries"] = ranking.n_queries
    values["groups flagged"] = int(grp["flagged"].sum())
    sec.metrics("ranking_overview", values,
                caption=f"Means over queries with {level} query-bootstrap intervals ({ranking.n_boot:,} replicates); "
                        "'random' is the mean of rankings drawn at random from the desired shares at the same depths.")
    sec.table("ranking_groups", grp[[c for c in _RANKING_COLS if c in grp.columns]],
              caption=f"Per {attr}: desired share ({desired}), mean top-{ranking.k} share with CI, Skew@{ranking.k} = "
                      "ln(share / desired), position-discounted exposure and attention (exposure / Z) with CIs, the "
                      "attention ratio (attention / desired; 1 at parity), and the corrected p-values of the "
                      "permutation tests of share and attention against rankings that ignore the groups (the "
                      f"groups shuffled over the pool, whose shares are pool_share; {ranking.correction}).",
              highlight="flagged")
    finite = grp[np.isfinite(grp["skew"].to_numpy(dtype=float))]
    if len(finite):
        plot_df = finite.copy()
        plot_df.index = [group_text(attr, v) for v in finite.index]
        fig = plots.forest(plot_df, estimate="skew", low="skew_ci_low", high="skew_ci_high", reference=0.0,
                           flag="flagged", xlabel=f"Skew@{ranking.k} = ln(top-{ranking.k} share / desired share)",
                           title=f"Skew of the top {ranking.k} per {attr}")
        sec.figure("ranking_skew", fig, caption=f"Skew@{ranking.k} of the mean top-{ranking.k} share per {attr} with "
                   f"{level} query-bootstrap CI; 0 is parity with {desired}; red: flagged after correction.",
                   data=finite[["skew", "skew_ci_low", "skew_ci_high"]].reset_index().to_dict(orient="list"))
    for value, row in grp.iterrows():
        if not bool(row["flagged"]):
            continue
        p = float(np.nanmin([row["pvalue_adjusted"], row["attention_pvalue_adjusted"]]))
        more = "more" if row["attention_ratio"] > 1 else "less"
        sec.finding(f"{group_text(attr, value)} gets {more} of the top-{ranking.k} attention than {desired}: attention "
                    f"ratio {num(row['attention_ratio'])}, Skew@{ranking.k} {num(row['skew'])}"
                    f"{ci_text(row['skew_ci_low'], row['skew_ci_high'])} ({p_text(p)})", "high"
                    if abs(1.0 - float(row["attention_ratio"])) >= 0.2 else "medium", target="ranking_groups",
                    quantity=f"attention_ratio.{value}", value=row["attention_ratio"], pvalue=p,
                    size=min(1.0, abs(1.0 - float(row["attention_ratio"]))))


def ranking_section(audit, *, title: str = "Exposure and skew of the rankings") -> Section | None:
    """Section of the exposure and skew of a retrieval audit's rankings (docs/METHODS.md §8.5); None when the
    audit has neither them nor a reason why not."""
    if audit.ranking is None and not audit.ranking_note:
        return None
    sec = Section("retrieval-ranking", title, intro=(
        f"How the top-{audit.parity.k} results of each query share their positions among the values of "
        f"{audit.attribute!r}, against the catalog's shares (Geyik et al. 2019, as used for CLIP by debias-vision-lang; "
        "docs/METHODS.md §8.5): NDKL (rank-discounted KL divergence of every top-i distribution from the catalog's), "
        "Skew@k = ln(top-k share / catalog share) with MaxSkew@k and MinSkew@k, and exposure with the 1/log2(1 + rank) "
        "discount. A value absent from a query's top k counts as 1/k of it in Skew@k. Results without a value are "
        "skipped and the ranks below them move up."))
    if audit.ranking is None:
        sec.note(f"Exposure and skew not computed: {audit.ranking_note}.", level="warning")
        return sec
    add_ranking_blocks(sec, audit.ranking, audit.attribute)
    return sec
