"""The options every audit shares, in one object validated once where it is made.

Multiple-testing ``correction``, significance level ``alpha``, bootstrap replicates ``n_boot``, interval
``level``, random ``seed``, the ``min_subjects`` below which a group is too small to judge, and where
per-image work runs (``engine``, its ``address``, ``workers``). An audit takes ``settings=AuditSettings(...)``
instead of each of these as a loose parameter, trusts it without checking again, and its report shows it whole
(``report.json`` ``meta.settings``). The command line declares each of these options once
(``fairvision.cli.options``). No numpy here: the command line imports this at start-up. See docs/METHODS.md §9.2.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass

from fairvision.errors import ParameterError
from fairvision.stats.constants import DEFAULT_CORRECTION
from fairvision.stats.constants import METHODS as CORRECTIONS

ENGINES = ("local", "ray")


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


@dataclass(frozen=True)
class AuditSettings:
    """Options shared by every audit (docs/METHODS.md §9.2).

    Parameters
    ----------
    correction : {"holm", "bonferroni", "bh", "none"}
        Multiple-comparison correction (docs/METHODS.md §4.3).
    alpha : float
        Significance level of corrected p-values, in (0, 1).
    n_boot : int
        Bootstrap replicates for confidence intervals; 0 gives none.
    level : float
        Confidence level of intervals, in (0, 1).
    seed : int, numpy Generator or None
        Random seed of every resampling step.
    min_subjects : int
        Groups with fewer subjects are reported as too small and not tested (FHIBE: 10).
    engine : {"local", "ray"}
        Where per-image work runs.
    address : str or None
        Ray cluster address for ``engine="ray"``.
    workers : int
        Worker processes (local engine) or CPUs (a local Ray instance).
    """

    correction: str = DEFAULT_CORRECTION
    alpha: float = 0.05
    n_boot: int = 1000
    level: float = 0.95
    seed: object = 0
    min_subjects: int = 10
    engine: str = "local"
    address: str | None = None
    workers: int = 1

    def __post_init__(self) -> None:
        if self.correction not in CORRECTIONS:
            raise ParameterError("correction", f"must be one of {', '.join(CORRECTIONS)}, not {self.correction!r}")
        for name in ("alpha", "level"):
            value = getattr(self, name)
            if not _is_real(value) or not 0 < value < 1:
                raise ParameterError(name, f"must be between 0 and 1, not {value!r}")
        for name, least in (("n_boot", 0), ("min_subjects", 1), ("workers", 1)):
            value = getattr(self, name)
            if not _is_int(value) or value < least:
                raise ParameterError(name, f"must be a whole number of at least {least}, not {value!r}")
        if not (self.seed is None or hasattr(self.seed, "bit_generator") or (_is_int(self.seed) and self.seed >= 0)):
            raise ParameterError("seed", f"must be a non-negative whole number, a numpy Generator or None, not {self.seed!r}")
        if self.engine not in ENGINES:
            raise ParameterError("engine", f"must be one of {', '.join(ENGINES)}, not {self.engine!r}")

    def require_bootstrap(self, why: str, least: int = 1) -> None:
        """For an audit whose results need bootstrap replicates: ``n_boot`` below ``least`` is an error."""
        if self.n_boot < least:
            raise ParameterError("n_boot", f"must be at least {least}: {why}")

    def integer_seed(self, why: str) -> int:
        """The seed as a whole number, for an audit that records it or derives seeds from it (``why``)."""
        if not _is_int(self.seed):
            raise ParameterError("seed", f"must be a whole number: {why}, not {self.seed!r}")
        return int(self.seed)

    def replace(self, **changes) -> AuditSettings:
        """A copy with some options changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_meta(self) -> dict:
        """Every option, as a report's ``meta.settings`` shows it (a numpy Generator as its type name)."""
        out = dataclasses.asdict(self)
        if hasattr(self.seed, "bit_generator"):
            out["seed"] = type(self.seed).__name__
        return out


#: the settings an audit uses when given none
DEFAULT_SETTINGS = AuditSettings()


class SettingsView:
    """For a result object with a ``settings`` attribute: its shared options read as attributes of the result
    (``result.alpha`` is ``result.settings.alpha``), as report sections and ``--fail-if`` quantities use them."""

    settings: AuditSettings

    @property
    def correction(self) -> str:
        return self.settings.correction

    @property
    def alpha(self) -> float:
        return self.settings.alpha

    @property
    def n_boot(self) -> int:
        return self.settings.n_boot

    @property
    def level(self) -> float:
        return self.settings.level

    @property
    def seed(self):
        return self.settings.seed

    @property
    def min_subjects(self) -> int:
        return self.settings.min_subjects
