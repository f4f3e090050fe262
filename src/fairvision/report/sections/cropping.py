"""Report section of the cropping audit: Elo ratings by group, pairwise comparisons, win rates, position bias.

Turns a :class:`fairvision.audits.cropping.CroppingResult` into a :class:`fairvision.report.Section`
(docs/METHODS.md §6.9). No face images: the report shows ratings and counts only.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from fairvision.audits.gates import describe, quantity_key
from fairvision.report import Section
from fairvision.report import plots  # sets the Agg backend before any figure is drawn
from fairvision.report.findings import GAP_LARGE, ci_text, count_of, num, p_text, pct, test_severity

#: groups beyond which the rating plot shows no individual faces (they would hide the intervals)
_MAX_POINT_GROUPS = 12
#: most faces drawn as points in the rating plot
_MAX_POINTS = 4000
#: median games per face below which the report warns that the ratings barely moved (the paper: about 60)
FEW_GAMES = 10


def cropping_section(result, *, conditions: list[dict] | None = None,
                     title: str = "Cropping audit: Elo ratings by group") -> Section:
    """Build the report section of a cropping audit.

    Parameters
    ----------
    result : CroppingResult
    conditions : list of dict, optional
        Evaluated ``--fail-if`` conditions (from ``evaluate_conditions``).
    title : str
    """
    orders = (f"averaged over {result.n_orders:,} random orders of the games" if result.n_orders
              else "in the order of the table")
    sec = Section("cropping", title, intro=(
        f"Every composite is a game between its two faces, won by the face the crop kept. Each face gets an Elo "
        f"rating (M = {num(result.m, 0)}, K = {num(result.k, 0)}, initial {num(result.initial, 0)}) {orders}; a "
        f"higher rating means the cropper keeps that face more often. A group's rating is the mean of its faces' "
        f"ratings, with a {int(result.level * 100)}% interval from {result.n_boot:,} bootstrap replicates that "
        f"resample both the subjects and the orders (a group's mean varies with who is in it and with the order of "
        f"the games). Two groups differing by d points imply that the first is kept in 1 / (1 + 10^(-d / M)) of "
        f"their games. Pairs of groups are compared with t-tests on one mean rating per subject, "
        f"{result.correction}-corrected (alpha {result.alpha}); groups with fewer than {result.min_subjects} "
        f"subjects are listed but not tested (docs/METHODS.md §6.9)."))
    q = result.quantities()
    pos = result.position
    sec.metrics("overview", {
        "rows read": result.n_rows, "games rated": result.n_games, "games without a winner": result.n_none,
        "rows left out": result.n_left_out, "faces": len(result.players), "groups": len(result.groups),
        "orders": result.n_orders, "pairs that differ": int(q["significant"]),
        f"won by the {result.position_name} face": pct(pos.estimate, 1),
    })
    add_findings(sec, result, conditions)
    if conditions:
        sec.note("; ".join(describe(c) for c in conditions), "finding" if any(c["holds"] for c in conditions) else "info")
    if result.n_left_out:
        cov = result.coverage
        sec.note(f"{cov.n_left_out:,} of {cov.n:,} rows are left out of the ratings ({cov.reasons_text()}); the "
                 "coverage section tests whether the share left out differs by pair of groups (docs/METHODS.md §9.3).",
                 "warning")
    if games_per_face(result) < FEW_GAMES:
        sec.note(f"A face played a median of {_games_text(result, 'rated game')} (the paper: about 60). "
                 f"Each game moves a rating by at most K = {num(result.k, 0)} points, so the ratings stay close to "
                 f"{num(result.initial, 0)} and differences between groups are hard to detect; the direct win rates "
                 "below show the raw choices. Build the benchmark with more composites per pair (--per-pair).",
                 "warning")
    small = result.groups[result.groups["too_small"].astype(bool)]
    if len(small):
        sec.note(f"{count_of(len(small), 'group')} ({', '.join(small['group'])}) {'has' if len(small) == 1 else 'have'} "
                 f"fewer than {result.min_subjects} subjects: listed with their ratings, not tested.", "warning")
    _rating_figure(sec, result)
    sec.table("groups", result.groups, f"Elo rating by {result.attribute}: mean of the faces' ratings with the "
              "two-stage bootstrap interval; sd_orders is how much the group mean moves from one order to another",
              highlight="too_small")
    if len(result.comparisons):
        c = result.comparisons.sort_values(["significant", "pvalue_adjusted"], ascending=[False, True], kind="stable")
        sec.table("comparisons", c, "Every pair of judged groups: rating difference (a - b) with its interval, the "
                  "preference of a over b it implies, and the corrected t-test", max_rows=60, highlight="significant")
    _position_block(sec, result)
    if len(result.wins):
        _wins_figure(sec, result)
        sec.table("wins", result.wins, "Direct games between two groups: wins of the row's group (Wilson "
                  "interval); games without a winner are counted apart, not as games", max_rows=60)
    shown = result.players.sort_values("elo", ascending=False, kind="stable")
    sec.table("players", shown, "Every face's rating (mean over the orders) and its spread over the orders",
              max_rows=40)
    return sec


def _rating_figure(sec: Section, result) -> None:
    """Fig. 3 of the paper: the faces' ratings by group, the group means with their intervals, the initial rating."""
    g = result.groups
    n = len(g)
    fig, ax = plt.subplots(figsize=(max(4.5, 0.9 * n + 2.5), 3.8))
    x = np.arange(n)
    players = result.players
    if n <= _MAX_POINT_GROUPS and len(players) <= _MAX_POINTS:
        rng = np.random.default_rng(0)  # jitter only; the figure is the same on every run
        pos = {grp: i for i, grp in enumerate(g["group"])}
        px = players["group"].map(lambda v: pos.get(str(v), np.nan)).to_numpy(dtype=float)
        ax.scatter(px + rng.uniform(-0.18, 0.18, len(px)), players["elo"], s=7, color="#bbbbbb", lw=0,
                   label="a face (mean over orders)", zorder=1)
    est = g["elo"].to_numpy(dtype=float)
    err = np.vstack([est - g["ci_low"].to_numpy(dtype=float), g["ci_high"].to_numpy(dtype=float) - est])
    colours = [plots.PALETTE[1] if s else plots.PALETTE[0] for s in g["too_small"].astype(bool)]
    for i in range(n):
        e = err[:, i:i + 1]
        ax.errorbar(x[i], est[i], yerr=np.where(np.isfinite(e), np.clip(e, 0, None), 0), fmt="o", ms=6, capsize=4,
                    color=colours[i], zorder=3, label="group mean" if i == 0 else None)
    ax.axhline(result.initial, color="#888", lw=1, ls="--", label=f"initial rating {num(result.initial, 0)}", zorder=2)
    labels = [str(v) for v in g["group"]]
    tilt = n > 5 or sum(len(t) for t in labels) > 7 * n  # long labels side by side overlap
    ax.set_xticks(x, labels, rotation=30 if tilt else 0, ha="right" if tilt else "center",
                  rotation_mode="anchor" if tilt else "default")
    ax.set_xlabel(result.attribute)
    ax.set_ylabel("Elo rating")
    plots.numeric_ticks(ax.yaxis)
    ax.set_title(f"Elo rating by {result.attribute} ({int(result.level * 100)}% intervals)", fontsize=11)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    sec.figure("ratings", fig, f"Elo rating by {result.attribute}: every face (grey), the group means with their "
               "intervals (red: too small to test) and the initial rating (dashed)",
               data=g[["group", "elo", "ci_low", "ci_high"]].to_dict("list"))


def _wins_figure(sec: Section, result) -> None:
    w = result.wins
    labels = sorted(set(w["group"]) | set(w["opponent"]), key=str)
    mat = pd.DataFrame(np.nan, index=pd.Index(labels, name="group"), columns=pd.Index(labels, name="opponent"))
    for _, r in w.iterrows():
        mat.loc[r["group"], r["opponent"]] = r["win_rate"]
    fig = plots.heatmap(mat, title="Share of games the row's group won against the column's", fmt="{:.0%}",
                        center=0.5, vmin=0.0, vmax=1.0, cbar_label="win rate")
    sec.figure("wins_heatmap", fig, "Win rate of every group (rows) against every other group (columns) in their "
               "direct games; 50% is no preference", data={"groups": labels, "win_rate": mat.to_numpy().tolist()})


def _position_block(sec: Section, result) -> None:
    pos = result.position
    name = result.position_name
    sec.metrics("position", {f"won by the {name} face": pct(pos.estimate, 1),
                             "interval": f"{pct(pos.ci_low, 1)} to {pct(pos.ci_high, 1)}",
                             "games": pos.games, "p (binomial, 1/2)": p_text(pos.pvalue, adjusted=False)},
                caption=f"Position bias: share of decided games won by the {name} face")
    sec.text(f"Position bias: a cropper that keeps the {name} face more often than half the time prefers a place in "
             "the composite, not a group. The benchmark puts each group on top equally often, so position bias "
             "does not favour any group, but a strong one drowns the comparison of groups: the ratings then "
             "mostly record which face happened to be on top.")


def _direct_text(result, win: str, lose: str) -> str:
    """``"; in their direct games ..."``: the share of the games between the two groups that kept ``win``. The
    Elo preference shrinks towards one half when the faces played few games (K = 16 moves a rating little per
    game), so the finding gives the raw share beside it (docs/METHODS.md §6.9)."""
    w = result.wins
    row = w[(w["group"].astype(str) == str(win)) & (w["opponent"].astype(str) == str(lose))] if len(w) else w
    if not len(row) or not row["games"].iloc[0]:
        return ""
    r = row.iloc[0]
    return (f"; in their direct games the crop kept {win} in {pct(r['win_rate'], 1)}"
            f"{ci_text(r['ci_low'], r['ci_high'], lambda v: pct(v, 1))} of {count_of(int(r['games']), 'game')}")


def games_per_face(result) -> float:
    """The median number of rated games of a face."""
    return float(np.median(result.players["games"])) if len(result.players) else 0.0


def _games_text(result, word: str = "game") -> str:
    """``"1 game"``, ``"2.5 games"``: the median games per face."""
    n = games_per_face(result)
    return f"{num(n, 1 if n % 1 else 0)} {word if n == 1 else word + 's'}"


def _caveats(result) -> str:
    """What a finding of no difference does not cover: groups too small to test, and ratings that barely moved
    because the faces played few games."""
    out = ""
    small = result.groups.loc[result.groups["too_small"].astype(bool), "group"].astype(str).tolist()
    if small:
        out += f"; {', '.join(small)} not tested (fewer than {result.min_subjects} subjects)"
    if games_per_face(result) < FEW_GAMES:
        out += (f"; with a median of {_games_text(result)} per face the ratings stay close to "
                f"{num(result.initial, 0)} and the test has little power")
    return out


def add_findings(sec: Section, result, conditions: list[dict] | None = None) -> None:
    """Findings of a cropping audit (docs/METHODS.md §9.1): failed gates; for each pair of groups that differs
    significantly (at most three, the largest first) which group the cropper prefers and by how much; when no
    pair differs, one info finding; position bias when the binomial test rejects one half."""
    for c in conditions or []:
        if c["holds"]:
            sec.finding(f"--fail-if {describe(c)}", "high", target="overview", quantity=c.get("name"), value=c.get("value"))
    comp = result.comparisons
    attr = result.attribute
    sig = comp[comp["significant"].astype(bool)] if len(comp) else comp
    if len(sig):
        sig = sig.assign(_gap=sig["elo_difference"].abs()).sort_values("_gap", ascending=False, kind="stable")
        for _, r in sig.head(3).iterrows():
            a_first = r["elo_difference"] >= 0
            win, lose = (r["group_a"], r["group_b"]) if a_first else (r["group_b"], r["group_a"])
            pref = r["preference"] if a_first else 1 - r["preference"]
            lo, hi = ((r["preference_ci_low"], r["preference_ci_high"]) if a_first
                      else (1 - r["preference_ci_high"], 1 - r["preference_ci_low"]))
            elo_w, elo_l = (r["elo_a"], r["elo_b"]) if a_first else (r["elo_b"], r["elo_a"])
            sec.finding(f"The cropper prefers {attr} = {win} over {lose}: mean Elo {num(elo_w, 0)} against "
                        f"{num(elo_l, 0)}, a difference of {num(abs(r['elo_difference']), 0)} points, an Elo "
                        f"preference of {pct(pref, 1)}{ci_text(lo, hi, lambda v: pct(v, 1))}"
                        f"{_direct_text(result, win, lose)}; {p_text(r['pvalue_adjusted'])}",
                        test_severity(r["pvalue_adjusted"], result.alpha, pref - 0.5, GAP_LARGE), target="comparisons",
                        quantity=f"preference_pct.{quantity_key(r['group_a'])}.{quantity_key(r['group_b'])}",
                        value=100 * r["preference"],
                        ci_low=100 * r["preference_ci_low"], ci_high=100 * r["preference_ci_high"],
                        pvalue=r["pvalue_adjusted"], size=2 * (pref - 0.5), topic=f"cropping:{attr}:{win}:{lose}")
    elif len(comp):
        top = comp.assign(_gap=comp["elo_difference"].abs()).sort_values("_gap", ascending=False).iloc[0]
        pref = max(top["preference"], 1 - top["preference"])
        sec.finding(f"No pair of {attr} groups differs significantly in Elo rating ({result.correction} correction); "
                    f"the largest difference, {num(top['_gap'], 0)} points between {top['group_a']} and "
                    f"{top['group_b']}, would mean a {pct(pref, 1)} preference{_caveats(result)}", "info",
                    target="comparisons", quantity="max_preference_pct", value=100 * pref)
    else:
        sec.finding(f"Fewer than two {attr} groups have {result.min_subjects} subjects or more: no pair is tested",
                    "info", target="groups")
    pos = result.position
    if np.isfinite(pos.pvalue) and pos.pvalue < result.alpha:
        side = result.position_name
        sec.finding(f"Position bias: the {side} face is kept in {pct(pos.estimate, 1)}"
                    f"{ci_text(pos.ci_low, pos.ci_high, lambda v: pct(v, 1))} of {pos.games:,} games "
                    f"({p_text(pos.pvalue, adjusted=False)}); the cropper favours a place in the composite, which "
                    "does not favour a group but blurs the comparison of groups",
                    "high" if abs(pos.estimate - 0.5) >= 0.25 else "medium", target="position",
                    quantity="position_share", value=pos.estimate, ci_low=pos.ci_low, ci_high=pos.ci_high,
                    pvalue=pos.pvalue, size=2 * abs(pos.estimate - 0.5))
