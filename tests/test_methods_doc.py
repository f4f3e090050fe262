"""docs/METHODS.md is the method reference that docstrings cite; every citation must name one of its headings.

A citation reads ``docs/METHODS.md §N`` or ``docs/METHODS.md §N.M``; several entries may follow one mention,
joined by ", " or " and " (``docs/METHODS.md §2.2 and §2.3``, ``docs/METHODS.md §4.1, §4.2 and §4.3``).
Every occurrence of "METHODS.md" in ``src/`` must be part of such a citation, on one line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "METHODS.md"
SRC = ROOT / "src" / "fairvision"

_SECTION = re.compile(r"^## (\d+) (\S.*)$")
_ENTRY = re.compile(r"^### (\d+)\.(\d+) (\S.*)$")
_NUMBER = r"§(\d+(?:\.\d+)?)"
_CITATION = re.compile(r"docs/METHODS\.md " + _NUMBER + r"((?:(?:, | and |, and )" + _NUMBER + r")*)")
_LISTED = re.compile(_NUMBER)


def parse_headings(text: str) -> dict[str, str]:
    """Numbered headings of the method reference: ``{"1": "Colour", "1.1": "sRGB to CIELAB", ...}``."""
    out: dict[str, str] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        m = _SECTION.match(line)
        if m:
            key, title = m.group(1), m.group(2)
        else:
            m = _ENTRY.match(line)
            if not m:
                continue
            key, title = f"{m.group(1)}.{m.group(2)}", m.group(3)
        assert key not in out, f"docs/METHODS.md:{lineno}: heading {key} appears twice"
        out[key] = title.strip()
    return out


def find_citations(line: str) -> tuple[list[str], list[int]]:
    """Entries cited on ``line`` and the column of every "METHODS.md" that is not part of a citation."""
    cited: list[str] = []
    covered: list[tuple[int, int]] = []
    for m in _CITATION.finditer(line):
        cited.append(m.group(1))
        cited.extend(_LISTED.findall(m.group(2)))
        covered.append((m.start(), m.end()))
    bad = []
    for m in re.finditer(r"METHODS\.md", line):
        if not any(start <= m.start() < end for start, end in covered):
            bad.append(m.start())
    return cited, bad


@pytest.fixture(scope="module")
def headings() -> dict[str, str]:
    assert DOC.is_file(), "docs/METHODS.md is missing"
    return parse_headings(DOC.read_text(encoding="utf-8"))


def test_headings_are_numbered_consistently(headings):
    assert headings, "docs/METHODS.md has no '## N Title' / '### N.M Title' headings"
    sections = sorted(int(k) for k in headings if "." not in k)
    assert sections == list(range(1, len(sections) + 1)), f"sections are not numbered 1..n: {sections}"
    for key in headings:
        if "." in key:
            parent, sub = key.split(".")
            assert parent in headings, f"entry {key} has no section '## {parent}'"
            subs = sorted(int(k.split(".")[1]) for k in headings if k.startswith(parent + "."))
            assert subs == list(range(1, len(subs) + 1)), f"entries of section {parent} are not numbered 1..n: {subs}"


def test_citation_parser():
    assert find_citations("see docs/METHODS.md §6.3.") == (["6.3"], [])
    assert find_citations("(docs/METHODS.md §2.2 and §2.3)") == (["2.2", "2.3"], [])
    assert find_citations("docs/METHODS.md §4.1, §4.2 and §4.3") == (["4.1", "4.2", "4.3"], [])
    assert find_citations("docs/METHODS.md §1") == (["1"], [])
    assert find_citations("METHODS.md section 4")[1] == [0]
    assert find_citations("METHODS.md 7")[1] == [0]
    assert find_citations("docs/METHODS.md section 4")[1] == [5]
    assert find_citations("docs/METHODS.md")[1] == [5]
    assert find_citations("MASK_METHODS, METHODS = (...)") == ([], [])


def test_every_citation_in_src_names_a_heading(headings):
    offenders = []
    n_citations = 0
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(ROOT)
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "METHODS.md" not in line:
                continue
            cited, bad = find_citations(line)
            for col in bad:
                offenders.append(f"{rel}:{lineno}: not a 'docs/METHODS.md §N.M' citation: {line.strip()}")
            for key in cited:
                n_citations += 1
                if key not in headings:
                    offenders.append(f"{rel}:{lineno}: §{key} is not a heading of docs/METHODS.md: {line.strip()}")
    assert not offenders, f"{len(offenders)} bad METHODS.md citation(s):\n" + "\n".join(offenders)
    assert n_citations > 0, "no docstring cites docs/METHODS.md"
