"""Report and Section: the shared structure every audit writes into."""

from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from fairvision import __version__
from fairvision.io.atomic import atomic_output_dir
from fairvision.io.jsonable import to_jsonable
from fairvision.report.findings import Finding, rank_findings
from fairvision.report.formatting import flat_frame, format_number, has_meaningful_index, slug
from fairvision.report.html import render_html

__all__ = ["REPORT_SCHEMA", "REPORT_SCHEMA_VERSION", "Finding", "Report", "Section", "figure_to_svg", "format_number",
           "frame_to_records"]

REPORT_SCHEMA = "https://fairvision.dev/schema/report"
REPORT_SCHEMA_VERSION = "1.0"


def run_meta(meta: Mapping[str, Any]) -> dict:
    """``meta`` plus what the run used that every report must name, whichever command wrote it: the face finder
    (``meta["face_finder"]``: name, version, stage order, library versions; docs/METHODS.md §2.5) when this
    process ran it or handed it to workers. Asked only when :mod:`fairvision.vision.faces` was imported, so a
    report never imports the face models."""
    out = dict(meta)
    finder = sys.modules.get("fairvision.vision.faces")
    if finder is not None and "face_finder" not in out and finder.face_finder_used():
        out["face_finder"] = finder.face_finder_meta()
    return out


def frame_to_records(df: pd.DataFrame) -> dict:
    """A DataFrame as ``{"index": [...names], "columns": [...], "data": [[...], ...]}``."""
    flat = flat_frame(df)
    index_names = [str(n) for n in df.index.names] if has_meaningful_index(df) else []
    return {
        "index": index_names,
        "columns": list(flat.columns),
        "data": [to_jsonable(list(row)) for row in flat.itertuples(index=False, name=None)],
    }


@dataclass
class Section:
    """One part of a report: an ordered list of blocks.

    Use the builder methods (:meth:`text`, :meth:`metrics`, :meth:`table`,
    :meth:`figure`, :meth:`note`); each returns the section, so calls chain.
    :meth:`finding` attaches a sentence for the report's findings summary.
    """

    id: str
    title: str
    intro: str | None = None
    blocks: list[dict] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def finding(
        self,
        sentence: str,
        severity: str = "info",
        *,
        target: str | None = None,
        quantity: str | None = None,
        value: Any = None,
        ci_low: Any = None,
        ci_high: Any = None,
        pvalue: Any = None,
        size: Any = None,
        topic: str | None = None,
    ) -> "Section":
        """Add a sentence to the report's findings summary (see :class:`fairvision.report.findings.Finding`).

        ``target`` names the block of this section (table, figure, key figures)
        that shows the numbers; the summary links to it (else to the section).
        Findings are ranked by :func:`fairvision.report.findings.rank_findings`
        (docs/METHODS.md §9.1).
        """
        self.findings.append(Finding(sentence, severity, section=self.id, target=target, quantity=quantity, value=value,
                                     ci_low=ci_low, ci_high=ci_high, pvalue=pvalue, size=size, topic=topic))
        return self

    def text(self, text: str) -> "Section":
        """A paragraph of plain text (no HTML; it is escaped)."""
        self.blocks.append({"type": "text", "text": text})
        return self

    def metrics(self, name: str, values: Mapping[str, Any], caption: str | None = None) -> "Section":
        """Key figures shown as a row of labelled numbers."""
        self.blocks.append({"type": "metrics", "name": name, "caption": caption, "values": dict(values)})
        return self

    def table(
        self,
        name: str,
        df: pd.DataFrame,
        caption: str | None = None,
        *,
        max_rows: int | None = 200,
        save: bool = True,
        highlight: str | None = None,
    ) -> "Section":
        """A table. The full table goes to JSON (and Parquet when ``save``);
        the HTML shows the first ``max_rows`` rows. ``highlight`` names a
        boolean column whose true rows are emphasised."""
        self.blocks.append({"type": "table", "name": name, "caption": caption, "frame": df, "max_rows": max_rows, "highlight": highlight})
        if save:
            self.tables[name] = df
        return self

    def figure(self, name: str, fig: Any, caption: str, *, data: Any = None, alt: str | None = None) -> "Section":
        """A matplotlib figure, embedded as inline SVG; ``data`` are the numbers it shows (for the JSON)."""
        svg = figure_to_svg(fig)
        self.blocks.append({"type": "figure", "name": name, "caption": caption, "svg": svg, "data": data, "alt": alt or caption})
        return self

    def note(self, text: str, level: str = "info") -> "Section":
        """A callout: ``info``, ``warning`` (e.g. a group too small to judge) or ``finding``."""
        if level not in ("info", "warning", "finding"):
            raise ValueError(f"unknown note level {level!r}")
        self.blocks.append({"type": "note", "level": level, "text": text})
        return self

    def image(self, name: str, png_bytes: bytes, caption: str) -> "Section":
        """An embedded PNG. Only used for face images when the user asked (--show-images)."""
        self.blocks.append({"type": "image", "name": name, "caption": caption, "png": base64.b64encode(png_bytes).decode()})
        return self

    def to_dict(self) -> dict:
        blocks = []
        for b in self.blocks:
            d = {k: v for k, v in b.items() if k not in ("frame", "svg", "png", "max_rows")}
            if b["type"] == "table":
                d.update(frame_to_records(b["frame"]))
            if b["type"] == "image":
                d["embedded"] = True
            blocks.append(to_jsonable(d))
        return {"id": self.id, "title": self.title, "intro": self.intro, "blocks": blocks}


def figure_to_svg(fig: Any) -> str:
    """A matplotlib figure as inline SVG markup (no XML prolog); the figure is closed."""
    # lazy: matplotlib + pyplot cost about 0.7 s to import, and only reports with figures need them
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = buf.getvalue()
    svg = svg[svg.find("<svg"):]  # drop XML prolog and DOCTYPE for inline use
    return svg


@dataclass
class Report:
    """A whole audit report."""

    title: str = "fairvision audit"
    subtitle: str | None = None
    meta: dict = field(default_factory=dict)
    sections: list[Section] = field(default_factory=list)

    def add(self, section: Section) -> Section:
        if any(s.id == section.id for s in self.sections):
            raise ValueError(f"duplicate section id {section.id!r}")
        self.sections.append(section)
        return section

    def section(self, id: str) -> Section:
        for s in self.sections:
            if s.id == id:
                return s
        raise KeyError(id)

    def findings(self) -> list[Finding]:
        """The findings of all sections, ranked (docs/METHODS.md §9.1)."""
        return rank_findings(f for s in self.sections for f in s.findings)

    def to_dict(self) -> dict:
        return {
            "$schema": REPORT_SCHEMA,
            "schema_version": REPORT_SCHEMA_VERSION,
            "generator": f"fairvision {__version__}",
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "title": self.title,
            "subtitle": self.subtitle,
            "meta": to_jsonable(run_meta(self.meta)),
            "findings": [{"rank": i + 1, **f.to_dict()} for i, f in enumerate(self.findings())],
            "sections": [s.to_dict() for s in self.sections],
        }

    def to_html(self) -> str:
        return render_html(self)

    def write(self, outdir: str | Path, *, extra_files: Mapping[str, bytes] | None = None) -> dict[str, Path]:
        """Write ``report.html``, ``report.json`` and ``tables/*.parquet`` into ``outdir``.

        Everything is written to a staging folder first and moved into place
        only when all files are complete, so a failure never leaves a
        half-written report over a previous good one.
        """
        outdir = Path(outdir)
        doc = self.to_dict()
        html_text = self.to_html()
        with atomic_output_dir(outdir) as stage:
            (stage / "report.json").write_text(json.dumps(doc, indent=1, allow_nan=False), encoding="utf-8")
            (stage / "report.html").write_text(html_text, encoding="utf-8")
            tdir = stage / "tables"
            for s in self.sections:
                for name, df in s.tables.items():
                    tdir.mkdir(exist_ok=True)
                    flat = flat_frame(df)
                    for c in flat.columns:
                        if flat[c].dtype == object:
                            flat[c] = flat[c].map(lambda v: v if v is None or isinstance(v, (str, int, float, bool)) else str(v))
                    flat.to_parquet(tdir / f"{slug(s.id)}__{slug(name)}.parquet", index=False)
            for name, data in (extra_files or {}).items():
                p = stage / name
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
        return {"html": outdir / "report.html", "json": outdir / "report.json", "tables": outdir / "tables"}
