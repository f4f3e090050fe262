"""Render a report as one self-contained HTML file.

This module does not import :mod:`fairvision.report.document` (which imports
this one to write ``report.html``): :func:`render_html` reads only the
report's ``title``, ``subtitle``, ``meta`` and ``sections``.
"""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd

from fairvision import __version__
from fairvision.io.jsonable import to_jsonable
from fairvision.report.formatting import flat_frame, format_number, slug

_CSS = """
:root{--fg:#1d2330;--muted:#5b6473;--line:#d9dee7;--bg:#fff;--accent:#2f5d9e;--warn:#9a5b00;--warnbg:#fff6e5;--find:#7a1f3d;--findbg:#fdeef3;--infobg:#eef4fb}
*{box-sizing:border-box}body{font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg);margin:0}
header{padding:28px 40px 16px;border-bottom:1px solid var(--line)}header h1{margin:0 0 4px;font-size:26px}header p{margin:2px 0;color:var(--muted)}
.layout{display:flex;gap:32px;padding:0 40px 60px}nav{position:sticky;top:0;align-self:flex-start;min-width:200px;max-width:240px;padding-top:20px;font-size:14px}
nav a{display:block;color:var(--accent);text-decoration:none;padding:3px 0}main{flex:1;min-width:0}
section{padding-top:20px;border-bottom:1px solid var(--line);padding-bottom:18px}h2{font-size:21px;margin:8px 0}h3{font-size:16px;margin:18px 0 6px}
.metrics{display:flex;flex-wrap:wrap;gap:10px;margin:10px 0}.metric{border:1px solid var(--line);border-radius:8px;padding:8px 14px;min-width:120px}
.metric .v{font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}.metric .k{font-size:12px;color:var(--muted)}
.tablebox{margin:6px 0}.tablewrap{overflow-x:auto;border:1px solid var(--line);border-radius:6px}
.tablebox.collapsed .tablewrap{max-height:330px;overflow-y:hidden;-webkit-mask-image:linear-gradient(to bottom,#000 70%,transparent);mask-image:linear-gradient(to bottom,#000 70%,transparent)}
button.toggle{margin:4px 0 0;font:inherit;font-size:13px;color:var(--accent);background:#fff;border:1px solid var(--line);border-radius:5px;padding:2px 10px;cursor:pointer}
table{border-collapse:collapse;font-size:13px;width:max-content;min-width:100%}th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:left;white-space:nowrap}
th{background:#f4f6fa;position:sticky;top:0;cursor:pointer;user-select:none}th.num,td.num{text-align:right}td.num{font-variant-numeric:tabular-nums}
tr.hl td{background:var(--findbg);font-weight:600}caption{caption-side:top;text-align:left;color:var(--muted);padding:4px 0;font-size:13px}
figure{margin:12px 0}figure svg{max-width:100%;height:auto}figcaption{color:var(--muted);font-size:13px}
.note{border-radius:6px;padding:8px 12px;margin:8px 0;background:var(--infobg)}.note.warning{background:var(--warnbg);color:var(--warn)}.note.finding{background:var(--findbg);color:var(--find)}
.more{color:var(--muted);font-size:12px}footer{padding:16px 40px;color:var(--muted);font-size:12px}
section.findings{padding-top:16px}ol.findings-list{margin:8px 0 4px;padding-left:0;list-style:none;counter-reset:f}
ol.findings-list li{counter-increment:f;display:flex;gap:10px;align-items:baseline;padding:5px 8px;border-radius:6px;margin:3px 0}
ol.findings-list li::before{content:counter(f) ".";color:var(--muted);min-width:1.6em;text-align:right;font-variant-numeric:tabular-nums}
ol.findings-list li.high{background:var(--findbg)}ol.findings-list li.medium{background:var(--warnbg)}ol.findings-list li.info{background:var(--infobg)}
.sev{font-size:11px;font-weight:700;text-transform:uppercase;letter-spacing:.04em;min-width:4.6em}
li.high .sev{color:var(--find)}li.medium .sev{color:var(--warn)}li.info .sev{color:var(--accent)}
ol.findings-list a{color:var(--fg);text-decoration:none;border-bottom:1px dotted var(--muted)}ol.findings-list a:hover{color:var(--accent)}
.where{color:var(--muted);font-size:12px;margin-left:auto;padding-left:8px;max-width:230px;text-align:right;flex-shrink:0}
@media print{nav{display:none}.tablebox.collapsed .tablewrap,.tablewrap{max-height:none;overflow:visible;-webkit-mask-image:none;mask-image:none}
button.toggle{display:none}th{position:static}table{width:auto;font-size:11px}.layout{display:block;padding:0 12px}}
"""

_JS = """
document.querySelectorAll('table.sortable th').forEach(function(th){
  th.addEventListener('click',function(){
    var table=th.closest('table'),tbody=table.tBodies[0],idx=Array.prototype.indexOf.call(th.parentNode.children,th);
    var asc=th.dataset.sort!=='asc';th.parentNode.querySelectorAll('th').forEach(function(o){delete o.dataset.sort});th.dataset.sort=asc?'asc':'desc';
    var rows=Array.prototype.slice.call(tbody.rows);
    rows.sort(function(a,b){var x=a.cells[idx].dataset.v||a.cells[idx].textContent,y=b.cells[idx].dataset.v||b.cells[idx].textContent;
      var nx=parseFloat(x),ny=parseFloat(y);var c=(!isNaN(nx)&&!isNaN(ny))?nx-ny:x.localeCompare(y);return asc?c:-c;});
    rows.forEach(function(r){tbody.appendChild(r)});
  });
});
document.querySelectorAll('.tablebox button.toggle').forEach(function(b){
  b.addEventListener('click',function(){
    var box=b.closest('.tablebox'),c=box.classList.toggle('collapsed');
    b.setAttribute('aria-expanded',c?'false':'true');b.textContent=c?b.dataset.more:b.dataset.less;
  });
});
"""

#: tables with more rows than this are collapsed (the first rows show; a button shows the rest)
COLLAPSE_ROWS = 12


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _cell(v: Any) -> str:
    is_num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    if is_num:
        jv = to_jsonable(v)
        data = "" if jv is None else f' data-v="{_esc(jv)}"'
        return f'<td class="num"{data}>{_esc(format_number(v))}</td>'
    return f"<td>{_esc(format_number(v))}</td>"


_NUM_CLASS = ' class="num"'


def _numeric_columns(df: pd.DataFrame) -> list[bool]:
    """Whether each column holds numbers (not booleans): such columns and their headers are right-aligned."""
    out = []
    for c in df.columns:
        col = df[c]
        if pd.api.types.is_bool_dtype(col.dtype):
            out.append(False)
        elif pd.api.types.is_numeric_dtype(col.dtype):
            out.append(True)
        else:
            vals = [v for v in col.tolist() if v is not None and not (isinstance(v, float) and np.isnan(v))]
            out.append(bool(vals) and all(isinstance(v, (int, float, np.integer, np.floating))
                                          and not isinstance(v, (bool, np.bool_)) for v in vals))
    return out


def _meta_value(v):
    """A header value as a reader writes it: yes/no rather than Python's True/False."""
    return ("yes" if v else "no") if isinstance(v, (bool, np.bool_)) else v


def render_table(df: pd.DataFrame, caption: str | None, max_rows: int | None, highlight: str | None,
                 anchor: str | None = None) -> str:
    """One table: numeric columns (and their headers) right-aligned, sortable by a click on a header.

    Tables of more than ``COLLAPSE_ROWS`` rows start collapsed (their first rows
    and a button to show the rest); printed, every table is shown whole.
    """
    flat = flat_frame(df)
    if max_rows == 0:  # a data-only table: say where it is rather than draw an empty header
        ident = f' id="{_esc(anchor)}"' if anchor else ""
        what = f"{_esc(caption)}: " if caption else ""
        return f'<p class="more"{ident}>{what}{len(flat):,} rows, in the JSON and Parquet files (not shown here).</p>'
    shown = flat if max_rows is None else flat.head(max_rows)
    collapse = len(shown) > COLLAPSE_ROWS
    ident = f' id="{_esc(anchor)}"' if anchor else ""
    parts = [f'<div class="tablebox{" collapsed" if collapse else ""}"{ident}><div class="tablewrap"><table class="sortable">']
    if caption:
        parts.append(f"<caption>{_esc(caption)}</caption>")
    numeric = _numeric_columns(shown)
    parts.append("<thead><tr>" + "".join(f'<th{_NUM_CLASS if isnum else ""} scope="col">{_esc(c)}</th>'
                                         for c, isnum in zip(flat.columns, numeric)) + "</tr></thead><tbody>")
    hl = shown[highlight].to_numpy() if highlight and highlight in shown.columns else None
    for i, row in enumerate(shown.itertuples(index=False, name=None)):
        cls = ' class="hl"' if hl is not None and bool(hl[i]) else ""
        parts.append(f"<tr{cls}>" + "".join(_cell(v) for v in row) + "</tr>")
    parts.append("</tbody></table></div>")
    if collapse:
        more, less = f"Show all {len(shown):,} rows", "Show fewer rows"
        parts.append(f'<button type="button" class="toggle" aria-expanded="false" data-more="{_esc(more)}" '
                     f'data-less="{_esc(less)}">{_esc(more)}</button>')
    parts.append("</div>")
    if max_rows is not None and len(flat) > max_rows:
        parts.append(f'<p class="more">Showing {max_rows:,} of {len(flat):,} rows; the JSON and Parquet files have all of them.</p>')
    return "".join(parts)


def block_anchor(section_id: str, name: str) -> str:
    """HTML id of a named block of a section (what a finding links to)."""
    return f"{slug(section_id)}--{slug(name)}"


def render_block(b: dict, section_id: str = "", seen: set | None = None) -> str:
    """HTML of one block; a named block gets the id :func:`block_anchor` unless ``seen`` already holds it
    (a figure and a table of the same name: the first one gets it)."""
    t = b["type"]
    anchor = block_anchor(section_id, b["name"]) if b.get("name") else None
    if anchor is not None and seen is not None:
        if anchor in seen:
            anchor = None
        else:
            seen.add(anchor)
    if t == "text":
        return f"<p>{_esc(b['text'])}</p>"
    if t == "note":
        return f'<div class="note {b["level"]}" role="note">{_esc(b["text"])}</div>'
    if t == "metrics":
        items = "".join(
            f'<div class="metric"><div class="v">{_esc(format_number(v))}</div><div class="k">{_esc(k)}</div></div>' for k, v in b["values"].items()
        )
        cap = f"<h3>{_esc(b['caption'])}</h3>" if b.get("caption") else ""
        ident = f' id="{_esc(anchor)}"' if anchor else ""
        return f'<div class="block"{ident}>{cap}<div class="metrics" id="{_esc(slug(b["name"]))}">{items}</div></div>'
    if t == "table":
        return render_table(b["frame"], b.get("caption"), b.get("max_rows"), b.get("highlight"), anchor)
    if t == "figure":
        ident = f' id="{_esc(anchor)}"' if anchor else ""
        return (f'<figure{ident} role="img" aria-label="{_esc(b["alt"])}">{b["svg"]}'
                f'<figcaption>{_esc(b["caption"])}</figcaption></figure>')
    if t == "image":
        return f'<figure><img alt="{_esc(b["caption"])}" src="data:image/png;base64,{b["png"]}"><figcaption>{_esc(b["caption"])}</figcaption></figure>'
    raise ValueError(f"unknown block type {t!r}")


def render_findings(findings: list, titles: dict[str, str]) -> str:
    """The findings summary: one list item per finding (severity, sentence linked to its section or block, section)."""
    items = []
    for f in findings:
        href = block_anchor(f.section, f.target) if f.section and f.target else slug(f.section or "findings")
        where = titles.get(f.section, "")
        items.append(f'<li class="{_esc(f.severity)}"><span class="sev">{_esc(f.severity)}</span>'
                     f'<a href="#{_esc(href)}">{_esc(f.sentence)}</a>'
                     + (f'<span class="where">{_esc(where)}</span>' if where else "") + "</li>")
    body = (f'<ol class="findings-list">{"".join(items)}</ol>' if items
            else "<p>No findings: the sections below record no result worth a sentence.</p>")
    return ('<section id="findings" class="findings" aria-labelledby="findings-title"><h2 id="findings-title">Findings</h2>'
            '<p class="more">What the audit found, most severe and largest first (docs/METHODS.md §9.1); each sentence '
            "links to the table or figure with its numbers.</p>" + body + "</section>")


def render_html(report: Any) -> str:
    """The whole report as one HTML document (inline CSS, SVG figures and a table-sorting script).

    The findings summary comes first, then the sections.

    Parameters
    ----------
    report : fairvision.report.Report
        Any object with ``title``, ``subtitle``, ``meta`` (dict),
        ``sections`` (:class:`~fairvision.report.Section` objects) and,
        optionally, ``findings()`` (ranked :class:`~fairvision.report.findings.Finding` objects).

    Returns
    -------
    str
    """
    meta_rows = "".join(f"<p><b>{_esc(k)}:</b> {_esc(_meta_value(v))}</p>" for k, v in report.meta.items()
                        if v is not None and not isinstance(v, (dict, list)))  # None: the option was not used
    settings = report.meta.get("settings")
    if isinstance(settings, dict):  # the audit's shared options, on one line
        meta_rows += "<p><b>settings:</b> " + _esc(", ".join(f"{k} {_meta_value(v)}" for k, v in settings.items()
                                                         if v is not None)) + "</p>"
    findings = report.findings() if callable(getattr(report, "findings", None)) else []
    nav = '<a href="#findings">Findings</a>' + "".join(f'<a href="#{_esc(slug(s.id))}">{_esc(s.title)}</a>' for s in report.sections)
    body = [render_findings(findings, {s.id: s.title for s in report.sections})]
    for s in report.sections:
        intro = f"<p>{_esc(s.intro)}</p>" if s.intro else ""
        seen: set = set()
        body.append(f'<section id="{_esc(slug(s.id))}"><h2>{_esc(s.title)}</h2>{intro}'
                    + "".join(render_block(b, s.id, seen) for b in s.blocks) + "</section>")
    subtitle = f"<p>{_esc(report.subtitle)}</p>" if report.subtitle else ""
    return (
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\">"
        f"<title>{_esc(report.title)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>{_esc(report.title)}</h1>{subtitle}{meta_rows}</header>"
        f'<div class="layout"><nav aria-label="Sections">{nav}</nav><main>{"".join(body)}</main></div>'
        f"<footer>Generated by fairvision {__version__}. Every number here is also in report.json. "
        "Groups come from the labels in the input table; fairvision never infers race or gender from faces.</footer>"
        f"<script>{_JS}</script></body></html>"
    )
