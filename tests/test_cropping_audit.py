"""The cropping audit (docs/METHODS.md §6.9): Elo against a sequence worked by hand, random orders against a
plain loop, win rates against a count by hand, group means against pandas, planted biased and fair croppers,
position bias, and the command's exit codes."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from fairvision.audits.cropping import audit_cropping
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.errors import ColumnError, FairvisionError
from fairvision.stats.rating import elo, elo_orders, expected_score, group_elo, position_bias, win_rates

FAST = AuditSettings(n_boot=200)


def games_table(n_players=40, n_games=1200, p_x=0.8, seed=0, none_share=0.05, top_share=None) -> pd.DataFrame:
    """A benchmark games table: players s000.. alternate between groups X and Y (subject p<id>); in a game between
    the groups X wins with probability ``p_x``; within a group a coin decides; ``top_share`` instead makes the top
    face win with that probability whatever the groups; ``none_share`` of the games keep neither face."""
    rng = np.random.default_rng(seed)
    ids = np.array([f"s{i:03d}" for i in range(n_players)])
    grp = np.where(np.arange(n_players) % 2 == 0, "X", "Y")
    i = rng.integers(0, n_players, n_games)
    j = (i + rng.integers(1, n_players, n_games)) % n_players
    u = rng.random(n_games)
    top_wins = np.where(grp[i] == grp[j], u < 0.5, (u < p_x) == (grp[i] == "X"))
    if top_share is not None:
        top_wins = u < top_share
    kept = np.where(rng.random(n_games) < none_share, "none", np.where(top_wins, "top", "bottom"))
    winner = np.where(kept == "top", ids[i], np.where(kept == "bottom", ids[j], None))
    return pd.DataFrame({"composite_id": [f"c{g}" for g in range(n_games)], "attribute": "skin",
                         "top_sample_id": ids[i], "bottom_sample_id": ids[j], "top_subject_id": np.char.add("p", ids[i]),
                         "bottom_subject_id": np.char.add("p", ids[j]), "top_group": grp[i], "bottom_group": grp[j],
                         "kept": kept, "top_share": 0.6, "bottom_share": 0.4, "a": ids[i], "b": ids[j], "winner": winner})


def _plain_elo(games, m=400.0, k=16.0, init=1400.0):
    """Elo with a plain loop over (a, b, a_won) triples."""
    r = {}
    for a, b, a_won in games:
        ra, rb = r.get(a, init), r.get(b, init)
        pa = 1 / (1 + 10 ** ((rb - ra) / m))
        r[a] = ra + k * (a_won - pa)
        r[b] = rb + k * ((1 - a_won) - (1 - pa))
    return r


# --------------------------------------------------------------------------------------------- Elo numerics


def test_three_games_worked_by_hand():
    # game 1: A (1400) beats B (1400): p_A = 1/(1 + 10^0) = 0.5 -> A = 1400 + 16 * 0.5 = 1408, B = 1392
    # game 2: B (1392) against C (1400), C wins: p_B = 1/(1 + 10^(8/400)) = 1/(1 + 1.0471285) = 0.4884891
    #         B = 1392 - 16 * 0.4884891 = 1384.1841743, C = 1400 + 16 * 0.4884891 = 1407.8158257
    # game 3: A (1408) beats C (1407.8158257): p_A = 1/(1 + 10^(-0.1841743/400)) = 1/(1 + 0.9989404) = 0.5002650
    #         A = 1408 + 16 * (1 - 0.5002650) = 1415.9957592, C = 1407.8158257 - 7.9957592 = 1399.8200665
    a, b, won = np.array([0, 1, 0]), np.array([1, 2, 2]), np.array([1, 0, 1])
    r = elo_orders(a, b, won, 3)[0]
    assert r == pytest.approx([1415.9957592, 1384.1841743, 1399.8200665], abs=1e-6)
    assert r.sum() == pytest.approx(3 * 1400)
    # the audit in the table's order (no random orders) gives the same ratings per face
    games = pd.DataFrame({"a": ["A", "B", "A"], "b": ["B", "C", "C"], "winner": ["A", "C", "A"],
                          "top_group": ["g", "h", "g"], "bottom_group": ["h", "h", "h"]})
    res = audit_cropping(games, n_orders=0, settings=FAST)
    got = res.players.set_index("player")["elo"]
    assert got["A"] == pytest.approx(1415.9957592, abs=1e-6) and got["C"] == pytest.approx(1399.8200665, abs=1e-6)


def test_expected_score_by_hand():
    assert expected_score(0.0) == 0.5
    assert expected_score(400.0) == pytest.approx(10 / 11)  # M points: ten times the odds
    assert expected_score(200.0) == pytest.approx(1 / (1 + 10 ** -0.5))  # 0.7597
    assert expected_score(np.array([-100.0, 100.0])).sum() == pytest.approx(1.0)
    assert expected_score(100.0, m=200.0) == pytest.approx(1 / (1 + 10 ** -0.5))


def test_random_orders_reproducible_and_equal_to_a_plain_loop():
    rng = np.random.default_rng(5)
    n, P = 300, 12
    a = rng.integers(0, P, n)
    b = (a + rng.integers(1, P, n)) % P
    won = rng.random(n) < 0.6
    r1 = elo_orders(a, b, won, P, n_orders=7, seed=3)
    assert np.array_equal(r1, elo_orders(a, b, won, P, n_orders=7, seed=3))
    assert not np.array_equal(r1, elo_orders(a, b, won, P, n_orders=7, seed=4))
    # blocks of orders draw the same orders (one generator, block after block)
    assert np.array_equal(r1, elo_orders(a, b, won, P, n_orders=7, seed=3, block=2))
    orders = np.argsort(np.random.default_rng(3).random((7, n)), axis=1)
    for o in range(7):
        ref = _plain_elo([(a[g], b[g], float(won[g])) for g in orders[o]])
        assert r1[o] == pytest.approx([ref[p] for p in range(P)], abs=1e-9)


def test_win_rates_against_a_count_by_hand():
    ga = ["X", "X", "Y", "Y", "X", "Z", "X"]
    gb = ["Y", "Y", "X", "X", "X", "X", "Y"]
    out = [1, 0, 1, 0, 1, 1, np.nan]  # 1: a won, 0: b won, NaN: none
    w = win_rates(ga, gb, out).set_index(["group", "opponent"])
    # X vs Y: game 1 X won, game 2 Y won, game 3 Y (a) won, game 4 X (b) won, game 7 none -> X 2 of 4
    assert w.loc[("X", "Y"), ["games", "wins", "losses", "none"]].tolist() == [4, 2, 2, 1]
    assert w.loc[("Y", "X"), "wins"] == 2 and w.loc[("X", "Y"), "win_rate"] == 0.5
    # Z vs X: game 6 Z won; X vs X is within a group and not listed
    assert w.loc[("Z", "X"), ["games", "wins"]].tolist() == [1, 1] and w.loc[("X", "Z"), "win_rate"] == 0
    assert ("X", "X") not in w.index and len(w) == 4
    z = stats.norm.ppf(0.975)  # Wilson interval of 2 of 4 by its formula
    half = z * np.sqrt(0.25 / 4 + z**2 / 64) / (1 + z**2 / 4)
    assert w.loc[("X", "Y"), "ci_low"] == pytest.approx(0.5 - half)


def test_group_means_against_pandas():
    rng = np.random.default_rng(1)
    R = 1400 + rng.normal(0, 30, (20, 9))
    groups = np.array([0, 0, 0, 1, 1, 1, 1, 2, -1])  # the last face has no group
    subjects = np.array([0, 0, 1, 2, 3, 4, 5, 6, 7])
    ge = group_elo(R, groups, subjects, n_boot=300, seed=2)
    frame = pd.DataFrame({"elo": R.mean(axis=0), "g": groups})
    ref = frame[frame.g >= 0].groupby("g")["elo"].mean()
    assert ge.table["estimate"].to_numpy() == pytest.approx(ref.to_numpy())
    assert ge.table["n_players"].tolist() == [3, 4, 1] and ge.table["n_subjects"].tolist() == [2, 4, 1]
    per_order = pd.DataFrame(R[:, :3]).mean(axis=1)
    assert ge.table.loc[0, "sd_orders"] == pytest.approx(per_order.std(ddof=1))
    t = ge.table
    assert ((t["ci_low"] <= t["estimate"]) & (t["estimate"] <= t["ci_high"])).all()
    assert ge.replicates.shape == (300, 3)


def test_group_interval_covers_both_sources_of_variation():
    """Two-stage bootstrap: with every order alike only the faces vary, and the interval is the ordinary
    bootstrap's (a loop of resamples here); with every face alike only the orders vary, and the interval is
    mean +- 1.96 SD / sqrt(orders)."""
    rng = np.random.default_rng(8)
    faces = 1400 + rng.normal(0, 20, 40)
    same_orders = np.tile(faces, (30, 1))
    ge = group_elo(same_orders, np.zeros(40, int), n_boot=2000, seed=1)
    boot = np.array([rng.choice(faces, 40).mean() for _ in range(4000)])
    lo, hi = np.quantile(boot, [0.025, 0.975])
    assert ge.table.loc[0, "ci_low"] == pytest.approx(lo, abs=0.15 * (hi - lo))
    assert ge.table.loc[0, "ci_high"] == pytest.approx(hi, abs=0.15 * (hi - lo))
    noise = rng.normal(0, 10, 400)
    same_faces = 1400 + np.tile(noise[:, None], (1, 40))
    ge = group_elo(same_faces, np.zeros(40, int), n_boot=2000, seed=1)
    half = 1.96 * noise.std(ddof=1) / np.sqrt(400)
    t = ge.table.loc[0]
    assert t["estimate"] == pytest.approx(1400 + noise.mean())
    assert (t["ci_high"] - t["ci_low"]) / 2 == pytest.approx(half, rel=0.15)
    assert t["sd_orders"] == pytest.approx(noise.std(ddof=1))


def test_audit_ratings_are_the_elo_function_over_the_same_orders():
    g = games_table(n_games=500)
    res = audit_cropping(g, n_orders=12, seed=4, settings=FAST)
    again = audit_cropping(g, n_orders=12, seed=4, settings=FAST)
    other = audit_cropping(g, n_orders=12, seed=5, settings=FAST)
    pd.testing.assert_frame_equal(res.groups, again.groups)
    assert not np.allclose(res.players["elo"], other.players["elo"])
    decided = g[g["kept"] != "none"]
    ref = elo(decided[["a", "b", "winner"]].reset_index(drop=True), n_orders=12, seed=4)
    got = res.players.set_index("player")
    assert np.allclose(got.loc[ref.index, "elo"], ref["mean"], atol=1e-9)
    assert np.allclose(got.loc[ref.index, "sd_orders"], ref["sd"], atol=1e-9)
    assert (got.loc[ref.index, "games"] == ref["games"]).all()


def test_position_bias_against_scipy():
    pb = position_bias(np.r_[np.ones(70, bool), np.zeros(30, bool)])
    assert pb.estimate == 0.7 and pb.games == 100 and pb.wins == 70
    assert pb.pvalue == pytest.approx(stats.binomtest(70, 100, 0.5).pvalue)
    assert pb.ci_low < 0.7 < pb.ci_high


# --------------------------------------------------------------------------------------------- the audit


def test_planted_bias_is_flagged():
    res = audit_cropping(games_table(p_x=0.8), n_orders=30, settings=FAST)
    g = res.groups.set_index("group")
    assert g.loc["X", "elo"] > res.initial > g.loc["Y", "elo"]
    c = res.comparisons.iloc[0]
    assert c["significant"] and c["preferred"] == "X" and c["preference"] > 0.6
    assert c["ci_low"] > 0 and c["preference"] == pytest.approx(expected_score(c["elo_difference"]))
    q = res.quantities()
    assert q["significant"] == 1 and q["max_preference_pct"] > 60 and q["min_pvalue"] < 1e-6
    # the t-test is Student's on one mean rating per subject (here one face each)
    per = res.players.groupby("group")["elo"]
    ref = stats.ttest_ind(per.get_group("X"), per.get_group("Y"))
    assert c["pvalue"] == pytest.approx(ref.pvalue)
    # direct games: X won about 80% of its games against Y
    w = res.wins.set_index(["group", "opponent"]).loc[("X", "Y")]
    assert 0.75 < w["win_rate"] < 0.85 and w["ci_low"] < 0.8 < w["ci_high"]
    assert res.n_none == (games_table()["kept"] == "none").sum() and res.n_left_out == res.n_none


def test_fair_cropper_is_not_flagged():
    res = audit_cropping(games_table(p_x=0.5, seed=3), n_orders=30, settings=FAST)
    assert not res.comparisons["significant"].any()
    assert res.quantities()["max_preference_pct"] < 55
    assert res.position.pvalue > 0.05


def test_preference_finding_gives_the_direct_share_beside_the_elo_preference():
    """The Elo preference shrinks towards one half with few games per face; the finding also gives the share of
    X's decided games against Y that kept X, counted here from the games table (it used to call the Elo
    preference the share of games kept)."""
    from fairvision.report.sections.cropping import cropping_section

    g = games_table(p_x=0.8)
    res = audit_cropping(g, n_orders=10, settings=FAST)
    found = [f for f in cropping_section(res).findings if f.sentence.startswith("The cropper prefers")]
    assert len(found) == 1
    d = g[(g["top_group"] != g["bottom_group"]) & (g["kept"] != "none")]
    x_won = ((d["kept"] == "top") == (d["top_group"] == "X")).sum()
    share = x_won / len(d)
    assert f"in their direct games the crop kept X in {100 * share:.1f}% [" in found[0].sentence
    assert f"of {len(d):,} games; p_adj" in found[0].sentence
    pref = res.comparisons.iloc[0]["preference"]
    assert f"an Elo preference of {100 * pref:.1f}% [" in found[0].sentence and pref < share
    assert res.quantities()["max_win_pct"] == pytest.approx(100 * share)  # --fail-if 'max_win_pct>60'


def test_no_difference_finding_names_untested_groups_and_thin_data():
    """60 games among 60 faces (two each on average) and a third group of five faces: the finding of no difference
    says which group was not tested and that the ratings barely moved; a note says the same. With 1,200 games
    (40 per face) there is no such caveat."""
    from fairvision.report.sections.cropping import cropping_section

    g = games_table(n_players=60, n_games=60, p_x=0.5, seed=2, none_share=0.0)
    z = {f"s{i:03d}" for i in range(0, 10, 2)}  # five X faces become group Z
    g["top_group"] = np.where(g["a"].isin(z), "Z", g["top_group"])
    g["bottom_group"] = np.where(g["b"].isin(z), "Z", g["bottom_group"])
    res = audit_cropping(g, n_orders=5, settings=FAST)
    assert res.groups.set_index("group").loc["Z", "too_small"]
    assert np.median(res.players["games"]) < 10
    sec = cropping_section(res)
    none = [f for f in sec.findings if f.quantity == "max_preference_pct"]
    assert len(none) == 1 and none[0].sentence.startswith("No pair of skin groups differs")
    assert "; Z not tested (fewer than 10 subjects)" in none[0].sentence
    assert "games per face the ratings stay close to 1400 and the test has little power" in none[0].sentence
    notes = [b["text"] for b in sec.blocks if b["type"] == "note"]
    assert any(t.startswith("A face played a median of 2 rated games") for t in notes), notes
    fair = cropping_section(audit_cropping(games_table(p_x=0.5, seed=3), n_orders=5, settings=FAST))
    sentence = [f for f in fair.findings if f.quantity == "max_preference_pct"][0].sentence
    assert "not tested" not in sentence and "little power" not in sentence
    assert not any("rated games" in b.get("text", "") for b in fair.blocks if b["type"] == "note")


def test_position_bias_on_an_all_top_table():
    from fairvision.report.sections.cropping import cropping_section

    res = audit_cropping(games_table(top_share=1.0, none_share=0.0), n_orders=10, settings=FAST)
    assert res.position.estimate == 1.0 and res.position.pvalue < 1e-100
    assert res.quantities()["position_share"] == 1.0
    sec = cropping_section(res)
    pos = [f for f in sec.findings if f.quantity == "position_share"]
    assert pos and pos[0].severity == "high" and "not favour a group" in pos[0].sentence


def test_minimal_table_with_groups_matches_the_full_table():
    full = games_table(n_games=400)
    groups = pd.DataFrame({"sample_id": np.r_[full["a"], full["b"]], "skin": np.r_[full["top_group"], full["bottom_group"]],
                           "subject_id": np.r_[full["top_subject_id"], full["bottom_subject_id"]]}).drop_duplicates()
    a = audit_cropping(full, n_orders=5, settings=FAST)
    b = audit_cropping(full[["a", "b", "winner"]], groups=groups, group_col="skin", n_orders=5, settings=FAST)
    assert np.allclose(a.groups["elo"], b.groups["elo"]) and b.attribute == "skin"
    pd.testing.assert_frame_equal(a.comparisons, b.comparisons)
    assert not b.full_format and b.position_name == "first (a)"


def test_small_groups_are_reported_not_tested():
    res = audit_cropping(games_table(n_players=30, n_games=600), n_orders=5,
                         settings=AuditSettings(n_boot=100, min_subjects=16))
    assert res.groups["too_small"].all() and len(res.comparisons) == 0
    assert np.isnan(res.quantities()["max_elo_gap"])


def test_bad_games_tables():
    g = games_table(n_games=50)
    with pytest.raises(ColumnError, match="row 3: winner 'zz' is neither a"):
        audit_cropping(g.assign(winner=g["winner"].where(g.index != 2, "zz")), settings=FAST)
    with pytest.raises(ColumnError, match="kept is 'top'"):
        audit_cropping(g.assign(kept="top", winner=g["b"]), settings=FAST)
    with pytest.raises(ColumnError, match="no group columns"):
        audit_cropping(g[["a", "b", "winner"]], settings=FAST)
    two = g.copy()
    two.loc[5, "top_group"] = "Q"
    with pytest.raises(ColumnError, match="has two groups"):
        audit_cropping(two, settings=FAST)
    with pytest.raises(FairvisionError, match="several attributes"):
        audit_cropping(pd.concat([g, g.assign(attribute="age")]), settings=FAST)


# --------------------------------------------------------------------------------------------- the command


def test_command_gates_and_outputs(tmp_path, capsys):
    games_table().to_csv(tmp_path / "biased.csv", index=False)
    out = tmp_path / "out"
    args = ["audit", "cropping", str(tmp_path / "biased.csv"), "-o", str(out), "--orders", "20", "--n-boot", "100"]
    assert main([*args, "--fail-if", "significant>0"]) == 1
    io = capsys.readouterr()
    assert "cropping games: " in io.out and "fail-if: condition met: significant>0" in io.err
    assert (out / "report.html").is_file() and (out / "tables" / "cropping__groups.parquet").is_file()
    games_table(p_x=0.5, seed=3).to_csv(tmp_path / "fair.csv", index=False)
    assert main(["audit", "cropping", str(tmp_path / "fair.csv"), "-o", str(tmp_path / "fair"), "--orders", "20",
                 "--n-boot", "100", "--fail-if", "significant>0"]) == 0
    # a run folder: its games table is found inside
    (tmp_path / "run").mkdir()
    games_table(n_games=200).to_parquet(tmp_path / "run" / "games.parquet")
    assert main(["audit", "cropping", str(tmp_path / "run"), "-o", str(tmp_path / "o3"), "--orders", "5",
                 "--n-boot", "50"]) == 0


def test_command_summary_without_a_tested_pair_says_n_a(tmp_path, capsys):
    """Every group too small to test: the summary line says n/a for the Elo preference (it printed 'nan%') and
    still gives the largest direct win rate, counted here from the table."""
    g = games_table(n_games=300)
    g.to_csv(tmp_path / "g.csv", index=False)
    assert main(["audit", "cropping", str(tmp_path / "g.csv"), "-o", str(tmp_path / "o"), "--orders", "3",
                 "--n-boot", "20", "--min-subjects", "50"]) == 0
    out = capsys.readouterr().out
    d = g[(g["top_group"] != g["bottom_group"]) & (g["kept"] != "none")]
    x_won = ((d["kept"] == "top") == (d["top_group"] == "X")).mean()
    assert "nan" not in out and "largest Elo preference n/a" in out
    assert f"a group won up to {100 * max(x_won, 1 - x_won):.1f}%" in out


@pytest.mark.parametrize("change, message", [
    (lambda g: g.drop(columns="winner"), "no games column 'winner'"),
    (lambda g: g.assign(winner="nobody"), "row 1: winner 'nobody' is neither a"),
    (lambda g: g[["a", "b", "winner"]], "no group columns"),
])
def test_command_bad_inputs_exit_2_with_one_line(change, message, tmp_path, capsys):
    change(games_table(n_games=40)).to_csv(tmp_path / "g.csv", index=False)
    assert main(["audit", "cropping", str(tmp_path / "g.csv"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1


def test_command_bad_groups_table_exits_2(tmp_path, capsys):
    g = games_table(n_games=40)
    g[["a", "b", "winner"]].to_csv(tmp_path / "g.csv", index=False)
    pd.DataFrame({"sample_id": g["a"].unique(), "tone": "x"}).to_csv(tmp_path / "groups.csv", index=False)
    assert main(["audit", "cropping", str(tmp_path / "g.csv"), "--groups", str(tmp_path / "groups.csv"),
                 "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "no group column 'group'" in err and err.count("\n") == 1
    assert main(["audit", "cropping", str(tmp_path / "g.csv"), "--elo-k", "0", "-o", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.startswith("error: --elo-k must be a positive number")
    # an infinite scale is refused under the option's own name (it was reported as '--m')
    assert main(["audit", "cropping", str(tmp_path / "g.csv"), "--elo-m", "inf", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --elo-m must be a positive number, not inf") and err.count("\n") == 1
