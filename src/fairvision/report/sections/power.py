"""Report sections of the planning commands (docs/METHODS.md §6.7, §8.3).

:func:`model_power_section` turns a :class:`fairvision.stats.power_model.ModelPowerPlan` into a Section (the
smallest detectable difference per pair of groups and against the group size, and the power curve of the least
powered pair); :func:`catalog_power_section` a :class:`fairvision.stats.power_model.CatalogPlan` (power at the
target nRR against catalog size, and the catalog each test needs). No images.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np

from fairvision.report import Section
from fairvision.report import plots
from fairvision.report.findings import num


def _model_figure(plan):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    ax = axes[0]
    pc = plan.power_curve
    ax.plot(pc["mean_difference_sd"], pc["power"], color=plots.PALETTE[0], marker="o", ms=3)
    ax.axhline(plan.power, color="#888", lw=1, ls="--")
    ax.set_xlabel("true difference of means (SD units)")
    ax.set_ylabel("power")
    ax.set_title("(a) power of the least powered pair", fontsize=10)
    plots.numeric_ticks(ax.xaxis)
    plots.numeric_ticks(ax.yaxis)
    ax = axes[1]
    c = plan.curve
    ax.plot(c["subjects"], c["mean_difference_sd"], color=plots.PALETTE[0], marker="o", ms=3, label="mean (SD units)")
    ax.plot(c["subjects"], c["rate_rise"], color=plots.PALETTE[1], marker="o", ms=3,
            label=f"rate rise from {plan.base_rate:g}")
    ax.set_xscale("log")
    plots.log_ticks(ax.xaxis, float(c["subjects"].min()), float(c["subjects"].max()))
    plots.numeric_ticks(ax.yaxis)
    ax.set_xlabel("subjects per group (two equal groups)")
    ax.set_ylabel(f"detectable difference at {plan.power:.0%} power")
    ax.set_title("(b) smallest detectable difference", fontsize=10)
    ax.legend(fontsize=8, frameon=False)
    for ax in axes:
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def model_power_section(plan, *, title: str = "Planning a model audit") -> Section:
    """The section of ``fairvision power model`` (docs/METHODS.md §6.7)."""
    sec = Section("model_power", title)
    sec.text(f"Smallest difference between two groups that a two-sided test detects with {plan.power:.0%} power at "
             f"alpha = {plan.alpha:g}, corrected over {plan.n_tests} group pair(s): each comparison is planned at "
             f"alpha = {plan.alpha_per_test:.3g} (Bonferroni, the planning bound for the {plan.correction} correction). "
             f"Each subject gives {plan.images_per_subject:g} image(s) with intraclass correlation {plan.icc:g}, a "
             f"design effect of {1 + (plan.images_per_subject - 1) * plan.icc:.3g}.")
    worst = plan.pairs.loc[plan.pairs["mean_difference_sd"].idxmax()]
    sec.metrics("key_figures", {"group pairs": plan.n_tests, "alpha per pair": plan.alpha_per_test,
                                "largest detectable mean gap (SD)": float(worst["mean_difference_sd"]),
                                "largest detectable rate rise": float(plan.pairs["rate_rise"].max())})
    sec.table("pairs", plan.pairs.set_index(["group_a", "group_b"]),
              caption=f"Per pair: effective sizes, detectable mean difference (units of SD = {plan.sd:g}, and SD "
                      f"units) and detectable rise and fall of a rate around {plan.base_rate:g} (NaN: not detectable).")
    sec.figure("power_curve", _model_figure(plan),
               caption="(a) Power against the true mean difference for the least powered pair; (b) detectable "
                       "difference against subjects per group for two equal groups.",
               data={"power_curve": plan.power_curve.to_dict(orient="list"), "curve": plan.curve.to_dict(orient="list")})
    sec.table("curve", plan.curve.set_index("subjects"), caption="Detectable differences for two equal groups.")
    sec.finding(f"The least powered pair ({worst['group_a']} vs {worst['group_b']}) detects a mean difference of "
                f"{num(float(worst['mean_difference_sd']))} SD with {plan.power:.0%} power; smaller gaps may go unseen",
                "medium" if worst["mean_difference_sd"] > 0.5 else "info", target="pairs",
                quantity="mean_difference_sd.max", value=float(worst["mean_difference_sd"]))
    return sec


def _catalog_figure(plan):
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8), sharey=True)
    sizes = plan.power.index.get_level_values("n").unique().to_numpy()
    for ax, side, label in ((axes[0], "below", f"RR = {plan.target_nrr:g}"),
                            (axes[1], "above", f"RR = {1 / plan.target_nrr:.3g}")):
        sub = plan.power.xs(side, level="side")
        for i, col in enumerate(sub.columns):
            style = dict(lw=2.2, color="black") if col == "omnibus" else dict(lw=1.2, color=plots.PALETTE[i % len(plots.PALETTE)])
            ax.plot(sizes, sub[col].to_numpy(dtype=float), marker="o", ms=3, label=str(col), **style)
        ax.axhline(plan.target, color="#888", lw=1, ls="--")
        ax.set_xscale("log")
        plots.log_ticks(ax.xaxis, float(sizes.min()), float(sizes.max()))
        plots.numeric_ticks(ax.yaxis)
        ax.set_ylim(0, 1)
        ax.set_xlabel("catalog size n")
        ax.set_ylabel("power")
        ax.set_title(f"power at {label}", fontsize=10)
        ax.legend(fontsize=7, frameon=False, ncol=2)
        ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def catalog_power_section(plan, *, title: str = "Planning a retrieval audit") -> Section:
    """The section of ``fairvision power retrieval`` (docs/METHODS.md §8.3)."""
    sec = Section("retrieval_power", title)
    sec.text(f"Monte Carlo power (Algorithm 1, {plan.trials:,} trials per point) of the omnibus and contrast tests at "
             f"alpha = {plan.alpha:g} with K = {plan.k} results per query, for a bias of nRR = {plan.target_nrr:g} "
             f"(RR = {plan.target_nrr:g} below parity and {1 / plan.target_nrr:.3g} above), and the catalog size at "
             f"which each test reaches {plan.target:.0%} power on both sides.")
    omni = float(plan.needed.loc["omnibus", "n_needed"])
    sec.metrics("key_figures", {"values": len(plan.shares), "K": plan.k, "target nRR": plan.target_nrr,
                                "items needed (omnibus)": omni})
    sec.figure("power_curve", _catalog_figure(plan),
               caption=f"Power against catalog size at nRR = {plan.target_nrr:g}; the dashed line is the target power.",
               data={"power": plan.power.reset_index().to_dict(orient="list")})
    sec.table("power", plan.power, caption="Power per catalog size and side of parity (below: RR = nRR; above: RR = 1/nRR).")
    sec.table("items_needed", plan.needed, caption="Catalog size at which each test reaches the target power on both "
              "sides (inf: more than the largest size searched).")
    hard = plan.needed["n_needed"].drop("omnibus")
    if len(hard):
        worst = hard.idxmax()
        txt = f"{int(hard.max()):,}" if np.isfinite(hard.max()) else "more than the largest size searched"
        sec.finding(f"Detecting nRR = {plan.target_nrr:g} needs about {int(omni):,} items for the omnibus test and "
                    f"{txt} for the contrast of {worst}" if np.isfinite(omni) else
                    f"The omnibus test does not reach {plan.target:.0%} power at nRR = {plan.target_nrr:g} within the sizes searched",
                    "info", target="items_needed", quantity="n_needed.omnibus", value=omni if np.isfinite(omni) else None)
    return sec
