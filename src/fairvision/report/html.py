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
.tablewrap{overflow-x:auto;max-height:520px;overflow-y:auto;border:1px solid var(--line);border-radius:6px;margin:6px 0}
table{border-collapse:collapse;font-size:13px;width:max-content;min-width:100%}th,td{padding:4px 10px;border-bottom:1px solid var(--line);text-align:left;white-space:nowrap}
th{background:#f4f6fa;position:sticky;top:0;cursor:pointer;user-select:none}td.num{text-align:right;font-variant-numeric:tabular-nums}
tr.hl td{background:var(--findbg);font-weight:600}caption{caption-side:top;text-align:left;color:var(--muted);padding:4px 0;font-size:13px}
figure{margin:12px 0}figure svg{max-width:100%;height:auto}figcaption{color:var(--muted);font-size:13px}
.note{border-radius:6px;padding:8px 12px;margin:8px 0;background:var(--infobg)}.note.warning{background:var(--warnbg);color:var(--warn)}.note.finding{background:var(--findbg);color:var(--find)}
.more{color:var(--muted);font-size:12px}footer{padding:16px 40px;color:var(--muted);font-size:12px}
@media print{nav{display:none}.tablewrap{max-height:none}}
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
"""


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _cell(v: Any) -> str:
    is_num = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, (bool, np.bool_))
    if is_num:
        jv = to_jsonable(v)
        data = "" if jv is None else f' data-v="{_esc(jv)}"'
        return f'<td class="num"{data}>{_esc(format_number(v))}</td>'
    return f"<td>{_esc(format_number(v))}</td>"


def render_table(df: pd.DataFrame, caption: str | None, max_rows: int | None, highlight: str | None) -> str:
    flat = flat_frame(df)
    shown = flat if max_rows is None else flat.head(max_rows)
    parts = ['<div class="tablewrap"><table class="sortable">']
    if caption:
        parts.append(f"<caption>{_esc(caption)}</caption>")
    parts.append("<thead><tr>" + "".join(f"<th>{_esc(c)}</th>" for c in flat.columns) + "</tr></thead><tbody>")
    hl = shown[highlight].to_numpy() if highlight and highlight in shown.columns else None
    for i, row in enumerate(shown.itertuples(index=False, name=None)):
        cls = ' class="hl"' if hl is not None and bool(hl[i]) else ""
        parts.append(f"<tr{cls}>" + "".join(_cell(v) for v in row) + "</tr>")
    parts.append("</tbody></table></div>")
    if max_rows is not None and len(flat) > max_rows:
        parts.append(f'<p class="more">Showing {max_rows:,} of {len(flat):,} rows; the JSON and Parquet files have all of them.</p>')
    return "".join(parts)


def render_block(b: dict) -> str:
    t = b["type"]
    if t == "text":
        return f"<p>{_esc(b['text'])}</p>"
    if t == "note":
        return f'<div class="note {b["level"]}" role="note">{_esc(b["text"])}</div>'
    if t == "metrics":
        items = "".join(
            f'<div class="metric"><div class="v">{_esc(format_number(v))}</div><div class="k">{_esc(k)}</div></div>' for k, v in b["values"].items()
        )
        cap = f"<h3>{_esc(b['caption'])}</h3>" if b.get("caption") else ""
        return f'{cap}<div class="metrics" id="{_esc(slug(b["name"]))}">{items}</div>'
    if t == "table":
        return render_table(b["frame"], b.get("caption"), b.get("max_rows"), b.get("highlight"))
    if t == "figure":
        return f'<figure role="img" aria-label="{_esc(b["alt"])}">{b["svg"]}<figcaption>{_esc(b["caption"])}</figcaption></figure>'
    if t == "image":
        return f'<figure><img alt="{_esc(b["caption"])}" src="data:image/png;base64,{b["png"]}"><figcaption>{_esc(b["caption"])}</figcaption></figure>'
    raise ValueError(f"unknown block type {t!r}")


def render_html(report: Any) -> str:
    """The whole report as one HTML document (inline CSS, SVG figures and a table-sorting script).

    Parameters
    ----------
    report : fairvision.report.Report
        Any object with ``title``, ``subtitle``, ``meta`` (dict) and
        ``sections`` (:class:`~fairvision.report.Section` objects).

    Returns
    -------
    str
    """
    meta_rows = "".join(f"<p><b>{_esc(k)}:</b> {_esc(v)}</p>" for k, v in report.meta.items() if not isinstance(v, (dict, list)))
    nav = "".join(f'<a href="#{_esc(slug(s.id))}">{_esc(s.title)}</a>' for s in report.sections)
    body = []
    for s in report.sections:
        intro = f"<p>{_esc(s.intro)}</p>" if s.intro else ""
        body.append(f'<section id="{_esc(slug(s.id))}"><h2>{_esc(s.title)}</h2>{intro}' + "".join(render_block(b) for b in s.blocks) + "</section>")
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
