"""``fairvision power retrieval`` and ``fairvision power model`` through fairvision.cli.main and typer's CliRunner."""
import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from fairvision.cli import app, main
from fairvision.stats.power import catalog_adequacy, power_all


def test_power_model_report_matches_closed_form(tmp_path, capsys):
    out = tmp_path / "m"
    rc = main(["power", "model", "-n", "a=100", "-n", "b=100", "-n", "c=100", "-m", "4", "--icc", "0.5",
               "--correction", "bonferroni", "-o", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "3 pair(s)" in printed and "report:" in printed
    doc = json.loads((out / "report.json").read_text())
    sec = doc["sections"][0]
    kinds = {(b["type"], b.get("name")) for b in sec["blocks"]}
    assert ("figure", "power_curve") in kinds and ("table", "pairs") in kinds
    pairs = pd.read_parquet(out / "tables" / "model-power__pairs.parquet")
    # 3 pairs: alpha 0.05 / 3; z_{1 - 0.05/6} = 2.393980, z_0.8 = 0.841621; effective n 100 * 4 / 2.5 = 160
    assert pairs["mean_difference_sd"].to_numpy() == pytest.approx((2.393980 + 0.841621) * np.sqrt(2 / 160), abs=1e-5)
    assert "<svg" in (out / "report.html").read_text()
    assert doc["findings"][0]["quantity"] == "mean_difference_sd.max"


def test_power_model_equal_groups_and_runner_help():
    runner = CliRunner()
    res = runner.invoke(app, ["power", "model", "--help"])
    assert res.exit_code == 0
    assert "Examples" in res.output and "--images-per-subject" in res.output and "Bonferroni" in res.output
    res = runner.invoke(app, ["power", "retrieval", "--help"])
    assert res.exit_code == 0 and "--target-nrr" in res.output and "fairvision power retrieval --share" in res.output


def test_power_retrieval_matches_catalog_adequacy(tmp_path, capsys):
    out = tmp_path / "r"
    # shares exact in binary (no renormalisation changes the draws); at 100 items no test is yet large enough,
    # so catalog_adequacy's n_needed is the smallest size, as the plan's
    shares = {"light": 0.5, "medium": 0.25, "dark": 0.25}
    rc = main(["power", "retrieval", *[a for k, v in shares.items() for a in ("--share", f"{k}={v}")],
               "--size", "50", "--size", "100", "--trials", "200", "-o", str(out)])
    assert rc == 0
    needed = pd.read_parquet(out / "tables" / "retrieval-power__items-needed.parquet").set_index("test")
    want = catalog_adequacy(shares, 100, k=6, alpha=0.01, trials=200).table["n_needed"]
    assert not catalog_adequacy(shares, 100, k=6, alpha=0.01, trials=200).table["large_enough"].any()
    assert needed["n_needed"].to_numpy() == pytest.approx(want.to_numpy())
    power = pd.read_parquet(out / "tables" / "retrieval-power__power.parquet").set_index(["n", "side"])
    assert power.loc[(100, "below"), "omnibus"] == pytest.approx(power_all(shares, 0.8, 100, 6, 0.01, 200, 0)["omnibus"])
    assert f"about {int(want['omnibus']):,} items" in capsys.readouterr().out
    doc = json.loads((out / "report.json").read_text())
    assert any(b.get("name") == "power_curve" for b in doc["sections"][0]["blocks"])


def test_power_retrieval_from_a_catalog_table(tmp_path, capsys):
    cat = tmp_path / "items.csv"
    pd.DataFrame({"item_id": range(12), "tone": ["a"] * 5 + ["b"] * 3 + ["c"] * 2 + [None, ""]}).to_csv(cat, index=False)
    out = tmp_path / "r"
    assert main(["power", "retrieval", "--catalog", str(cat), "--attr", "tone", "--size", "50", "--trials", "50",
                 "--target-nrr", "0.5", "-o", str(out)]) == 0
    assert "left out: 2 of 12 catalog items without 'tone'" in capsys.readouterr().out
    needed = pd.read_parquet(out / "tables" / "retrieval-power__items-needed.parquet").set_index("test")
    assert needed["share"].drop("omnibus").to_numpy() == pytest.approx([0.5, 0.3, 0.2])


@pytest.mark.parametrize("args, message", [
    (["model", "-n", "40"], "--subjects: give one value per group"),
    (["model", "-n", "x=ten", "-n", "y=5"], "--subjects: 'ten' is not an integer"),
    (["model", "-n", "40", "-n", "1"], "at least 2 subjects"),
    (["model", "-n", "40", "-g", "3", "-n", "5"], "--groups needs exactly one --subjects"),
    (["model", "-n", "40", "-g", "3", "--icc", "1.5"], "--icc must be in [0, 1]"),
    (["model", "-n", "40", "-g", "3", "--base-rate", "1"], "--base-rate must be in (0, 1)"),
    (["model", "-n", "40", "-g", "3", "--correction", "sidak"], "--correction must be one of"),
    (["retrieval"], "give the catalog distribution"),
    (["retrieval", "--share", "a=0.5", "--share", "b=0.6"], "the shares sum to 1.1"),
    (["retrieval", "--share", "a:0.5"], "is not VALUE=SHARE"),
    (["retrieval", "--share", "a=0.5", "--share", "b=0.5", "--target-nrr", "1.2"], "--target-nrr must be between 0 and 1"),
    (["retrieval", "--catalog", "CAT", "--attr", "nope"], "no column 'nope' for --attr"),
])
def test_user_errors_are_one_line_exit_2(tmp_path, capsys, args, message):
    cat = tmp_path / "items.csv"
    pd.DataFrame({"tone": ["a", "b"]}).to_csv(cat, index=False)
    args = [str(cat) if a == "CAT" else a for a in args]
    rc = main(["power", *args, "-o", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and message in err, err
    assert not (tmp_path / "out" / "report.json").exists()
