"""Generative run folders: what a finished generative audit keeps for later comparison (docs/METHODS.md §10.4).

``fairvision audit generative -o DIR`` writes, beside its report, the per-pair changes
(``generative/pairs.parquet``), the design and score settings (``generative/design.json``) and every failed
generation with its cause and reason (``generative/failures.csv``):
:func:`run_files` makes them, :func:`load_run` reads a run folder back as a :class:`GenerativeRun`, the input of
:func:`fairvision.audits.generative.compare.compare_generative`.
"""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from fairvision import __version__
from fairvision.audits.generative.audit import PROPERTY_TESTS, GenerativeResult
from fairvision.audits.generative.failures import failure_table
from fairvision.errors import ColumnError, InputFileError
from fairvision.io.jsonable import to_jsonable

__all__ = ["DESIGN_FILE", "FAILURES_FILE", "GenerativeRun", "PAIRS_FILE", "load_run", "run_files"]

#: the per-pair changes and the design a generative run folder carries for later comparison
PAIRS_FILE = "generative/pairs.parquet"
DESIGN_FILE = "generative/design.json"
#: every failed generation of the run (cause and reason), written even when empty so it is never stale
FAILURES_FILE = "generative/failures.csv"
#: columns of the saved pair table (the properties are those that were assessed)
PAIR_KEYS = ["generator", "seed_id", "topic", "word"]
PAIR_EXTRA = ["prompt", "seed", "ok", "face_lost"]


@dataclass
class GenerativeRun:
    """The part of a finished generative audit that a comparison needs.

    Attributes
    ----------
    name : str
        The spec's name.
    pairs : DataFrame
        One row per requested output: ``generator``, ``seed_id``, ``topic``,
        ``word`` and the signed change of every property (NaN = not assessed).
    settings : dict
        The audit's score settings (``alpha``, ``level``, ``min_effect``, ...).
    source : str
        Where it came from (a run folder or ``result N``), for messages.
    """

    name: str
    pairs: pd.DataFrame
    settings: dict = field(default_factory=dict)
    source: str = ""

    @property
    def generators(self) -> list[str]:
        return [str(g) for g in dict.fromkeys(self.pairs["generator"])]


def run_files(result: GenerativeResult | GenerativeRun) -> dict[str, bytes]:
    """The files a run folder carries so that :func:`~fairvision.audits.generative.compare.compare_generative` can read it (docs/METHODS.md §10.4).

    ``generative/pairs.parquet``: the per-pair changes (keys, prompt,
    generation seed, ``ok``, ``face_lost`` and every property);
    ``generative/design.json``: the spec name, generators and score settings;
    ``generative/failures.csv`` (a :class:`GenerativeResult` only): every failed
    generation with its cause and plain reason (only a header when none failed).
    Pass them to :meth:`fairvision.report.Report.write` as ``extra_files``.
    """
    p = result.pairs
    cols = PAIR_KEYS + [c for c in PAIR_EXTRA if c in p.columns] + [c for c in (*PROPERTY_TESTS, "identity")
                                                                    if c in p.columns]
    out = p[cols].copy()
    for c in PAIR_KEYS + ["prompt"]:
        if c in out.columns:
            out[c] = out[c].astype(str)
    for c in ("ok", "face_lost"):
        if c in out.columns:
            out[c] = out[c].astype(bool)
    for c in cols[len(PAIR_KEYS):]:
        if c not in ("prompt", "ok", "face_lost"):
            out[c] = pd.to_numeric(out[c], errors="coerce").astype(float)
    buf = io.BytesIO()
    out.reset_index(drop=True).to_parquet(buf, index=False)
    keep = ("alpha", "level", "n_boot", "correction", "min_effect", "n_seeds", "n_words", "topics")
    design = {"fairvision": __version__, "name": result.name, "generators": list(map(str, result.generators)),
              "settings": {k: result.settings[k] for k in keep if k in result.settings}}
    files = {PAIRS_FILE: buf.getvalue(), DESIGN_FILE: json.dumps(to_jsonable(design), indent=1).encode("utf-8")}
    if isinstance(result, GenerativeResult):
        files[FAILURES_FILE] = failure_table(result.records).to_csv(index=False).encode("utf-8")
    return files


def load_run(folder: str | os.PathLike) -> GenerativeRun:
    """Read a generative run folder (written by ``fairvision audit generative``; docs/METHODS.md §10.4).

    Raises
    ------
    InputFileError
        Not a folder, or no ``generative/pairs.parquet`` in it (a run folder
        written before comparisons existed: rerun the audit, which reuses its
        outputs and stored assessments), or an unreadable file.
    ColumnError
        The pair table lacks a key column.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputFileError(f"{folder}: not a folder (give the output folder of 'fairvision audit generative')")
    pp = folder / PAIRS_FILE
    if not pp.is_file():
        raise InputFileError(f"{folder}: no {PAIRS_FILE}; it is not a generative run folder, or was written by an "
                             "older fairvision (rerun 'fairvision audit generative': outputs and assessments are reused)")
    try:
        pairs = pd.read_parquet(pp)
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the same user error
        raise InputFileError(f"{pp}: cannot read ({type(exc).__name__}: {exc})") from exc
    missing = [c for c in PAIR_KEYS if c not in pairs.columns]
    if missing:
        raise ColumnError(f"{pp}: no column {missing[0]!r}")
    design: dict = {}
    dp = folder / DESIGN_FILE
    if dp.is_file():
        try:
            design = json.loads(dp.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise InputFileError(f"{dp}: cannot read ({exc})") from exc
    return GenerativeRun(name=str(design.get("name", folder.name)), pairs=pairs, settings=design.get("settings", {}),
                         source=str(folder))
