"""What the sections about who is in a dataset share: the one-table audit (docs/METHODS.md §5.1), datasets side by
side (docs/METHODS.md §5.4) and what exclusions do (docs/METHODS.md §13.12). Each opens the same way: its overview
figures, its findings (failed ``--fail-if`` conditions first), a note per condition and per warning, and a note when
no subject column tells people apart."""

from __future__ import annotations

from typing import Any, Callable

from fairvision.audits.gates import describe
from fairvision.report.document import Section

#: the start of the note of a table without a subject column
NO_SUBJECT_NOTE = "No subject column: each image is treated as a different person."


def gate_findings(s: Section, gates: list[dict]) -> None:
    """A high finding for every ``--fail-if`` condition that holds (docs/METHODS.md §9.1)."""
    for g in gates:
        if g["holds"]:
            s.finding(f"--fail-if {describe(g)}", "high", target="overview", quantity=g.get("name"), value=g.get("value"))


def open_section(s: Section, audit: Any, overview: dict, add_findings: Callable[[Section, Any], None], *,
                 no_subject: str | None = None) -> None:
    """Add the opening of a distribution section to ``s``: the ``overview`` metrics, the findings that
    ``add_findings(s, audit)`` makes, a note per ``--fail-if`` condition of ``audit.gates`` and per warning of
    ``audit.warnings``, and, when ``no_subject`` is given (the audit has no subject column), the note
    :data:`NO_SUBJECT_NOTE` followed by ``no_subject`` (what a subject column would change)."""
    s.metrics("overview", overview)
    add_findings(s, audit)
    for g in audit.gates:
        s.note(f"--fail-if {describe(g)}", "finding" if g["holds"] else "info")
    for w in audit.warnings:
        s.note(w, "warning")
    if no_subject is not None:
        s.note(f"{NO_SUBJECT_NOTE} {no_subject}")
