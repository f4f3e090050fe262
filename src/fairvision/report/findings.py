"""Findings: the plain sentences a report opens with, ranked (docs/METHODS.md §9.1).

A section builder attaches a :class:`Finding` to its section with
:meth:`fairvision.report.Section.finding`; :class:`fairvision.report.Report`
collects the findings of all sections, ranks them with :func:`rank_findings`
and writes them first in ``report.html`` and as the top-level ``findings``
list of ``report.json``.

Every number in a sentence is one that a table or key figure of the section
shows (a reader can check it there); ``value``, ``ci_low`` and ``ci_high``
carry the same numbers unrounded.

The helpers at the end (:func:`group_text`, :func:`pct`, :func:`num`,
:func:`p_text`, :func:`imbalance_severity`, :func:`test_severity`) keep the
sentences and severities of the different sections alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from fairvision.groups import SEP
from fairvision.report.formatting import snap_noise

__all__ = ["Finding", "SEVERITIES", "rank_findings", "group_text", "pct", "num", "p_text", "ci_text", "count_of", "verb",
           "imbalance_severity", "test_severity", "IMBALANCE_HIGH", "IMBALANCE_MEDIUM", "GAP_LARGE"]

#: severities, most severe first (docs/METHODS.md §9.1)
SEVERITIES = ("high", "medium", "info")
#: NSD (or share gap of two groups) from which an imbalance is high / medium (docs/METHODS.md §9.1)
IMBALANCE_HIGH = 0.3
IMBALANCE_MEDIUM = 0.1
#: relative size from which a significant difference is high rather than medium (docs/METHODS.md §9.1)
GAP_LARGE = 0.1


def _num_or_none(v: Any) -> float | None:
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


@dataclass
class Finding:
    """One sentence of the findings summary.

    Attributes
    ----------
    sentence : str
        Plain text, no HTML; names groups as ``attribute = value``.
    severity : str
        ``"high"``, ``"medium"`` or ``"info"`` (docs/METHODS.md §9.1).
    section : str or None
        Id of the section the finding belongs to (set by ``Section.finding``).
    target : str or None
        Name of the block (table, figure, key figures) inside the section
        that shows the numbers; the HTML link jumps there.
    quantity : str or None
        Name of the number, as in the audit's ``quantities()`` where it has one
        (e.g. ``nsd.skin_tone``).
    value, ci_low, ci_high : float or None
        The number and its confidence interval, unrounded.
    pvalue : float or None
        The p-value quoted in the sentence (adjusted for multiple testing when
        the sentence says ``p_adj``).
    size : float or None
        Magnitude on a 0-1 scale used for ranking (NSD, share gap, relative
        difference, disparity D, 1 - nRR, ...).
    topic : str or None
        What the finding is about, when two sections can report it (e.g.
        ``balance:skin_tone`` from the dataset and the skin colour sections);
        the summary shows one finding per topic (docs/METHODS.md §9.1).
    """

    sentence: str
    severity: str = "info"
    section: str | None = None
    target: str | None = None
    quantity: str | None = None
    value: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    pvalue: float | None = None
    size: float | None = None
    topic: str | None = None

    def __post_init__(self):
        if self.severity not in SEVERITIES:
            raise ValueError(f"unknown severity {self.severity!r}; use one of {', '.join(SEVERITIES)}")
        for name in ("value", "ci_low", "ci_high", "pvalue", "size"):
            setattr(self, name, _num_or_none(getattr(self, name)))

    def to_dict(self) -> dict:
        """The JSON object of the finding (all fields; missing numbers are null)."""
        return {"severity": self.severity, "sentence": self.sentence, "section": self.section, "target": self.target,
                "quantity": self.quantity, "value": self.value, "ci_low": self.ci_low, "ci_high": self.ci_high,
                "pvalue": self.pvalue, "size": self.size, "topic": self.topic}


def rank_findings(findings: Iterable[Finding]) -> list[Finding]:
    """Findings in reading order, one per topic (docs/METHODS.md §9.1).

    Severity first (high, medium, info); within a severity the larger
    ``size`` first (compared to 6 decimals; findings without a size after
    those with one), then the smaller p-value (none last), then the order in
    which the sections added them (the sort is stable). Of findings that
    share a ``topic`` only the first in this order is kept.
    """
    def key(f: Finding):
        return (SEVERITIES.index(f.severity),
                0 if f.size is not None else 1, -round(f.size or 0.0, 6),
                0 if f.pvalue is not None else 1, f.pvalue if f.pvalue is not None else 0.0)
    out, seen = [], set()
    for f in sorted(findings, key=key):
        if f.topic is not None:
            if f.topic in seen:
                continue
            seen.add(f.topic)
        out.append(f)
    return out


# ----------------------------------------------------------------------------- wording helpers


def group_text(names: str | Sequence[str], label: Any) -> str:
    """``"age = 0-2"`` or ``"age = 20-29 × gender = Male"`` for a group of an attribute set.

    ``names`` is one attribute name, a sequence of names, or an attribute-set
    label joined with ``" × "``; ``label`` a value, a tuple of values, or a
    group label joined with ``" × "``. When the parts do not pair up, the
    label is returned as it is.
    """
    ns = [names] if isinstance(names, str) and SEP not in names else (names.split(SEP) if isinstance(names, str) else list(names))
    vs = list(label) if isinstance(label, tuple) else (str(label).split(SEP) if len(ns) > 1 else [label])
    if len(ns) != len(vs):
        return str(label)
    return SEP.join(f"{n} = {v}" for n, v in zip(ns, vs))


def count_of(n: int, word: str, plural: str | None = None) -> str:
    """``"1 pair"`` / ``"6 pairs"``."""
    return f"{n:,} {word if n == 1 else (plural or word + 's')}"


def verb(n: int, singular: str = "has", plural: str = "have") -> str:
    """The verb agreeing with a count: ``verb(1) == "has"``, ``verb(3) == "have"``."""
    return singular if n == 1 else plural


def pct(share: float, digits: int = 0) -> str:
    """A share in [0, 1] as a percentage: ``pct(0.709) == "71%"``; more digits where rounding would
    show 0% or 100% for a share that is neither."""
    x = 100 * float(snap_noise(float(share))) + 0.0  # noise and -0.0 read 0% (docs/METHODS.md §9)
    while digits < 3 and x not in (0.0, 100.0) and round(x, digits) in (0.0, 100.0):
        digits += 1
    return f"{x:.{digits}f}%"


def num(v: float, digits: int = 2) -> str:
    """A number as shown in a sentence: fixed ``digits`` decimals for |v| >= 0.01, else 2 significant digits;
    floating-point noise (|v| < 1e-12, docs/METHODS.md §9) as 0, never ``4e-17`` or ``-0.00``."""
    v = float(snap_noise(float(v))) + 0.0  # + 0.0 turns -0.0 into 0.0
    if not math.isfinite(v):
        return "n/a"
    if v != 0 and abs(v) < 0.01:
        return f"{v:.2g}"
    return f"{v:.{digits}f}"


def ci_text(lo: float | None, hi: float | None, fmt=num) -> str:
    """`` [lo, hi]`` (with a leading space), or ``""`` when the interval is missing."""
    lo, hi = _num_or_none(lo), _num_or_none(hi)
    if lo is None or hi is None:
        return ""
    return f" [{fmt(lo)}, {fmt(hi)}]"


def p_text(p: float, adjusted: bool = True) -> str:
    """``"p_adj = 0.003"`` / ``"p = 0.04"``; very small values as ``"p_adj < 0.001"``."""
    name = "p_adj" if adjusted else "p"
    p = float(p)
    if not math.isfinite(p):
        return f"{name} n/a"
    if p < 0.001:
        return f"{name} < 0.001"
    return f"{name} = {p:.2g}"


def imbalance_severity(size: float | None) -> str:
    """Severity of an imbalance (NSD, or the share gap of two groups): docs/METHODS.md §9.1."""
    if size is None or not math.isfinite(size):
        return "info"
    if size >= IMBALANCE_HIGH:
        return "high"
    return "medium" if size >= IMBALANCE_MEDIUM else "info"


def test_severity(pvalue: float | None, alpha: float, size: float | None = None, large: float = GAP_LARGE) -> str:
    """Severity of a tested difference: info when not significant; high when significant and
    ``size >= large`` (or no size is known); medium otherwise (docs/METHODS.md §9.1)."""
    if pvalue is None or not math.isfinite(pvalue) or pvalue >= alpha:
        return "info"
    if size is None or not math.isfinite(size):
        return "high"
    return "high" if abs(size) >= large else "medium"
