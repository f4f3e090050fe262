"""Cropping audit: Elo ratings of faces from a saliency cropper's choices, compared by group.

A cropper shown a composite of two faces keeps one; every composite is a game between the two faces, won by the
face kept (Thong et al. §4.2.1). From the games table that ``fairvision benchmark cropping run`` writes (or any
table with columns ``a``, ``b``, ``winner`` plus a groups table):

* every face's Elo rating, averaged over random orders of the games (:func:`fairvision.stats.rating.elo_orders`);
* per group: players, subjects, games, wins and the mean rating with a two-stage bootstrap interval over subjects
  and orders (:func:`fairvision.stats.rating.group_elo`); groups below ``min_subjects`` are reported, not tested;
* every pair of groups: the rating difference with its interval, the preference it implies
  (:func:`fairvision.stats.rating.expected_score`) and a corrected t-test
  (:func:`fairvision.stats.rating.compare_elo_groups`, on one mean rating per subject);
* direct win rates of every ordered pair of groups (:func:`fairvision.stats.rating.win_rates`);
* position bias: the share of games the top face won (:func:`fairvision.stats.rating.position_bias`);
* games without a winner (``none``) and unusable rows are left out and counted by pair of groups
  (:func:`fairvision.audits.coverage.audit_coverage`).

See docs/METHODS.md §6.9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fairvision.audits.coverage import Coverage, audit_coverage
from fairvision.audits.gates import quantity_key
from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings, SettingsView
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.scores import class_labels
from fairvision.io.validate import empty_cells, require_columns
from fairvision.stats.rating import (compare_elo_groups, elo_orders, expected_score, group_elo, position_bias,
                                     win_rates)
from fairvision.stats.resample import percentile_ci

#: the games table's columns that the full format (``benchmark cropping run``) adds to ``a``, ``b``, ``winner``
FULL_COLUMNS = ("top_group", "bottom_group")
#: reasons a row of the games table is left out of the ratings
NONE_REASON = "none (the crop kept neither face)"


@dataclass
class CroppingResult(SettingsView):
    """Everything the cropping audit found (docs/METHODS.md §6.9).

    Attributes
    ----------
    attribute : str
        Name of the grouping (the games table's ``attribute`` column or the groups table's column).
    players : DataFrame
        One row per face: ``player``, ``subject``, ``group``, ``games``, ``wins``, ``elo`` (mean over the
        orders), ``sd_orders``.
    groups : DataFrame
        One row per group: ``group``, ``n_players``, ``n_subjects``, ``n_games``, ``wins``, ``win_share``,
        ``elo``, ``ci_low``, ``ci_high``, ``level``, ``sd_orders``, ``too_small``.
    comparisons : DataFrame
        One row per pair of judged groups: ``group_a``, ``group_b``, ``n_a``, ``n_b`` (subjects), ``elo_a``,
        ``elo_b``, ``elo_difference`` (a - b) with ``ci_low`` / ``ci_high``, ``preference`` (expected share
        of a over b) with ``preference_ci_low`` / ``preference_ci_high``, ``preferred``, ``statistic``,
        ``pvalue``, ``pvalue_adjusted``, ``significant``.
    wins : DataFrame
        Direct win rates of every ordered pair of groups (:func:`~fairvision.stats.rating.win_rates`).
    position : PositionBias
        Share of decided games won by the top (``a``) face.
    coverage : Coverage
        Rows left out (no winner, a missing player or group), by pair of groups.
    """

    attribute: str
    settings: AuditSettings
    m: float
    k: float
    initial: float
    n_orders: int
    n_rows: int
    n_none: int
    full_format: bool
    players: pd.DataFrame = field(default_factory=pd.DataFrame)
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    comparisons: pd.DataFrame = field(default_factory=pd.DataFrame)
    wins: pd.DataFrame = field(default_factory=pd.DataFrame)
    position: object = None
    coverage: Coverage | None = None

    @property
    def n_games(self) -> int:
        """Games that enter the ratings (decided games between two players with a group)."""
        return int(self.position.games) if self.position is not None else 0

    @property
    def n_left_out(self) -> int:
        return self.coverage.n_left_out if self.coverage is not None else 0

    @property
    def position_name(self) -> str:
        """``"top"`` for a benchmark games table, ``"first (a)"`` for a table of a, b, winner only."""
        return "top" if self.full_format else "first (a)"

    def to_frame(self) -> pd.DataFrame:
        """The groups table."""
        return self.groups

    def quantities(self) -> dict[str, float]:
        """Named numbers for ``--fail-if`` (docs/METHODS.md §6.9).

        ``n_rows``, ``n_games``, ``n_none``, ``n_left_out``; ``max_elo_gap`` (the largest rating difference of
        two judged groups) and ``max_preference_pct`` (the preference it implies, in percent); ``min_pvalue``
        (smallest corrected p-value) and ``significant`` (pairs that differ after correction); ``max_win_pct``
        (the largest share of its direct games against another group that a group won, in percent);
        ``position_share`` (share of games won by the top face) and ``position_pvalue``; per group
        ``elo.<group>``; per pair ``elo_gap.<a>.<b>`` and ``preference_pct.<a>.<b>`` (a over b).
        """
        c = self.comparisons
        q: dict[str, float] = {"n_rows": float(self.n_rows), "n_games": float(self.n_games),
                               "n_none": float(self.n_none), "n_left_out": float(self.n_left_out)}
        gaps = c["elo_difference"].abs().dropna() if len(c) else pd.Series(dtype=float)
        q["max_elo_gap"] = float(gaps.max()) if len(gaps) else math.nan
        q["max_preference_pct"] = 100.0 * expected_score(q["max_elo_gap"], self.m) if len(gaps) else math.nan
        ps = c["pvalue_adjusted"].dropna() if len(c) else pd.Series(dtype=float)
        q["min_pvalue"] = float(ps.min()) if len(ps) else math.nan
        q["significant"] = float(c["significant"].astype(bool).sum()) if len(c) else 0.0
        w = self.wins
        rates = w.loc[w["games"] > 0, "win_rate"] if len(w) else pd.Series(dtype=float)
        q["max_win_pct"] = 100.0 * float(rates.max()) if len(rates) else math.nan
        q["position_share"] = float(self.position.estimate)
        q["position_pvalue"] = float(self.position.pvalue)
        for _, g in self.groups.iterrows():
            q[f"elo.{quantity_key(g['group'])}"] = float(g["elo"])
        for _, r in c.iterrows():
            key = f"{quantity_key(r['group_a'])}.{quantity_key(r['group_b'])}"
            q[f"elo_gap.{key}"] = float(r["elo_difference"])
            q[f"preference_pct.{key}"] = 100.0 * float(r["preference"])
        return q


def audit_cropping(
    games: pd.DataFrame,
    *,
    groups: pd.DataFrame | None = None,
    group_col: str = "group",
    attribute: str | None = None,
    m: float = 400.0,
    k: float = 16.0,
    initial: float = 1400.0,
    n_orders: int = 100,
    seed: np.random.Generator | int | None = None,
    settings: AuditSettings | None = None,
    source: str = "games",
    groups_source: str = "groups",
) -> CroppingResult:
    """Elo ratings of faces from a cropper's choices, compared by group (docs/METHODS.md §6.9).

    Parameters
    ----------
    games : pandas.DataFrame
        One row per composite: ``a``, ``b`` (the two faces, ``a`` on top) and ``winner`` (``a``, ``b`` or
        empty when the crop kept neither). The benchmark's table adds ``top_group`` / ``bottom_group``,
        ``top_subject_id`` / ``bottom_subject_id``, ``attribute`` and ``kept`` (top, bottom, none).
    groups : pandas.DataFrame, optional
        ``sample_id`` and ``group_col`` (optionally ``subject_id``): the group of every face; needed when the
        games table has no ``top_group`` / ``bottom_group``, and used instead of them when given.
    group_col : str
        Group column of ``groups``.
    attribute : str, optional
        With a games table that holds several attributes (its ``attribute`` column), the one to audit.
    m, k, initial : float
        Elo scale M, update factor K and initial rating (400, 16, 1400 as the paper).
    n_orders : int
        Random orders of the games the ratings are averaged over (0: the table's order only).
    seed : int, numpy.random.Generator or None
        Randomness of the orders (default: ``settings.seed``); the bootstrap uses ``settings.seed``.
    settings : AuditSettings, optional
        ``n_boot``, ``level`` (intervals), ``correction``, ``alpha`` (tests), ``min_subjects`` (smaller groups
        are reported, not tested).
    source, groups_source : str
        Names of the tables in error messages.

    Returns
    -------
    CroppingResult
    """
    settings = settings or DEFAULT_SETTINGS
    seed = settings.seed if seed is None else seed
    for name, v in (("m", m), ("k", k)):
        if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
            raise ParameterError(name, f"must be a positive number, not {v!r}")
    if not (isinstance(initial, (int, float)) and math.isfinite(initial)):
        raise ParameterError("initial", f"must be a number, not {initial!r}")
    if not (isinstance(n_orders, (int, np.integer)) and n_orders >= 0):
        raise ParameterError("n_orders", f"must be a whole number of at least 0, not {n_orders!r}")
    require_columns(games, ["a", "b", "winner"], source=source, what="games column")
    games, attr_name = _one_attribute(games, attribute, source)
    full = all(c in games.columns for c in FULL_COLUMNS)
    if groups is None and not full:
        raise ColumnError(f"{source}: no group columns (top_group, bottom_group); give a groups table "
                          "(sample_id and a group column) for a table of a, b, winner only")
    n = len(games)
    if n == 0:
        raise FairvisionError(f"{source}: the table has no rows")
    pa, pb, pw = _players(games, source)
    ga, gb, sa, sb, attr_name = _groups_and_subjects(games, pa, pb, groups, group_col, attr_name, source,
                                                     groups_source)
    none = pw == ""
    _check_kept(games, pa, pb, pw, source)
    reason = np.full(n, "", dtype=object)
    masks = [(pa == "", "missing face"), (pb == "", "missing face"), ((pa == pb) & (pa != ""), "a face against itself"),
             (((ga == "") | (gb == "")) & (pa != "") & (pb != ""), "face without a group"), (none, NONE_REASON)]
    for mask, text in masks:
        first = mask & (reason == "")
        reason[first] = text
    ok = reason == ""
    pair = np.where((ga == "") | (gb == ""), "(no group)", _pair_labels(ga, gb))
    coverage = audit_coverage(pd.DataFrame({"pair": pair}), ok, ["pair"], step="cropping games",
                              settings=settings, reasons=np.where(ok, None, reason), unit="games")
    if not ok.any():
        raise FairvisionError(f"{source}: no game has a winner and two faces with a group "
                              f"({coverage.reasons_text()})")
    res = CroppingResult(attribute=attr_name, settings=settings, m=float(m), k=float(k), initial=float(initial),
                         n_orders=int(n_orders), n_rows=n, n_none=int(none.sum()), full_format=full,
                         coverage=coverage)
    _rate(res, pa[ok], pb[ok], pw[ok], ga[ok], gb[ok], sa[ok], sb[ok], seed)
    counted = (reason == "") | (reason == NONE_REASON)  # decided games and ties between two grouped faces
    outcome = np.where(none, np.nan, (pw == pa).astype(float))
    res.wins = win_rates(ga[counted], gb[counted], outcome[counted], level=settings.level)
    res.position = position_bias(pw[ok] == pa[ok], level=settings.level)
    return res


def _one_attribute(games: pd.DataFrame, attribute: str | None, source: str) -> tuple[pd.DataFrame, str | None]:
    """The rows of one attribute of a games table that holds several (its ``attribute`` column)."""
    if "attribute" not in games.columns:
        if attribute is not None:
            raise ColumnError(f"{source}: no 'attribute' column to choose attribute {attribute!r} from")
        return games, None
    values = pd.Series(games["attribute"]).dropna().astype(str)
    found = sorted(values.unique())
    if attribute is None:
        if len(found) > 1:
            raise FairvisionError(f"{source}: games of several attributes ({', '.join(found)}); choose one "
                                  "(--attribute)")
        return games, found[0] if found else None
    if attribute not in found:
        raise FairvisionError(f"{source}: no games of attribute {attribute!r}; the table has {', '.join(found)}")
    return games[games["attribute"].astype(str) == attribute].reset_index(drop=True), attribute


def _text(col: pd.Series) -> np.ndarray:
    """Cell values as comparable text (1, 1.0 and "1" alike); empty cells as ""."""
    empty = empty_cells(col)
    out = pd.Series(class_labels(col), dtype=object).str.strip().to_numpy(dtype=object, copy=True)
    out[empty] = ""
    return out


def _players(games: pd.DataFrame, source: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Faces a, b and the winner as text; a winner that is neither face is an error naming the row."""
    pa, pb, pw = _text(games["a"]), _text(games["b"]), _text(games["winner"])
    bad = (pw != "") & (pw != pa) & (pw != pb)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ColumnError(f"{source}: row {r + 1}: winner {pw[r]!r} is neither a ({pa[r]!r}) nor b ({pb[r]!r})")
    return pa, pb, pw


def _check_kept(games: pd.DataFrame, pa, pb, pw, source: str) -> None:
    """The benchmark's ``kept`` column (top, bottom, none) must agree with ``winner``."""
    if "kept" not in games.columns:
        return
    kept = _text(games["kept"])
    expect = np.where(pw == "", "none", np.where(pw == pa, "top", "bottom"))
    bad = (kept != "") & (kept != expect) & (pa != pb)  # a face against itself is left out anyway
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        raise ColumnError(f"{source}: row {r + 1}: kept is {kept[r]!r} but winner is "
                          f"{pw[r] or 'empty'!r} (a {pa[r]!r}, b {pb[r]!r})")


def _groups_and_subjects(games, pa, pb, groups, group_col, attr_name, source, groups_source):
    """Group and subject of both faces of every game, from the games table or a groups table."""
    if groups is not None:
        require_columns(groups, ["sample_id"], source=groups_source, what="face id column")
        require_columns(groups, [group_col], source=groups_source, what="group column")
        ids, labels = _text(groups["sample_id"]), _text(groups[group_col])
        subj = _text(groups["subject_id"]) if "subject_id" in groups.columns else ids
        frame = pd.DataFrame({"id": ids, "group": labels, "subject": subj})
        frame = frame[frame["id"] != ""]
        dup = frame.drop_duplicates().duplicated("id", keep=False)
        if dup.any():
            raise FairvisionError(f"{groups_source}: face {frame.loc[dup, 'id'].iloc[0]!r} has two groups or "
                                  "subjects; sample_id must be unique")
        frame = frame.drop_duplicates("id").set_index("id")
        gmap, smap = frame["group"], frame["subject"]
        ga = gmap.reindex(pa).fillna("").to_numpy(dtype=object)
        gb = gmap.reindex(pb).fillna("").to_numpy(dtype=object)
        sa = smap.reindex(pa).fillna("").to_numpy(dtype=object)
        sb = smap.reindex(pb).fillna("").to_numpy(dtype=object)
        return ga, gb, np.where(sa == "", pa, sa), np.where(sb == "", pb, sb), group_col
    ga, gb = _text(games["top_group"]), _text(games["bottom_group"])
    sa = _text(games["top_subject_id"]) if "top_subject_id" in games.columns else pa
    sb = _text(games["bottom_subject_id"]) if "bottom_subject_id" in games.columns else pb
    seen = pd.DataFrame({"p": np.r_[pa, pb], "g": np.r_[ga, gb], "row": np.r_[np.arange(len(pa)), np.arange(len(pb))]})
    seen = seen[(seen["p"] != "") & (seen["g"] != "")]
    two = seen.drop_duplicates(["p", "g"]).duplicated("p", keep=False)
    if two.any():
        p = seen.loc[two[two].index[0], "p"]
        rows = seen.loc[seen["p"] == p].drop_duplicates("g")["row"].to_numpy() + 1
        raise ColumnError(f"{source}: face {p!r} has two groups (rows {rows[0]} and {rows[1]})")
    return ga, gb, np.where(sa == "", pa, sa), np.where(sb == "", pb, sb), attr_name or "group"


def _pair_labels(ga: np.ndarray, gb: np.ndarray) -> np.ndarray:
    """``"dark vs light"``: the unordered pair of groups of every game."""
    first = ga <= gb
    lo, hi = pd.Series(np.where(first, ga, gb), dtype=object), pd.Series(np.where(first, gb, ga), dtype=object)
    return (lo + " vs " + hi).to_numpy(dtype=object)


def _rate(res: CroppingResult, pa, pb, pw, ga, gb, sa, sb, seed) -> None:
    """Ratings over random orders, per-face and per-group tables, the pairwise comparisons."""
    settings = res.settings
    n = len(pa)
    codes, players = pd.factorize(pd.Series(np.r_[pa, pb]), sort=False)
    ia, ib = codes[:n], codes[n:]
    P = len(players)
    pgroup = np.empty(P, dtype=object)
    pgroup[ia], pgroup[ib] = ga, gb
    psubj = np.empty(P, dtype=object)
    psubj[ia], psubj[ib] = sa, sb
    a_won = pw == pa
    R = elo_orders(ia, ib, a_won, P, n_orders=res.n_orders, m=res.m, k=res.k, initial=res.initial, seed=seed)
    games = np.bincount(ia, minlength=P) + np.bincount(ib, minlength=P)
    wins = np.bincount(np.where(a_won, ia, ib), minlength=P)
    res.players = pd.DataFrame({"player": players.astype(str), "subject": psubj, "group": pgroup, "games": games,
                                "wins": wins, "elo": R.mean(axis=0),
                                "sd_orders": R.std(axis=0, ddof=1) if R.shape[0] > 1 else np.zeros(P)})
    gcodes, glabels = pd.factorize(pd.Series(pgroup), sort=True)
    scodes, _ = pd.factorize(pd.Series(psubj), sort=False)
    G = len(glabels)
    ge = group_elo(R, gcodes, scodes, n_groups=G, n_boot=settings.n_boot, level=settings.level,
                   seed=_bootstrap_stream(settings.seed))
    # games: decided games with a face of the group (a game within the group counts once)
    ca = pd.Categorical(ga, categories=glabels).codes.astype(np.int64)
    cb = pd.Categorical(gb, categories=glabels).codes.astype(np.int64)
    involved = np.bincount(ca, minlength=G) + np.bincount(cb, minlength=G) - np.bincount(ca[ca == cb], minlength=G)
    won = np.bincount(np.where(a_won, ca, cb), minlength=G)
    t = ge.table
    too_small = t["n_subjects"].to_numpy() < settings.min_subjects
    with np.errstate(invalid="ignore", divide="ignore"):
        res.groups = pd.DataFrame({"group": glabels.astype(str), "n_players": t["n_players"], "n_subjects": t["n_subjects"],
                                   "n_games": involved, "wins": won, "win_share": won / involved,
                                   "elo": t["estimate"], "ci_low": t["ci_low"], "ci_high": t["ci_high"],
                                   "level": t["level"], "sd_orders": t["sd_orders"], "too_small": too_small})
    res.comparisons = _compare(res, ge, glabels, gcodes, scodes, too_small)


def _bootstrap_stream(seed):
    """The bootstrap's randomness: a generator as given (it goes on after the orders), else a stream of its own
    derived from the seed, so that the bootstrap does not reuse the random numbers of the orders."""
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(None if seed is None else [int(seed), 1])


def _compare(res: CroppingResult, ge, glabels, gcodes, scodes, too_small) -> pd.DataFrame:
    """t-tests of one mean rating per subject and group, between every pair of judged groups, corrected."""
    settings = res.settings
    unit = pd.DataFrame({"g": gcodes, "s": scodes, "elo": res.players["elo"].to_numpy()})
    unit = unit[~too_small[unit["g"].to_numpy()]]
    means = unit.groupby(["g", "s"], sort=True)["elo"].mean().reset_index()
    labels = pd.Series(np.asarray(glabels, dtype=object)[means["g"].to_numpy()])
    cols = ["group_a", "group_b", "n_a", "n_b", "elo_a", "elo_b", "elo_difference", "ci_low", "ci_high",
            "preference", "preference_ci_low", "preference_ci_high", "preferred", "statistic", "pvalue",
            "pvalue_adjusted", "significant"]
    if labels.nunique() < 2:
        return pd.DataFrame(columns=cols)
    tests = compare_elo_groups(means["elo"].reset_index(drop=True), labels, correction=settings.correction,
                               alpha=settings.alpha)
    index = {str(g): i for i, g in enumerate(glabels)}
    est = ge.table["estimate"].to_numpy()
    ia = tests["group_a"].map(lambda g: index[str(g)]).to_numpy()
    ib = tests["group_b"].map(lambda g: index[str(g)]).to_numpy()
    diff = est[ia] - est[ib]
    if ge.replicates.shape[0]:
        lo, hi = percentile_ci(ge.replicates[:, ia] - ge.replicates[:, ib], settings.level)
    else:
        lo, hi = np.full(len(ia), np.nan), np.full(len(ia), np.nan)
    out = tests.rename(columns={"mean_a": "elo_a", "mean_b": "elo_b"})
    out["group_a"], out["group_b"] = out["group_a"].astype(str), out["group_b"].astype(str)
    out["elo_a"], out["elo_b"] = est[ia], est[ib]
    out["elo_difference"], out["ci_low"], out["ci_high"] = diff, lo, hi
    out["preference"] = expected_score(diff, res.m)
    out["preference_ci_low"] = expected_score(np.asarray(lo, dtype=float), res.m)
    out["preference_ci_high"] = expected_score(np.asarray(hi, dtype=float), res.m)
    out["preferred"] = np.where(diff > 0, out["group_a"], np.where(diff < 0, out["group_b"], ""))
    out["significant"] = out["significant"].astype(bool)
    return out[cols]
