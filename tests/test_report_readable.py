"""Reports a person can read: floating-point noise prints as 0, wide tables say that they scroll (and scroll with
their first column in place, nothing cut off), numeric axes carry enough ticks, and the bias-transfer OD plot
sets points of one size side by side with its legend outside the data (docs/METHODS.md §9)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from fairvision.audits.transfer import audit_transfer, design_subsets
from fairvision.audits.transfer.study import DEFAULTS as STUDY
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main
from fairvision.datasets import demo_path
from fairvision.report import plots
from fairvision.report.formatting import NOISE, column_scale, format_number, is_pvalue_name, snap_noise
from fairvision.report.html import WIDE_PX, render_block, render_table
from fairvision.report.sections import transfer as transfer_section

# tests/ is on sys.path (pytest's default "prepend" import mode)
from test_report_browser import _browser  # noqa: E402
from test_transfer import planted_predictions, planted_table  # noqa: E402
from fairvision.report.findings import ci_text, num, pct


# -- numbers ---------------------------------------------------------------------------------------------------------

def test_floating_noise_prints_as_zero():
    # 0.1 + 0.2 - 0.3 is the textbook noise: 5.55e-17, not a number anyone measured
    noise = 0.1 + 0.2 - 0.3
    assert noise != 0 and abs(noise) < 1e-16
    assert format_number(4.03e-17) == "0"
    assert format_number(-4.03e-17) == "0"
    assert format_number(np.float64(noise)) == "0"
    assert format_number(np.float32(-1e-20)) == "0"
    assert format_number(-0.0) == "0"
    # the threshold: absolute 1e-12 for a value alone ...
    assert format_number(0.99e-12) == "0"
    assert format_number(1e-12) == "1e-12"
    assert format_number(1e-5) == "1e-05" and format_number(0.000123) == "0.000123"
    # ... and 1e-12 of the column's scale when that is larger than 1
    assert format_number(3e-7, scale=1e6) == "0"  # 1e-12 * 1e6 = 1e-6
    assert format_number(3e-6, scale=1e6) == "3e-06"
    assert format_number(3e-7, scale=0.5) == "3e-07"  # a scale below 1 never lowers the absolute threshold
    # p-values keep their digits
    assert format_number(1e-15, scale=None) == "1e-15"
    # everything else as before
    assert format_number(0.5) == "0.5" and format_number(12345) == "12,345" and format_number(True) == "yes"
    assert format_number(float("nan")) == "–" and format_number(None) == "–"
    assert snap_noise(4.03e-17) == 0.0 and snap_noise(0.25) == 0.25 and snap_noise("x") == "x" and snap_noise(3) == 3
    assert NOISE == 1e-12


def test_column_scale_and_pvalue_names():
    assert column_scale([1, "a", None, -5.0, True, float("nan")]) == 5.0  # numbers only; booleans are not
    assert column_scale(np.array([1e-17, -2.0])) == 2.0
    assert column_scale([]) == 0.0 and column_scale(["a", None]) == 0.0
    for name in ("pvalue", "pvalue_adjusted", "p_adj", "p-value", "p", "q", "pvalue.age", "p value (adjusted)"):
        assert is_pvalue_name(name), name
    for name in ("nsd", "p90", "prob", "ci_low", "n_pairs", "pct", "top", "group"):
        assert not is_pvalue_name(name), name


def test_table_cells_and_key_figures_show_noise_as_zero():
    df = pd.DataFrame({"group": ["a", "b", "c"], "share_gap": [4.03e-17, 0.25, -1.1e-16],
                       "count": [2_000_000.0, 5e-7, 3.0], "pvalue": [1e-15, 0.2, 4e-17]})
    html = render_table(df, "t", None, None)
    cells = [c.split(">", 1)[1] for c in html.split("<td")[1:]]
    texts = [c.split("</td>", 1)[0] for c in cells]
    assert texts == ["a", "0", "2e+06", "1e-15",
                     "b", "0.25", "0", "0.2",
                     "c", "0", "3", "4e-17"]
    # sorting keeps the exact values
    assert 'data-v="4.03e-17"' in html
    block = {"type": "metrics", "name": "m", "values": {"NSD": 4.03e-17, "gap": -2e-18, "p-value": 1e-20, "n": 10}}
    out = render_block(block)
    assert '<div class="v">0</div><div class="k">NSD</div>' in out
    assert '<div class="v">0</div><div class="k">gap</div>' in out
    assert '<div class="v">1e-20</div><div class="k">p-value</div>' in out


def test_plot_labels_never_show_noise_or_a_signed_zero():
    assert plots.value_text("{:+.2f}", 4.03e-17) == "0.00"
    assert plots.value_text("{:+.2f}", -0.003) == "0.00"  # rounds to zero: no sign
    assert plots.value_text("{:+.2f}", 0.5) == "+0.50" and plots.value_text("{:+.2f}", -0.5) == "-0.50"
    assert plots.value_text("{:.0%}", -0.001) == "0%"
    assert plots.value_text("{:.3g}", -4e-17) == "0"
    fig = plots.heatmap(pd.DataFrame([[4.03e-17, -4.03e-17], [0.4, -0.4]], index=["x", "y"], columns=["u", "v"]),
                        fmt="{:+.2f}", center=0.0)
    texts = sorted(t.get_text() for t in fig.axes[0].texts)
    assert texts == ["+0.40", "-0.40", "0.00", "0.00"]
    fig = plots.bar(pd.Series([4.03e-17, 2.0], index=["a", "b"]))
    assert sorted(t.get_text() for t in fig.axes[0].texts) == ["0", "2"]


# -- wide tables -----------------------------------------------------------------------------------------------------

_REPRESENTATION = ["attributes", "k", "n_groups", "n_empty_groups", "nsd", "nsd_ci_low", "nsd_ci_high", "evenness",
                   "effective_groups", "imbalance_ratio", "evenness_ci_low", "evenness_ci_high",
                   "effective_groups_ci_low", "effective_groups_ci_high", "imbalance_ratio_ci_low",
                   "imbalance_ratio_ci_high"]


def test_wide_table_html_has_the_scroll_box_and_hint():
    rng = np.random.default_rng(0)
    wide = pd.DataFrame(rng.random((4, 15)), columns=_REPRESENTATION[1:]).assign(attributes=["age", "gender", "a", "b"])
    wide = wide[_REPRESENTATION]
    html = render_table(wide, "Representation", None, None, anchor="sec--rep")
    assert html.startswith('<div class="tablebox wide" id="sec--rep">')
    assert '<p class="tcap">Representation</p>' in html  # the caption stays outside the scrolling box
    assert '<p class="scrollhint" aria-hidden="true">Wide table (16 columns): scroll it sideways' in html
    assert '<div class="tablewrap"><table class="sortable" aria-label="Representation">' in html
    # on screen, long names may wrap at "_" into parts of 6 or more characters, short ones never; printed, at
    # every "_" (a zero-width space that only print shows)
    pb = '<span class="pb">\u200b</span>'
    assert f"effective_<wbr>groups_<wbr>ci_{pb}high" in html and f"imbalance_<wbr>ratio_<wbr>ci_{pb}low" in html
    assert f">nsd_{pb}ci_{pb}high</th>" in html and f">n_{pb}empty_<wbr>groups</th>" in html
    assert ">evenness</th>" in html
    # a narrow table is not marked wide (the script still measures it in a browser)
    narrow = render_table(pd.DataFrame({"group": ["a"], "n": [3]}), None, None, None)
    assert narrow.startswith('<div class="tablebox">') and "wide" not in narrow.split(">", 1)[0]
    assert WIDE_PX == 900


@pytest.fixture(scope="module")
def dataset_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("readable")
    assert main(["audit", "dataset", str(demo_path("fairface") / "ground_truth.json"), "-a", "age", "-a", "gender",
                 "-o", str(out), "--n-boot", "50"]) == 0
    return out / "report.html"


_HEADS = "w => [...w.querySelectorAll('thead th')].map(th => th.getBoundingClientRect().toJSON())"
_BOX = "w => w.getBoundingClientRect().toJSON()"


@pytest.mark.browser
def test_wide_table_scrolls_with_a_hint_and_hides_nothing(dataset_report):
    """The 16-column representation table at 1400 px: marked wide, a hint that names the columns out of view
    (counted here from the header boxes), a shadow, a sticky first column; scrolled to the end, every column is
    in view and the first one has stayed in place."""
    with _browser() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(dataset_report.as_uri())
        page.wait_for_load_state("load")
        box = page.locator("#dataset--representation")
        wrap = box.locator(".tablewrap")
        assert "wide" in box.get_attribute("class").split()
        hint = box.locator(".scrollhint")
        assert hint.is_visible()
        heads, frame = wrap.evaluate(_HEADS), wrap.evaluate(_BOX)
        assert len(heads) == 16
        out_right = sum(h["right"] > frame["right"] + 1 for h in heads)
        assert out_right >= 1  # the table is wider than its box ...
        assert hint.inner_text().startswith(f"Wide table: {out_right} of its 16 columns are out of view "
                                            f"({out_right} to the right →)")
        # ... shows it with a shadow on the right edge and keeps its first column in place
        assert "gradient" in wrap.evaluate("w => getComputedStyle(w).backgroundImage")
        first_td = wrap.locator("tbody tr").first.locator("td").first
        assert first_td.evaluate("el => getComputedStyle(el).position") == "sticky"
        assert wrap.locator("thead th").first.evaluate("el => getComputedStyle(el).position") == "sticky"
        # scrolled to the far right: every column can be seen, the first still at the left edge
        wrap.evaluate("w => { w.scrollLeft = w.scrollWidth; w.dispatchEvent(new Event('scroll')); }")
        page.wait_for_timeout(50)
        heads, frame = wrap.evaluate(_HEADS), wrap.evaluate(_BOX)
        assert heads[-1]["right"] <= frame["right"] + 1
        assert abs(heads[0]["left"] - frame["left"]) <= 2
        assert abs(first_td.bounding_box()["x"] - frame["left"]) <= 2
        assert "scrolled" in box.get_attribute("class").split()
        out_left = sum(h["left"] < heads[0]["right"] - 1 for h in heads[1:])
        assert out_left >= 1 and hint.inner_text().startswith(
            f"Wide table: {out_left} of its 16 columns are out of view (← {out_left} to the left)")
        # a narrow table of the same report is not marked wide and shows no hint
        small = page.locator("#dataset--groups-gender")
        assert "wide" not in small.get_attribute("class").split() and not small.locator(".scrollhint").is_visible()
        # nothing pushes the page wider than the window
        assert page.evaluate("document.documentElement.scrollWidth") <= 1402
        # printed: no hint, and the table wraps to show every column
        page.set_viewport_size({"width": 800, "height": 900})  # about an A4 page
        page.emulate_media(media="print")
        assert not hint.is_visible()
        assert wrap.evaluate("w => w.scrollWidth - w.clientWidth") <= 1


# -- figures ---------------------------------------------------------------------------------------------------------

def _labelled_ticks(axis, fig) -> list[float]:
    """Major ticks inside the axis's view with a non-empty label (after a draw)."""
    fig.canvas.draw()
    lo, hi = sorted(axis.get_view_interval())
    return [t.get_loc() for t in axis.get_major_ticks()
            if lo - 1e-9 * max(1, abs(lo)) <= t.get_loc() <= hi + 1e-9 * max(1, abs(hi)) and t.label1.get_text()]


def test_numeric_axes_have_at_least_four_labelled_ticks():
    fig = plots.bar(pd.Series([3, 1], index=["a", "b"]), ylabel="images")
    ticks = _labelled_ticks(fig.axes[0].yaxis, fig)
    assert len(ticks) >= 4 and all(float(t).is_integer() for t in ticks)  # counts: whole ticks 0, 1, 2, 3
    fig = plots.bar(pd.Series(np.arange(20.0) / 7, index=[f"g{i}" for i in range(20)]))  # horizontal
    assert len(_labelled_ticks(fig.axes[0].xaxis, fig)) >= 4
    # a 2 x 2 NPMI heatmap: its colour scale had only -1, 0 and 1
    fig = plots.heatmap(pd.DataFrame([[0.1, -0.1], [-0.1, 0.1]]), fmt="{:+.2f}", center=0.0, vmin=-1, vmax=1)
    assert len(_labelled_ticks(fig.axes[1].yaxis, fig)) >= 4
    fig = plots.heatmap(pd.DataFrame([[0.47, 0.49], [0.51, 0.43]]), fmt="{:.0%}", vmin=0, vmax=1)
    labels = [t.label1.get_text() for t in fig.axes[1].yaxis.get_major_ticks() if t.label1.get_text()]
    assert len(labels) >= 4 and all(s.endswith("%") for s in labels)
    forest = pd.DataFrame({"estimate": [0.99, 0.995], "ci_low": [0.985, 0.99], "ci_high": [0.995, 1.0]}, index=["a", "b"])
    fig = plots.forest(forest)
    assert len(_labelled_ticks(fig.axes[0].xaxis, fig)) >= 4
    fig = plots.lines([1, 2], {"s": [0.1, 0.2]})
    assert len(_labelled_ticks(fig.axes[0].xaxis, fig)) >= 4 and len(_labelled_ticks(fig.axes[0].yaxis, fig)) >= 4


@pytest.mark.parametrize("lo,hi", [(75, 300), (50, 900), (120, 4000)])
def test_log_axis_has_at_least_four_labelled_ticks_as_plain_numbers(lo, hi):
    df = pd.DataFrame({"x": [lo, hi], "estimate": [0.2, 0.1], "ci_low": [0.1, 0.05], "ci_high": [0.3, 0.2]})
    fig = plots.ci_series({"p": {"s": df}}, logx=True)
    ax = fig.axes[0]
    ticks = _labelled_ticks(ax.xaxis, fig)
    assert len(ticks) >= 4, ticks
    texts = [t.label1.get_text() for t in ax.xaxis.get_major_ticks() if t.label1.get_text()]
    assert all(s.replace(",", "").isdigit() for s in texts), texts
    assert len(_labelled_ticks(ax.yaxis, fig)) >= 4


def test_dodge_offsets_hand_worked():
    inf = math.inf
    # a line (first) and four points: the line stays, the points go two on each side, one step apart
    assert plots.dodge_offsets([True, False, False, False, False], (inf, inf), 1.0) == [0, -2, -1, 1, 2]
    assert plots.dodge_offsets([False, True, False, False], (inf, inf), 0.5) == [-0.5, 0, 0.5, 1.0]
    # no room on the left (a neighbouring x 1.0 away): all to the right
    assert plots.dodge_offsets([True, False, False, False, False], (1.0, 10.0), 1.0) == [0, 1, 2, 3, 4]
    assert plots.dodge_offsets([True, False, False], (10.0, 1.0), 1.0) == [0, -1, -2]
    # points only: centred on the x
    assert plots.dodge_offsets([False, False], (inf, inf), 1.0) == [-0.5, 0.5]
    assert plots.dodge_offsets([False, False], (0.5, 0.5), 1.0) == [0.5, 1.5]  # too tight both sides: to one side
    assert plots.dodge_offsets([True], (inf, inf), 1.0) == [0.0]


@pytest.fixture(scope="module")
def transfer_result():
    design = design_subsets(planted_table(n_subjects=300, seed=2), "expr", ["gender"], settings=AuditSettings(seed=3))
    return audit_transfer(design, planted_predictions(design, "single_gender_M", seed=1),
                          settings=STUDY.replace(n_boot=50, seed=0))


def test_transfer_od_plot_dodges_points_and_keeps_the_legend_off_the_data(transfer_result, monkeypatch):
    made = []
    real = plots.ci_series

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(transfer_section.plots, "ci_series", spy)
    sec = transfer_section.study_section(transfer_result)
    assert len(made) == 1 and any(b.get("name") == "od_by_size" for b in sec.blocks)
    fig = made[0]
    FigureCanvasAgg(fig)  # Section.figure closed it (and took its pyplot canvas): draw it again off-screen
    ax = fig.axes[0]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    # the legend lies below the axes area, under the x label, and inside the figure
    legend = ax.get_legend().get_window_extent(renderer)
    assert not legend.overlaps(ax.get_window_extent(renderer))
    assert legend.y1 <= ax.xaxis.label.get_window_extent(renderer).y0 + 1
    assert legend.x0 >= 0 and legend.y0 >= 0 and legend.x1 <= fig.bbox.x1 + 1
    # every subset has its point; those of one training size are set apart, the stratified line's at the true size
    cat = transfer_result.design.catalog.set_index("subset")
    od = transfer_result.od[transfer_result.od["attribute"] == "gender"]
    xs = {}
    for cont in ax.containers:
        xs[cont.get_label()] = cont.lines[0].get_xdata()
    strat = od[[cat.loc[s, "family"] == "stratified" for s in od["subset"]]]
    assert sorted(xs["stratified"]) == sorted(int(cat.loc[s, "size"]) for s in strat["subset"])
    others = [s for s in od["subset"] if cat.loc[s, "family"] != "stratified"]
    assert len(others) >= 3
    size = {int(cat.loc[s, "size"]) for s in others}
    assert len(size) == 1  # balanced and single-group subsets share one size ...
    (n,) = size
    assert n in set(xs["stratified"])  # ... with the matched stratified subset
    shown = [float(xs[s][0]) for s in others]
    span = max(xs["stratified"]) - min(xs["stratified"])
    step = plots.DODGE * span
    spots = sorted([*shown, float(n)])
    assert all(b - a >= step * 0.99 for a, b in zip(spots, spots[1:]))  # no two intervals on one x
    assert all(abs(x - n) <= 2.01 * step * len(others) for x in shown)  # and close to their true size
    # the y axis can be read
    assert len(_labelled_ticks(ax.yaxis, fig)) >= 4 and len(_labelled_ticks(ax.xaxis, fig)) >= 4



def test_findings_sentences_show_noise_as_zero():
    assert num(4.03e-17) == "0.00" and num(-4.03e-17) == "0.00" and num(-0.0) == "0.00"
    assert num(0.004) == "0.004" and num(-0.004) == "-0.004" and num(0.25) == "0.25"
    assert ci_text(-4e-17, 0.3) == " [0.00, 0.30]"
    assert pct(-4e-17) == "0%" and pct(0.709) == "71%" and pct(0.0001) == "0.01%"
