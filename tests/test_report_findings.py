"""Findings summary of a report: built from known audit results, ranked, written to report.json and first in the HTML."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure
from scipy import stats

from fairvision.audits.settings import AuditSettings
from fairvision.audits.coverage import coverage_by_group
from fairvision.audits.dataset import audit_dataset
from fairvision.audits.model import audit_model
from fairvision.audits.skin import audit_skin_distribution
from fairvision.report import Report, Section
from fairvision.report.findings import Finding, group_text, pct, rank_findings
from fairvision.report.html import COLLAPSE_ROWS, render_table
from fairvision.report.plots import text_colour, unstack_ordered
from fairvision.report.sections.coverage import coverage_section
from fairvision.report.sections.dataset import dataset_section
from fairvision.report.sections.model import model_section
from fairvision.report.sections.skin import skin_section

FIELDS = {"rank", "severity", "sentence", "section", "target", "quantity", "value", "ci_low", "ci_high", "pvalue",
          "size", "topic"}


def _table(gender, age=None):
    n = len(gender)
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "gender": gender})
    if age is not None:
        df["age"] = age
    return df


def _by_quantity(section, quantity):
    hits = [f for f in section.findings if f.quantity == quantity]
    assert len(hits) == 1, [f.quantity for f in section.findings]
    return hits[0]


# ----------------------------------------------------------------------------- dataset


def test_seventy_thirty_split_gives_a_sentence_with_70_percent_and_nsd():
    df = _table(["female"] * 70 + ["male"] * 30)
    audit = audit_dataset(df, ["gender"], settings=AuditSettings(n_boot=200, seed=1))
    sec = dataset_section(audit)
    f = _by_quantity(sec, "nsd.gender")
    # two groups: NSD = |p1 - p2| = 0.7 - 0.3
    assert f.value == pytest.approx(0.4)
    assert f.severity == "high"  # NSD >= 0.3
    assert "70% of images are gender = female (70)" in f.sentence
    assert "30% gender = male (30)" in f.sentence
    assert "NSD 0.40" in f.sentence
    # the CI in the sentence is the one in the representation table
    rep = audit.representation.loc["gender"]
    assert (f.ci_low, f.ci_high) == (pytest.approx(rep["nsd_ci_low"]), pytest.approx(rep["nsd_ci_high"]))
    assert f"[{rep['nsd_ci_low']:.2f}, {rep['nsd_ci_high']:.2f}]" in f.sentence
    assert f.section == "dataset" and f.target == "groups_gender"


def test_balanced_attribute_is_info():
    audit = audit_dataset(_table(["a", "b"] * 30), ["gender"], settings=AuditSettings(n_boot=0))
    f = _by_quantity(dataset_section(audit), "nsd.gender")
    assert f.severity == "info" and f.value == 0
    assert f.sentence.startswith("gender: all 2 groups have 30 images (50% each)")


def test_small_groups_of_an_intersection_are_counted():
    # gender x age: (f, young) 40, (f, old) 5, (m, young) 7, (m, old) 3 -> 3 of 4 groups below 10
    gender = ["f"] * 45 + ["m"] * 10
    age = ["young"] * 40 + ["old"] * 5 + ["young"] * 7 + ["old"] * 3
    audit = audit_dataset(_table(gender, age), ["gender", "age"], settings=AuditSettings(n_boot=0))
    sec = dataset_section(audit)
    f = _by_quantity(sec, "n_small_groups.gender+age")
    assert f.value == 3
    assert f.sentence.startswith("gender × age: 3 of 4 groups have fewer than 10 images: ")
    # smallest first, labelled with the attribute names
    assert "gender = m × age = old (3), gender = f × age = old (5), gender = m × age = young (7)" in f.sentence
    assert f.severity == "high"  # at least a quarter of the groups
    # the same count as the intersections summary table
    assert audit.summary.loc["gender × age", "n_small"] == 3


def test_significant_association_is_a_finding_with_the_table_numbers():
    rng = np.random.default_rng(0)
    gender = rng.choice(["f", "m"], 400)
    age = np.where(rng.random(400) < 0.8, np.where(gender == "f", "young", "old"), rng.choice(["young", "old"], 400))
    audit = audit_dataset(_table(list(gender), list(age)), ["gender", "age"], settings=AuditSettings(n_boot=0))
    sec = dataset_section(audit)
    f = _by_quantity(sec, "cramers_v.gender+age")
    row = audit.association.loc[("gender", "age")]
    # independent check: Cramér's V of the 2 x 2 table without continuity correction
    ct = pd.crosstab(gender, age).to_numpy()
    chi2 = stats.chi2_contingency(ct, correction=False)[0]
    assert f.value == pytest.approx(np.sqrt(chi2 / ct.sum()))
    assert f.pvalue == pytest.approx(row["pvalue_adjusted"])
    assert f"Cramér's V {row['cramers_v']:.2f}" in f.sentence
    assert f.severity == "high"  # V >= 0.3


# ----------------------------------------------------------------------------- coverage, skin, model


def test_coverage_gap_names_worst_and_best_group():
    df = _table(["a"] * 50 + ["b"] * 50)
    ok = np.r_[np.ones(50, bool), np.arange(50) < 20]  # a: 50/50, b: 20/50
    cov = coverage_by_group(df, ok, ["gender"], step="face detection")
    sec = coverage_section(cov)
    (f,) = sec.findings
    assert f.sentence.startswith("The face detection succeeds less often for gender = b (40%, 20 of 50) than for "
                                 "gender = a (100%)")
    assert f.value == pytest.approx(0.4) and f.size == pytest.approx(0.6)
    assert f.severity == "high"
    p = stats.fisher_exact([[50, 0], [20, 30]])[1]  # one attribute: nothing to correct
    assert f.pvalue == pytest.approx(p)


def test_skin_split_sentence_uses_the_thresholds_and_table1():
    L = np.r_[np.full(70, 45.0), np.full(30, 70.0)]  # 70 dark (L* < 60), 30 light
    hue = np.r_[np.full(50, 40.0), np.full(50, 60.0)]  # 50 red, 50 yellow
    dist = audit_skin_distribution(pd.DataFrame({"L": L, "hue": hue}), name="set")
    sec = skin_section(dist)
    tone = _by_quantity(sec, "percent.dark")
    assert tone.sentence == "skin tone: 70.0% of the 100 measured images are dark (L* < 60), 30.0% light"
    assert tone.value == pytest.approx(dist.table.loc["Total", "dark"])
    assert tone.severity == "high" and tone.topic == "balance:skin_tone"
    hue_f = _by_quantity(sec, "percent.red")
    assert hue_f.severity == "info" and "50.0% of the 100 measured images are red (h* < 55°)" in hue_f.sentence


def test_model_gap_between_worst_and_best_group():
    rng = np.random.default_rng(3)
    n_subj = 200
    subj = np.repeat(np.arange(n_subj), 2)
    group = np.where(np.arange(n_subj) < 100, "x", "y")[subj]
    score = rng.normal(0.8, 0.05, len(subj)) - 0.2 * (group == "x")
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(len(subj))], "subject_id": subj.astype(str),
                       "group": group, "score": score})
    res = audit_model(df, ["score"], ["group"], settings=AuditSettings(n_boot=100))
    sec = model_section(res)
    f = _by_quantity(sec, "score.group.difference")
    row = res.summary.iloc[0]
    mx, my = score[group == "x"].mean(), score[group == "y"].mean()
    assert f.value == pytest.approx(my - mx)
    assert f"worst group group = x is {my - mx:.3f} below best group group = y" in f.sentence
    assert (f.ci_low, f.ci_high) == (pytest.approx(row["difference_ci_low"]), pytest.approx(row["difference_ci_high"]))
    assert "p_adj < 0.001" in f.sentence and f.severity == "high"


# ----------------------------------------------------------------------------- ranking, JSON, HTML


def test_rank_severity_then_size_then_pvalue_then_order():
    fs = [
        Finding("i1", "info", size=0.9),
        Finding("m-no-size", "medium", pvalue=0.001),
        Finding("h-small", "high", size=0.2),
        Finding("m-big", "medium", size=0.5),
        Finding("h-big", "high", size=0.6, pvalue=0.5),
        Finding("h-big-smaller-p", "high", size=0.6, pvalue=0.01),
        Finding("m-no-size-no-p", "medium"),
        Finding("m-no-size-2", "medium", pvalue=0.001),
    ]
    order = [f.sentence for f in rank_findings(fs)]
    assert order == ["h-big-smaller-p", "h-big", "h-small", "m-big", "m-no-size", "m-no-size-2", "m-no-size-no-p", "i1"]


def test_one_finding_per_topic():
    fs = [Finding("dataset view", "high", size=0.4259259259, topic="balance:skin_tone"),
          Finding("skin view", "high", size=0.42592592591, topic="balance:skin_tone"),
          Finding("other", "info", topic="balance:age")]
    assert [f.sentence for f in rank_findings(fs)] == ["dataset view", "other"]


def test_finding_rejects_unknown_severity_and_non_finite_numbers():
    with pytest.raises(ValueError):
        Finding("x", "critical")
    f = Finding("x", value=float("nan"), ci_low=np.float64(0.25), pvalue=None)
    assert f.value is None and f.ci_low == 0.25 and isinstance(f.ci_low, float)


def _report():
    rep = Report(title="t")
    a = rep.add(Section("first", "First"))
    a.table("big", pd.DataFrame({"group": [f"g{i}" for i in range(30)], "n": np.arange(30)}))
    a.finding("an info finding", "info", target="big", quantity="n", value=3)
    b = rep.add(Section("second", "Second"))
    b.metrics("overview", {"x": 1.5})
    b.finding("a high finding", "high", target="overview", quantity="x", value=1.5, ci_low=1.0, ci_high=2.0,
              pvalue=0.003, size=0.5)
    b.finding("a medium finding", "medium")
    return rep


def test_json_carries_the_ranked_findings_with_their_fields(tmp_path):
    paths = _report().write(tmp_path / "r")
    doc = json.loads(paths["json"].read_text())
    fs = doc["findings"]
    assert [f["sentence"] for f in fs] == ["a high finding", "a medium finding", "an info finding"]
    assert [f["rank"] for f in fs] == [1, 2, 3]
    assert all(set(f) == FIELDS for f in fs)
    assert fs[0] == {"rank": 1, "severity": "high", "sentence": "a high finding", "section": "second",
                     "target": "overview", "quantity": "x", "value": 1.5, "ci_low": 1.0, "ci_high": 2.0,
                     "pvalue": 0.003, "size": 0.5, "topic": None}
    assert list(doc).index("findings") < list(doc).index("sections")


def test_html_findings_come_first_and_link_to_existing_anchors(tmp_path):
    html = _report().to_html()
    main = html[html.index("<main>"):]
    assert main.index('id="findings"') < main.index('<section id="first"')
    items = re.findall(r'<li class="(\w+)"><span class="sev">\w+</span><a href="#([^"]+)">([^<]+)</a>', html)
    assert [(sev, text) for sev, _, text in items] == [("high", "a high finding"), ("medium", "a medium finding"),
                                                       ("info", "an info finding")]
    for _, href, _ in items:
        assert f'id="{href}"' in html, href
    assert [h for _, h, _ in items] == ["second--overview", "second", "first--big"]
    assert '<nav aria-label="Sections"><a href="#findings">Findings</a>' in html


def test_a_figure_and_a_table_of_one_name_get_one_anchor():
    rep = Report()
    s = rep.add(Section("s", "S"))
    s.figure("cells", Figure(), "a figure")
    s.table("cells", pd.DataFrame({"n": [1]}))
    s.finding("x", target="cells")
    html = rep.to_html()
    assert html.count('id="s--cells"') == 1 and html.index('id="s--cells"') < html.index("<table")


def test_long_tables_collapse_and_numeric_headers_align_right():
    df = pd.DataFrame({"group": [f"g{i}" for i in range(COLLAPSE_ROWS + 1)], "n": np.arange(COLLAPSE_ROWS + 1),
                       "ok": [True] * (COLLAPSE_ROWS + 1)})
    html = render_table(df, "c", 200, None, "s--t")
    assert html.startswith('<div class="tablebox collapsed" id="s--t">')
    assert f"Show all {COLLAPSE_ROWS + 1} rows" in html
    assert '<th scope="col">group</th><th class="num" scope="col">n</th><th scope="col">ok</th>' in html
    short = render_table(df.head(COLLAPSE_ROWS), None, 200, None)
    assert "collapsed" not in short and "<button" not in short


# ----------------------------------------------------------------------------- labels and plots


def test_group_text_labels_groups_with_their_attribute():
    assert group_text("age", "0-2") == "age = 0-2"
    assert group_text("age × gender", "20-29 × Male") == "age = 20-29 × gender = Male"
    assert group_text(("age", "gender"), ("20-29", "Male")) == "age = 20-29 × gender = Male"
    assert group_text("age × gender", "odd") == "odd"  # parts that do not pair up stay as they are
    assert pct(0.709) == "71%" and pct(0.9981) == "99.8%" and pct(1.0) == "100%"


def test_unstack_keeps_declared_order_and_cell_text_contrasts():
    idx = pd.MultiIndex.from_product([["0-2", "3-9", "10-19"], ["Male", "Female"]], names=["age", "gender"])
    t = unstack_ordered(pd.Series(np.arange(6), index=idx), "gender")
    assert list(t.index) == ["0-2", "3-9", "10-19"] and list(t.columns) == ["Male", "Female"]
    assert t.loc["10-19", "Female"] == 5
    assert text_colour((0.03, 0.19, 0.42, 1.0)) == "white"  # dark blue
    assert text_colour((0.97, 0.98, 1.0, 1.0)) == "black"  # near white
