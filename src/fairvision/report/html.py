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
from fairvision.report.formatting import column_scale, flat_frame, format_number, is_pvalue_name, slug

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
.scrollhint{display:none;margin:2px 0;font-size:12px;color:var(--accent)}.tablebox.wide .scrollhint{display:block}
.tablebox.wide .tablewrap{background:linear-gradient(to left,#fff 40%,rgba(255,255,255,0)) right center/48px 100% no-repeat local,
radial-gradient(farthest-side at 100% 50%,rgba(29,35,48,.28),rgba(29,35,48,0)) right center/16px 100% no-repeat scroll #fff}
.tablebox.wide th:first-child,.tablebox.wide td:first-child{position:sticky;left:0;z-index:1;background:#fff;box-shadow:inset -1px 0 0 var(--line)}
.tablebox.wide th:first-child{z-index:3;background:#f4f6fa}.tablebox.wide tr.hl td:first-child{background:var(--findbg)}
.tablebox.wide.scrolled td:first-child,.tablebox.wide.scrolled th:first-child{box-shadow:inset -1px 0 0 var(--line),6px 0 8px -5px rgba(29,35,48,.35)}
.tablebox.collapsed .tablewrap{max-height:330px;overflow-y:hidden;-webkit-mask-image:linear-gradient(to bottom,#000 70%,transparent);mask-image:linear-gradient(to bottom,#000 70%,transparent)}
button.toggle{margin:4px 0 0;font:inherit;font-size:13px;color:var(--accent);background:#fff;border:1px solid var(--line);border-radius:5px;padding:2px 10px;cursor:pointer}
table{border-collapse:collapse;font-size:13px;min-width:100%}th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:left;white-space:nowrap}
th{background:#f4f6fa;position:sticky;top:0;z-index:2;cursor:pointer;user-select:none;white-space:normal;vertical-align:bottom}th.num,td.num{text-align:right}td.num{font-variant-numeric:tabular-nums}
tr.hl td{background:var(--findbg);font-weight:600}.pb{display:none}.tcap{text-align:left;color:var(--muted);margin:0;padding:4px 0;font-size:13px}
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
button.toggle,.scrollhint{display:none!important}th,.tablebox.wide th:first-child,.tablebox.wide td:first-child{position:static}
table{width:auto;font-size:11px}.tablebox.wide table{font-size:8px}th,td{padding:2px 5px;white-space:normal}.tablebox.wide th,.tablebox.wide td{padding:1px 3px}.pb{display:inline}
.layout{display:block;padding:0 12px}}
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
function fvWide(){if(window.matchMedia&&window.matchMedia('print').matches)return;
document.querySelectorAll('.tablebox').forEach(function(box){
  var w=box.querySelector('.tablewrap'),hint=box.querySelector('.scrollhint');if(!w)return;
  var wide=w.scrollWidth>w.clientWidth+1;box.classList.toggle('wide',wide);box.classList.toggle('scrolled',wide&&w.scrollLeft>0);
  if(!wide||!hint)return;var ths=w.querySelectorAll('thead th'),n=ths.length;if(!n)return;
  var right=w.getBoundingClientRect().right,left=ths[0].getBoundingClientRect().right,r=0,l=0;
  for(var i=1;i<n;i++){var b=ths[i].getBoundingClientRect();if(b.right>right+1)r++;else if(b.left<left-1)l++;}
  var out=[];if(l)out.push('\u2190 '+l+' to the left');if(r)out.push(r+' to the right \u2192');
  hint.textContent='Wide table: '+(out.length?(l+r)+' of its '+n+' columns are out of view ('+out.join(', ')+'); scroll it sideways'
    :'scroll it sideways to see all '+n+' columns')+'. The first column stays in place.';
});}
document.querySelectorAll('.tablewrap').forEach(function(w){w.addEventListener('scroll',fvWide,{passive:true});});
window.addEventListener('resize',fvWide);window.addEventListener('load',fvWide);fvWide();
document.querySelectorAll('.tablebox button.toggle').forEach(function(b){
  b.addEventListener('click',function(){
    var box=b.closest('.tablebox'),c=box.classList.toggle('collapsed');
    b.setAttribute('aria-expanded',c?'false':'true');b.textContent=c?b.dataset.more:b.dataset.less;fvWide();
  });
});
"""

#: tables with more rows than this are collapsed (the first rows show; a button shows the rest)
COLLAPSE_ROWS = 12


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


#: a table whose estimated width (px at 13 px type) exceeds this is marked wide in the HTML itself: a hint says it
#: scrolls and its first column stays in place; in a browser the script measures the real width and corrects it
WIDE_PX = 900


def _cell(v: Any, scale: float | None = 0.0) -> tuple[str, str]:
    """The ``<td>`` of one value and its text (noise shown as 0 relative to ``scale``; ``None``: every digit)."""
    text = format_number(v, scale=scale)
    is_num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    if is_num:
        jv = to_jsonable(v)
        data = "" if jv is None else f' data-v="{_esc(jv)}"'
        return f'<td class="num"{data}>{_esc(text)}</td>', text
    return f"<td>{_esc(text)}</td>", text


#: a break opportunity that only printing uses (a zero-width space, hidden on screen)
_PRINT_BREAK = '<span class="pb">\u200b</span>'


def _header(name: str) -> str:
    """A column header that may wrap after ``_``, ``.`` or ``/`` where a long name (over 12 characters) splits into
    parts of 6 or more: ``effective_<wbr>groups_<wbr>ci_high``; on screen short names never wrap. Printed, a
    header may also wrap after any other ``_``, ``.`` or ``/``, so that wide tables fit the page."""
    seps = [i + 1 for i, ch in enumerate(name) if ch in "_./" and 0 < i + 1 < len(name)]
    keep, last = set(), 0
    if len(name) > 12:
        for c in seps:
            if c - last >= 6 and len(name) - c >= 6:
                keep.add(c)
                last = c
    out, start = [], 0
    for c in seps:
        out.append(_esc(name[start:c]) + ("<wbr>" if c in keep else _PRINT_BREAK))
        start = c
    out.append(_esc(name[start:]))
    return "".join(out)


def _estimated_width(headers: list[str], cells: list[list[str]]) -> float:
    """Rough width in px of a table at 13 px type: per column, its widest cell or the longest word of its header."""
    total = 0.0
    for j, h in enumerate(headers):
        word = max((len(w) for w in h.replace("_", "_ ").replace(".", ". ").split()), default=0)
        widest = max((len(row[j]) for row in cells), default=0)
        total += 7.4 * max(word, widest) + 21
    return total


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
    numeric = _numeric_columns(shown)
    headers = [str(c) for c in flat.columns]
    # floating-point noise shows as 0 relative to its column's scale; p-values keep every digit (docs/METHODS.md §9)
    scales = [None if is_pvalue_name(c) else (column_scale(shown[c].to_numpy()) if isnum else 0.0)
              for c, isnum in zip(headers, numeric)]
    hl = shown[highlight].to_numpy() if highlight and highlight in shown.columns else None
    rows, texts = [], []
    for i, row in enumerate(shown.itertuples(index=False, name=None)):
        cells = [_cell(v, sc) for v, sc in zip(row, scales)]
        texts.append([t for _, t in cells])
        cls = ' class="hl"' if hl is not None and bool(hl[i]) else ""
        rows.append(f"<tr{cls}>" + "".join(td for td, _ in cells) + "</tr>")
    wide = len(headers) > 1 and _estimated_width(headers, texts) > WIDE_PX
    classes = "tablebox" + (" collapsed" if collapse else "") + (" wide" if wide else "")
    parts = [f'<div class="{classes}"{ident}>']
    if caption:  # above the scrolling box, so that it stays in view when the table scrolls sideways
        parts.append(f'<p class="tcap">{_esc(caption)}</p>')
    parts.append(f'<p class="scrollhint" aria-hidden="true">Wide table ({len(headers)} columns): scroll it sideways '
                 "\u2192 to see them all. The first column stays in place.</p>")
    label = f' aria-label="{_esc(caption)}"' if caption else ""
    parts.append(f'<div class="tablewrap"><table class="sortable"{label}>')
    parts.append("<thead><tr>" + "".join(f'<th{_NUM_CLASS if isnum else ""} scope="col">{_header(c)}</th>'
                                         for c, isnum in zip(headers, numeric)) + "</tr></thead><tbody>")
    parts.extend(rows)
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
            f'<div class="metric"><div class="v">{_esc(format_number(v, scale=None if is_pvalue_name(k) else 0.0))}</div>'
            f'<div class="k">{_esc(k)}</div></div>' for k, v in b["values"].items()
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
