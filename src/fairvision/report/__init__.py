"""Self-contained HTML + JSON audit reports.

A :class:`Report` is a list of :class:`Section` objects, each a list of blocks
(text, key figures, tables, figures, notes). The same blocks render to one
self-contained HTML file (figures are inline SVG, no external assets, no
scripts that fetch anything) and to a versioned JSON document that carries
every number shown in the HTML. Audits build sections in
``fairvision.report.sections``; each section builder also attaches
:class:`Finding` sentences (``Section.finding``) that the report ranks and
shows first (docs/METHODS.md §9.1).
"""

from fairvision.report.document import REPORT_SCHEMA, REPORT_SCHEMA_VERSION, Finding, Report, Section

__all__ = ["Finding", "Report", "Section", "REPORT_SCHEMA", "REPORT_SCHEMA_VERSION"]
