"""Plot helpers shared by report sections (matplotlib, Agg backend).

Each function returns a matplotlib Figure; pass it to ``Section.figure``,
which embeds it as inline SVG and closes it.
"""

from __future__ import annotations

import re
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, PercentFormatter  # noqa: E402

from fairvision.report.formatting import snap_noise  # noqa: E402

PALETTE = ["#2f5d9e", "#d1495b", "#edae49", "#00798c", "#66a182", "#8d6a9f", "#30343f", "#c3834c"]
#: fewest labelled ticks on a numeric axis (a reader reads values off at least this many)
MIN_TICKS = 4
#: spacing of points dodged apart at one x, as a share of the x span (in log units on a log axis)
DODGE = 0.03


def numeric_ticks(axis, integer: bool = False) -> None:
    """At least :data:`MIN_TICKS` labelled ticks on a numeric axis (an ``ax.xaxis``, ``ax.yaxis`` or a colourbar's
    long axis); ``integer`` keeps them whole where the range allows (counts)."""
    axis.set_major_locator(MaxNLocator(nbins="auto", steps=[1, 2, 2.5, 5, 10], integer=integer, min_n_ticks=MIN_TICKS))


def log_ticks(axis, lo: float, hi: float) -> None:
    """Labelled ticks on a log axis that shows ``lo`` to ``hi``, written as plain numbers (300, not 3×10²): at 1, 2
    and 5 times each power of ten, or more multiples (1, 2, 3, 5, 7; then 1 to 9) until :data:`MIN_TICKS` of
    them fall in the range."""
    subs: tuple[float, ...] = (1.0, 2.0, 5.0)
    if lo > 0 and hi > lo:
        decades = 10.0 ** np.arange(np.floor(np.log10(lo)), np.ceil(np.log10(hi)) + 1)
        for cand in ((1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0, 7.0), tuple(float(k) for k in range(1, 10))):
            subs = cand
            ticks = np.outer(decades, cand).ravel()
            if np.count_nonzero((ticks >= lo * (1 - 1e-9)) & (ticks <= hi * (1 + 1e-9))) >= MIN_TICKS:
                break
    axis.set_major_locator(LogLocator(base=10, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.10g}"))
    axis.set_minor_formatter(NullFormatter())


def value_text(fmt: str, v: float) -> str:
    """A cell or bar label: ``fmt.format(v)``, with floating-point noise as 0 and no sign on a label that reads
    zero (never ``+0.00``, ``-0.00`` or ``4.03e-17``)."""
    text = fmt.format(float(snap_noise(float(v))))
    return text.lstrip("+-−") if re.fullmatch(r"[+\-−]?0*[.,]?0*%?", text) else text


def dodge_offsets(members: Sequence[bool], room: tuple[float, float], step: float) -> list[float]:
    """Offsets along x of the points of several series drawn at one x, so that none hides another.

    ``members`` says, for each series with a point at this x, whether it is a line (several points): the first
    line stays at the true x, the other points go beside it ``step`` apart. They sit on both sides when
    half of them fit within ``room`` (the distances to the neighbouring x values, left and right), else all on
    the roomier side.
    """
    k = len(members)
    if k <= 1:
        return [0.0] * k
    anchor = members.index(True) if any(members) else None
    others = k - 1 if anchor is not None else k
    if anchor is not None:
        slots = [float(j) for j in range(-(others // 2), others - others // 2 + 1) if j != 0]
    else:
        slots = [j - (k - 1) / 2 for j in range(k)]
    if max(abs(x) for x in slots) * step > 0.6 * min(room):
        side = 1.0 if room[1] >= room[0] else -1.0
        slots = [side * (j + (1 if anchor is not None else 0.5)) for j in range(others)]
    out, it = [], iter(slots)
    for i in range(k):
        out.append(0.0 if i == anchor else next(it) * step)
    return out


def tick_labels(index: pd.Index, labelled: bool = False) -> list[str]:
    """Labels of an index's entries: ``"age = 0-2"`` when the index is named (``labelled``), the bare value otherwise;
    tuples of a MultiIndex become ``"age = 0-2 × gender = Male"``."""
    names = [n for n in index.names] if isinstance(index, pd.MultiIndex) else [index.name]
    out = []
    for i in index:
        parts = list(i) if isinstance(i, tuple) else [i]
        if labelled and len(names) == len(parts) and all(n is not None for n in names):
            out.append(" × ".join(f"{n} = {v}" for n, v in zip(names, parts)))
        else:
            out.append(" × ".join(map(str, parts)))
    return out


def unstack_ordered(values: pd.Series, level: str | int) -> pd.DataFrame:
    """``values.unstack(level)`` with rows and columns in the order of the index (the declared category order),
    not sorted."""
    idx = values.index
    pos = idx.names.index(level) if isinstance(level, str) else level
    cols = pd.unique(idx.get_level_values(pos))
    rest = idx.droplevel(pos)
    rows = pd.unique(rest) if not isinstance(rest, pd.MultiIndex) else rest.unique()
    table = values.unstack(level)
    out = table.reindex(index=rows, columns=cols)
    out.index.name = rest.name if not isinstance(rest, pd.MultiIndex) else None
    out.columns.name = idx.names[pos]
    return out


def text_colour(rgba) -> str:
    """Black or white, whichever contrasts more with a background colour (WCAG relative luminance)."""
    rgb = np.asarray(rgba[:3], dtype=float)
    lin = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    lum = float(lin @ np.array([0.2126, 0.7152, 0.0722]))
    return "black" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "white"


def bar(values: pd.Series, *, title: str = "", xlabel: str = "", ylabel: str = "count", horizontal: bool | None = None,
        highlight: Sequence[bool] | None = None, annotate: bool = True, labelled: bool = False):
    """Bar chart of one value per group; empty groups stay visible as zero-height bars.

    With ``labelled``, a named index labels its bars ``"age = 0-2"``."""
    labels = tick_labels(values.index, labelled)
    n = len(values)
    horizontal = n > 12 if horizontal is None else horizontal
    colors = [PALETTE[1] if (highlight is not None and highlight[i]) else PALETTE[0] for i in range(n)]
    v = values.to_numpy(dtype=float)
    finite = v[np.isfinite(v)]
    whole = bool(finite.size) and bool(np.all(finite == np.round(finite)))
    if horizontal:
        fig, ax = plt.subplots(figsize=(7, max(2.2, 0.26 * n + 1)))
        ax.barh(range(n), v, color=colors)
        ax.set_yticks(range(n), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xlabel(ylabel)
        numeric_ticks(ax.xaxis, integer=whole)
    else:
        fig, ax = plt.subplots(figsize=(max(4, 0.55 * n + 1.5), 3.4))
        ax.bar(range(n), v, color=colors)
        ax.set_xticks(range(n), labels, rotation=45 if n > 5 else 0, ha="right" if n > 5 else "center", fontsize=9,
                      rotation_mode="anchor" if n > 5 else "default")
        ax.set_ylabel(ylabel)
        ax.set_xlabel(xlabel)
        numeric_ticks(ax.yaxis, integer=whole)
        if annotate and n <= 30:
            for i, x in enumerate(v):
                if np.isfinite(x):
                    ax.annotate(value_text("{:,.4g}", x), (i, x), xytext=(0, 2), textcoords="offset points",
                                ha="center", va="bottom" if x >= 0 else "top", fontsize=8)
            ax.margins(y=0.12)  # room for the labels above the tallest bar
    ax.set_title(title, fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def heatmap(data: pd.DataFrame, *, title: str = "", fmt: str = "{:.2f}", cmap: str = "viridis", center: float | None = None,
            vmin: float | None = None, vmax: float | None = None, cbar_label: str = "", annotate: bool | None = None,
            labelled: bool = False):
    """Heatmap of a 2-D table (rows x columns) in the table's own row and column order.

    ``center`` gives a diverging colour scale around that value. With
    ``labelled``, a named index or column axis labels its ticks
    ``"age = 0-2"`` (else the names become axis labels). Cell labels are
    sized to the number of cells and drawn in black or white, whichever
    contrasts more with the cell's colour.
    """
    values = data.to_numpy(dtype=float)
    nr, nc = values.shape
    fig, ax = plt.subplots(figsize=(min(14, max(4.5, 0.9 * nc + 3)), min(14, max(3.2, 0.45 * nr + 1.6))))
    finite = values[np.isfinite(values)]
    if center is not None:
        span = np.nanmax(np.abs(finite - center)) if finite.size else 1.0
        span = span or 1.0
        vmin, vmax = center - span if vmin is None else vmin, center + span if vmax is None else vmax
        cmap = "RdBu_r" if cmap == "viridis" else cmap
    im = ax.imshow(np.ma.masked_invalid(values), cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    xl, yl = tick_labels(data.columns, labelled), tick_labels(data.index, labelled)
    rotate = nc > 4 or max((len(t) for t in xl), default=0) > 14
    ax.set_xticks(range(nc), xl, rotation=30 if rotate else 0, ha="right" if rotate else "center", fontsize=9)
    ax.set_yticks(range(nr), yl, fontsize=9)
    if not labelled:
        ax.set_xlabel(str(data.columns.name or ""))
        ax.set_ylabel(str(data.index.name or ""))
    if annotate is None:
        annotate = nr * nc <= 200
    if annotate:
        size = 11 if nr * nc <= 24 else 10 if nr * nc <= 60 else 9 if nr * nc <= 120 else 8
        for i in range(nr):
            for j in range(nc):
                v = values[i, j]
                if np.isfinite(v):
                    colour = text_colour(im.cmap(im.norm(v)))
                    ax.text(j, i, value_text(fmt, v), ha="center", va="center", fontsize=size, color=colour)
    cb = fig.colorbar(im, ax=ax, shrink=0.9)
    numeric_ticks(cb.ax.yaxis)
    if "%" in fmt:  # cells in percent: the scale too
        cb.ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    cb.set_label(cbar_label, fontsize=9)
    ax.set_title(title, fontsize=11)
    fig.tight_layout()
    return fig


def forest(data: pd.DataFrame, *, estimate: str = "estimate", low: str = "ci_low", high: str = "ci_high", title: str = "",
           xlabel: str = "", reference: float | None = None, band: tuple[float, float] | None = None, flag: str | None = None,
           labelled: bool = False):
    """Forest plot: one row per group with its estimate and CI; ``band`` shades an acceptable range.

    With ``labelled``, a named index labels its rows ``"age = 0-2"``."""
    labels = tick_labels(data.index, labelled)
    n = len(data)
    fig, ax = plt.subplots(figsize=(7, max(2.2, 0.3 * n + 1.2)))
    y = np.arange(n)
    est = data[estimate].to_numpy(dtype=float)
    lo = data[low].to_numpy(dtype=float)
    hi = data[high].to_numpy(dtype=float)
    if band is not None:
        ax.axvspan(band[0], band[1], color="#66a182", alpha=0.15, lw=0)
    if reference is not None:
        ax.axvline(reference, color="#888", lw=1, ls="--")
    flags = data[flag].to_numpy(dtype=bool) if flag and flag in data.columns else np.zeros(n, bool)
    for i in range(n):
        c = PALETTE[1] if flags[i] else PALETTE[0]
        if np.isfinite(lo[i]) and np.isfinite(hi[i]):
            ax.plot([lo[i], hi[i]], [y[i], y[i]], color=c, lw=1.6)
        ax.plot(est[i], y[i], "o", color=c, ms=5)
    ax.set_yticks(y, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    numeric_ticks(ax.xaxis)
    ax.set_title(title, fontsize=11)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def lines(x: Sequence[float], series: dict[str, Sequence[float]], *, title: str = "", xlabel: str = "", ylabel: str = "",
          hline: float | None = None):
    """Line plot of several named series over a shared x (e.g. power curves)."""
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for i, (name, ys) in enumerate(series.items()):
        ax.plot(x, ys, marker="o", ms=3, color=PALETTE[i % len(PALETTE)], label=str(name))
    if hline is not None:
        ax.axhline(hline, color="#888", lw=1, ls="--")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    numeric_ticks(ax.xaxis)
    numeric_ticks(ax.yaxis)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    return fig


def ci_series(panels: dict[str, dict[str, pd.DataFrame]], *, x: str = "x", estimate: str = "estimate", low: str = "ci_low",
              high: str = "ci_high", xlabel: str = "", ylabel: str = "", logx: bool = False, title: str = ""):
    """One panel per key of ``panels``, each with named series of points and CI bars (a series with several points is
    joined by a line), e.g. model bias against training-set size per family.

    Points of several series at one x are dodged apart (:func:`dodge_offsets`: the line stays at the true x,
    the other points go beside it, :data:`DODGE` of the x span apart), so that no CI bar hides another; the
    legend sits below each panel, outside the data. Both axes carry at least :data:`MIN_TICKS` labelled ticks.
    """
    n = max(1, len(panels))
    n_series = max((len(v) for v in panels.values()), default=1)
    rows = -(-n_series // 2)  # legend rows below each panel (two entries a row)
    fig, axes = plt.subplots(1, n, figsize=(min(14, 4.8 * n + 1), 3.4 + 0.22 * rows), squeeze=False, layout="constrained")
    fwd = np.log10 if logx else (lambda a: np.asarray(a, dtype=float))
    inv = (lambda a: 10.0 ** np.asarray(a)) if logx else (lambda a: a)
    for ax, (pname, series) in zip(axes[0], panels.items()):
        frames = {k: df.sort_values(x) for k, df in series.items()}
        allx = np.concatenate([df[x].to_numpy(dtype=float) for df in frames.values()]) if frames else np.array([])
        allx = allx[np.isfinite(allx) & ((allx > 0) if logx else True)]
        ux = np.unique(fwd(allx)) if allx.size else np.array([])
        span = float(ux[-1] - ux[0]) if ux.size > 1 else (0.3 if logx else max(1.0, abs(float(ux[0])) if ux.size else 1.0))
        step = DODGE * span
        shift = {k: np.zeros(len(df)) for k, df in frames.items()}
        for j, u in enumerate(ux):
            members = [(k, np.flatnonzero(np.isclose(fwd(df[x].to_numpy(dtype=float)), u))) for k, df in frames.items()]
            members = [(k, idx[0]) for k, idx in members if idx.size]
            room = (float(u - ux[j - 1]) if j > 0 else np.inf, float(ux[j + 1] - u) if j + 1 < ux.size else np.inf)
            offs = dodge_offsets([len(frames[k]) > 1 for k, _ in members], room, step)
            for (k, idx), o in zip(members, offs):
                shift[k][idx] = o
        for i, (sname, df) in enumerate(frames.items()):
            raw = df[x].to_numpy(dtype=float)
            xs = inv(fwd(raw) + shift[sname]) if logx else raw + shift[sname]
            ys = df[estimate].to_numpy(dtype=float)
            err = np.vstack([ys - df[low].to_numpy(dtype=float), df[high].to_numpy(dtype=float) - ys])
            ax.errorbar(xs, ys, yerr=np.where(np.isfinite(err), np.clip(err, 0, None), 0), marker="o", ms=4, capsize=2.5,
                        lw=1.4 if len(df) > 1 else 0, elinewidth=1, color=PALETTE[i % len(PALETTE)], label=str(sname))
        if logx:
            ax.set_xscale("log")
            log_ticks(ax.xaxis, *ax.get_xlim())
        else:
            numeric_ticks(ax.xaxis)
        numeric_ticks(ax.yaxis)
        ax.set_title(str(pname), fontsize=10)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(fontsize=8, frameon=False, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=min(2, len(series)),
                  borderaxespad=0)
    if title:
        fig.suptitle(title, fontsize=11)
    return fig
