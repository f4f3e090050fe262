"""``--fail-if`` gates: conditions such as ``"disparity>0.2"`` evaluated on an audit's quantities.

An audit exposes named numbers (``quantities()``); a CI pipeline states the
conditions under which the audit must fail. Conditions are parsed with a
regular expression, never ``eval``.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Mapping, Sequence

from fairvision.errors import FairvisionError

_OPS = {">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne}
_COND = re.compile(r"^\s*([A-Za-z_][\w.+\-:]*?)\s*(>=|<=|==|!=|>|<)\s*([-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?)\s*$")


@dataclass(frozen=True)
class Condition:
    """One parsed ``--fail-if`` condition: ``name op threshold``."""

    name: str
    op: str
    threshold: float
    text: str

    def holds(self, value: float) -> bool:
        """True when the condition is met (NaN never meets a condition)."""
        return (not math.isnan(value)) and bool(_OPS[self.op](value, self.threshold))


def parse_condition(text: str) -> Condition:
    """Parse ``"disparity>0.2"``-style conditions safely (a regular expression, no ``eval``).

    Grammar: ``NAME OP NUMBER`` with OP one of ``> >= < <= == !=``; NAME is a
    quantity of the audit's ``quantities()`` (model audit: ``disparity``,
    ``accuracy.max_disparity``, ``od``...; dataset audit: ``nsd``, ``nsd.gender``,
    ``n_empty_groups``...).
    """
    m = _COND.match(str(text))
    if not m:
        raise FairvisionError(f"condition {text!r}: expected NAME OP NUMBER, e.g. 'disparity>0.2' (OP: > >= < <= == !=)")
    return Condition(m.group(1), m.group(2), float(m.group(3)), str(text).strip())


def quantity_key(name) -> str:
    """An attribute set or group label as it appears in ``--fail-if`` names: ``"a × b"`` -> ``"a+b"`` (the
    condition syntax allows no spaces)."""
    from fairvision.groups import SEP  # lazy: groups imports numpy and pandas, which the CLI's start-up must not

    return str(name).replace(SEP, "+")


def evaluate_conditions(conditions: Sequence[str | Condition], quantities: Mapping[str, float], *,
                        nan: str = "error") -> list[dict]:
    """Evaluate conditions against named quantities.

    Returns one dict per condition: ``condition``, ``name``, ``value``,
    ``holds``. An unknown name is a :class:`FairvisionError` listing the
    names that exist. A quantity that is NaN (not defined for this input,
    e.g. a disparity with fewer than two groups to compare) is a
    :class:`FairvisionError` with ``nan="error"`` (the default), so a CI gate
    that cannot be evaluated never passes silently; ``nan="pass"`` lets it
    never meet a condition instead.
    """
    if nan not in ("pass", "error"):
        raise FairvisionError(f"nan must be 'pass' or 'error', not {nan!r}")
    out = []
    for c in conditions:
        cond = c if isinstance(c, Condition) else parse_condition(c)
        if cond.name not in quantities:
            base = sorted(k for k in quantities if k.count(".") <= 1)
            shown = ", ".join(base[:20]) + (", ..." if len(base) > 20 else "")
            raise FairvisionError(f"condition {cond.text!r}: unknown quantity {cond.name!r}; known: {shown}")
        v = float(quantities[cond.name])
        if nan == "error" and math.isnan(v):
            # a gate that cannot be evaluated must not pass silently (exit 2: the input cannot answer it)
            raise FairvisionError(f"condition {cond.text!r}: {cond.name} is not defined for this input (NaN, e.g. "
                                  "no group large enough to judge or nothing to compare); the gate cannot be "
                                  "evaluated")
        out.append({"condition": cond.text, "name": cond.name, "value": v, "holds": cond.holds(v)})
    return out


def describe(gate: Mapping) -> str:
    """``"nsd>0.3 (value 0.6): FAILS"`` for one evaluated condition."""
    return f"{gate['condition']} (value {gate['value']:.4g}): {'FAILS' if gate['holds'] else 'passes'}"


def gate_meta(gates: Sequence[Mapping]) -> dict:
    """Report metadata: the conditions given and the ones that held."""
    return {"fail_if": [g["condition"] for g in gates], "failed": [g["condition"] for g in gates if g["holds"]]}


def failure_message(gates: Sequence[Mapping]) -> str | None:
    """One line naming the conditions that held, or None when all passed."""
    failed = [g for g in gates if g["holds"]]
    if not failed:
        return None
    return "fail-if: condition met: " + "; ".join(f"{g['condition']} (value {g['value']:.4g})" for g in failed)
