"""The subset designer of a bias-transfer study (docs/METHODS.md §11.1).

From one labelled table it holds out a common test set (whole subjects, so no
person is both trained on and tested on) and draws training subsets from the
rest, the *pool*:

- ``stratified``: a fraction of the pool that keeps its joint class x group
  distribution (every combination of the label and all attributes), plus, for
  every size used by a balanced or single-group subset, a stratified subset of
  exactly that size, so that balancing is compared at equal size;
- ``balanced``: for each attribute, the same number of samples in every class
  x group cell (NSD 0 and NMI 0 for that attribute);
- ``single``: for each group of each attribute, only that group, with as many
  samples per class as the balanced subset of that attribute has.

Sampling is deterministic given ``seed``: every pool row gets one random
priority and each cell takes its rows of lowest priority, so the subsets are
nested (a smaller stratified subset lies inside a larger one). Groups and
cells come from :mod:`fairvision.groups`; the dataset metrics of every subset
are :func:`fairvision.stats.representation.nsd` and
:func:`fairvision.stats.association.nmi` / :func:`~fairvision.stats.association.npmi`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.errors import FairvisionError, InputFileError, ParameterError
from fairvision.groups import group_counts, memberships, subject_codes
from fairvision.io.tables import SUBJECT_ID, read_table, write_table
from fairvision.io.validate import check_missing_rule
from fairvision.schema import Attribute, Schema
from fairvision.stats.association import nmi, npmi
from fairvision.stats.representation import nsd

#: the subset designs, in the order the study lists them
DESIGNS = ("stratified", "balanced", "single")
DEFAULT_FRACTIONS = (0.25, 0.5, 1.0)
DEFAULT_TEST_FRACTION = 0.3
MANIFEST = "design.json"
FORMATS = ("csv", "parquet")


@dataclass
class SubsetDesign:
    """The subsets of a bias-transfer study and their dataset metrics.

    Attributes
    ----------
    label, attributes : the label column and the demographic attributes.
    schema : Schema
        Declared classes and groups (fixed from the whole table, so a
        single-group subset still knows the groups it lacks).
    test : pandas.DataFrame
        The common held-out test set (whole subjects).
    subsets : dict
        Subset name -> its training rows (original columns).
    catalog : pandas.DataFrame
        One row per subset: ``subset``, ``family``, ``attribute``, ``group``,
        ``fraction``, ``size``.
    summary : pandas.DataFrame
        One row per subset (the paper's Table 1): ``size``, ``n_subjects`` and
        per attribute ``nsd.<a>``, ``nmi.<a>`` and ``excluded.<a>`` (the reason
        a single-group subset has no metric for ``a``).
    npmi : pandas.DataFrame
        Long table ``subset``, ``attribute``, ``class``, ``group``, ``npmi``.
    composition : pandas.DataFrame
        Long table of counts ``subset``, ``attribute``, ``class``, ``group``, ``n``.
    """

    label: str
    attributes: list[str]
    schema: Schema
    subject_col: str | None
    seed: int
    test_fraction: float
    test: pd.DataFrame
    subsets: dict[str, pd.DataFrame]
    catalog: pd.DataFrame
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)
    npmi: pd.DataFrame = field(default_factory=pd.DataFrame)
    composition: pd.DataFrame = field(default_factory=pd.DataFrame)
    notes: list[str] = field(default_factory=list)
    n_pool: int = 0

    def to_frame(self) -> pd.DataFrame:
        """The per-subset summary (Table 1 layout)."""
        return self.summary

    def manifest(self, fmt: str = "csv") -> dict:
        """What :func:`write_design` writes to ``design.json``."""
        return {
            "label": self.label, "attributes": list(self.attributes), "subject_col": self.subject_col,
            "seed": self.seed, "test_fraction": self.test_fraction, "n_pool": self.n_pool,
            "schema": self.schema.to_dict(), "test": f"test.{fmt}", "notes": list(self.notes),
            "subsets": [{**{k: (None if isinstance(v, float) and np.isnan(v) else v) for k, v in row.items()},
                         "file": f"subsets/{row['subset']}.{fmt}"} for row in self.catalog.to_dict("records")],
        }


# -- helpers ------------------------------------------------------------------------------------------------------

def apportion(quotas: np.ndarray, total: int) -> np.ndarray:
    """Integers that sum to ``total`` and differ from ``quotas`` by less than 1 (largest remainder; ties by
    position) (docs/METHODS.md §11.1)."""
    q = np.asarray(quotas, dtype=float)
    base = np.floor(q + 1e-9).astype(np.int64)
    rest = int(total) - int(base.sum())
    if rest > 0:
        order = np.lexsort((np.arange(q.size), -(q - base)))
        base[order[:rest]] += 1
    return base


def _fixed_schema(data: pd.DataFrame, names: Sequence[str], schema: Schema | None, missing: str, source: str):
    """Attributes with their categories fixed from the whole table, and the dense code of every row (-1: left out)."""
    schema = schema or Schema()
    schema.declare(names, missing=missing)
    ms = memberships(data, list(names), schema, source=source)
    fixed, codes = Schema(), []
    for name, m in zip(names, ms):
        if not m.single_valued or len(np.unique(m.rows)) != m.rows.size:
            raise FairvisionError(f"{source}: attribute {name!r} is multi-valued; a training subset's composition needs "
                                  "one value per row")
        fixed.add(dataclasses.replace(schema[name], categories=list(m.categories), allow_unknown=False))
        c = np.full(len(data), -1, dtype=np.int64)
        c[m.rows] = m.codes
        codes.append(c)
    return fixed, codes


def _take(priority: np.ndarray, cell: np.ndarray, want: dict[int, int]) -> np.ndarray:
    """Rows (positions) of lowest priority in each cell: ``want[cell]`` of them."""
    out = []
    for c, k in want.items():
        if k <= 0:
            continue
        rows = np.flatnonzero(cell == c)
        if rows.size < k:
            raise FairvisionError(f"internal: cell {c} has {rows.size} rows, {k} wanted")
        out.append(rows[np.argsort(priority[rows], kind="stable")[:k]])
    return np.sort(np.concatenate(out)) if out else np.zeros(0, dtype=np.int64)


def slug(text: str) -> str:
    """A file-name-safe form of a group or attribute name (``"20-49"`` stays, ``"East Asian"`` -> ``"East-Asian"``)."""
    s = re.sub(r"[^A-Za-z0-9+._-]+", "-", str(text)).strip("-.")
    return s or "x"


def _fraction_name(f: float) -> str:
    pct = 100 * f
    return f"stratified_f{pct:g}".replace(".", "p")


# -- the designer -------------------------------------------------------------------------------------------------

def design_subsets(
    data: pd.DataFrame,
    label: str,
    attributes: Sequence[str],
    *,
    designs: Sequence[str] = DESIGNS,
    fractions: Sequence[float] = DEFAULT_FRACTIONS,
    size: int | None = None,
    test_fraction: float = DEFAULT_TEST_FRACTION,
    subject_col: str | None = None,
    schema: Schema | None = None,
    missing: str = "error",
    settings: AuditSettings | None = None,
) -> SubsetDesign:
    """Hold out a common test set and draw the training subsets of a bias-transfer study (docs/METHODS.md §11.1).

    Parameters
    ----------
    data : pandas.DataFrame
        One row per sample with the ``label`` column and the ``attributes``.
    label : str
        The class the models predict.
    attributes : sequence of str
        Demographic attributes (at least one).
    designs : sequence of {"stratified", "balanced", "single"}
        Which subset families to draw.
    fractions : sequence of float
        Fractions of the pool for the stratified subsets, in (0, 1].
    size : int, optional
        Size of every balanced and single-group subset (and of the matching
        stratified ones); default: the largest size every requested design of
        the attribute can have.
    test_fraction : float
        Share of the subjects held out as the common test set, in [0, 1).
    subject_col : str, optional
        Subject column (default ``subject_id`` when present; else every row is
        its own subject).
    schema : Schema, optional
        Declared categories, bins.
    missing : {"error", "drop", "keep"}
        Empty label or attribute cells.
    settings : AuditSettings, optional
        ``seed``: randomness of the test split and of the subsets (a whole number).

    Returns
    -------
    SubsetDesign
    """
    seed = (settings or DEFAULT_SETTINGS).integer_seed("the design records it")
    source = str(data.attrs.get("source", "table"))
    check_missing_rule(missing)
    attributes = list(attributes)
    fractions = _checked_options(label, attributes, designs, fractions, test_fraction, size)
    if subject_col is None and SUBJECT_ID in data.columns:
        subject_col = SUBJECT_ID
    subjects = subject_codes(data, subject_col, source=source, rows_as_subjects=True)

    fixed, codes = _fixed_schema(data, [label, *attributes], schema, missing, source)
    keep = np.all(np.stack(codes) >= 0, axis=0)
    if not keep.any():
        raise FairvisionError(f"{source}: no row has a {label!r} and every attribute")
    classes = np.unique(codes[0][keep])
    if classes.size < 2:
        raise FairvisionError(f"{source}: label column {fixed[label].source!r} has one class only "
                              f"({fixed[label].categories[classes[0]]!r} in all {int(keep.sum()):,} rows used): a model "
                              "trained to predict it has nothing to learn (was the label column chosen right?)")
    radix = [len(fixed[n].categories) for n in [label, *attributes]]
    joint = np.ravel_multi_index(tuple(c[keep] for c in codes), radix)
    rng = np.random.default_rng(seed)
    rows_all = np.flatnonzero(keep)
    in_test = _test_subjects(subjects[rows_all], joint, test_fraction, rng)
    test_rows, pool_rows = rows_all[in_test], rows_all[~in_test]
    if len(pool_rows) == 0:
        raise FairvisionError(f"{source}: nothing left to train on after holding out the test set")
    drawn = _Draws(joint[~in_test], rng.random(len(pool_rows)))
    if "stratified" in designs:
        for f in fractions:
            drawn.add(_fraction_name(f), "stratified", drawn.stratified(int(round(f * len(pool_rows)))), fraction=f)
    matched: list[int] = []
    if {"balanced", "single"} & set(designs):
        pool_codes = [c[pool_rows] for c in codes]
        for i, a in enumerate(attributes, start=1):
            groups = fixed[a].categories
            cell = pool_codes[0] * len(groups) + pool_codes[i]
            n_rows = _draw_balanced(drawn, a, groups, fixed[label].categories, cell, designs, size)
            if n_rows:
                matched.append(n_rows)
    if "stratified" in designs:
        have = {r["size"] for r in drawn.catalog if r["family"] == "stratified"}
        for n_rows in sorted(set(matched)):
            if n_rows not in have:
                drawn.add(f"stratified_n{n_rows}", "stratified", drawn.stratified(n_rows), fraction=n_rows / len(pool_rows))
    if not drawn.picked:
        notes = drawn.notes
        raise FairvisionError(f"{source}: no subset could be drawn" + (f" ({'; '.join(notes)})" if notes else ""))

    table = data.reset_index(drop=True)
    subsets = {name: table.iloc[pool_rows[rows]].reset_index(drop=True) for name, rows in drawn.picked.items()}
    test = table.iloc[test_rows].reset_index(drop=True)
    test.attrs["source"] = f"test set of {source}"
    design = SubsetDesign(label, attributes, fixed, subject_col, int(seed), float(test_fraction), test, subsets,
                          pd.DataFrame(drawn.catalog), notes=drawn.notes, n_pool=int(len(pool_rows)))
    return with_metrics(design)


def _checked_options(label: str, attributes: list[str], designs: Sequence[str], fractions: Sequence[float],
                     test_fraction: float, size: int | None) -> list[float]:
    """Check the design's options; the stratified fractions, sorted and without repeats."""
    if not attributes:
        raise ParameterError("attributes", "is empty: give at least one demographic attribute")
    if label in attributes:
        raise ParameterError("label", f"{label!r} is also an attribute; the label is what the models predict")
    if len(set(attributes)) != len(attributes):
        raise ParameterError("attributes", f"list one attribute twice: {', '.join(attributes)}")
    bad = [d for d in designs if d not in DESIGNS]
    if bad or not designs:
        raise ParameterError("designs", f"must be among {', '.join(DESIGNS)}, not {bad[0] if bad else ''!r}")
    fractions = sorted({float(f) for f in fractions})
    if "stratified" in designs and (not fractions or any(not 0 < f <= 1 for f in fractions)):
        raise ParameterError("fractions", "must lie in (0, 1]")
    if not 0 <= test_fraction < 1:
        raise ParameterError("test_fraction", f"must lie in [0, 1), not {test_fraction}")
    if size is not None and size < 1:
        raise ParameterError("size", f"must be at least 1, not {size}")
    return fractions


def _test_subjects(subj: np.ndarray, joint: np.ndarray, test_fraction: float, rng: np.random.Generator) -> np.ndarray:
    """Which rows are in the common test set: whole subjects, stratified by the cell of each subject's first row."""
    first = pd.Series(joint).groupby(subj).first()
    test_subjects = np.zeros(0, dtype=np.int64)
    if test_fraction > 0:
        s_ids, s_cell = first.index.to_numpy(), first.to_numpy()
        cells, counts = np.unique(s_cell, return_counts=True)
        quota = apportion(counts * test_fraction, int(round(len(s_ids) * test_fraction)))
        s_pri = rng.random(len(s_ids))
        chosen = [s_ids[np.flatnonzero(s_cell == c)[np.argsort(s_pri[s_cell == c], kind="stable")[:q]]]
                  for c, q in zip(cells, quota) if q > 0]
        test_subjects = np.concatenate(chosen) if chosen else test_subjects
    return np.isin(subj, test_subjects)


class _Draws:
    """The subsets drawn from the pool so far: rows (pool positions) by name, the catalog and notes."""

    def __init__(self, pool_joint: np.ndarray, priority: np.ndarray):
        self.pool_joint, self.priority = pool_joint, priority
        self.picked: dict[str, np.ndarray] = {}
        self.catalog: list[dict] = []
        self.notes: list[str] = []

    def add(self, name, family, rows, attribute=None, group=None, fraction=float("nan")) -> None:
        self.picked[name] = rows
        self.catalog.append({"subset": name, "family": family, "attribute": attribute, "group": group,
                             "fraction": fraction, "size": int(rows.size)})

    def stratified(self, n: int) -> np.ndarray:
        """``n`` pool rows keeping the pool's joint class x group distribution."""
        cells, counts = np.unique(self.pool_joint, return_counts=True)
        quota = apportion(counts * (n / len(self.pool_joint)), n)
        return _take(self.priority, self.pool_joint, dict(zip(cells.tolist(), quota.tolist())))


def _draw_balanced(drawn: _Draws, a: str, groups: list, classes: list, cell: np.ndarray, designs: Sequence[str],
                   size: int | None) -> int:
    """Draw the balanced and single-group subsets of attribute ``a`` (``cell``: class x group code of every pool
    row); the rows of its balanced subset (0: none drawn, with a note why)."""
    n_cls, G = len(classes), len(groups)
    n = np.bincount(cell, minlength=n_cls * G).reshape(n_cls, G)
    if G < 2:
        drawn.notes.append(f"{a}: one group only ({groups[0]}); no balanced or single-group subset")
        return 0
    per_cell_max = int((n // G).min()) if "single" in designs else int(n.min())
    if size is not None:
        if size % (n_cls * G):
            raise ParameterError("size", f"{size} is not a multiple of classes x groups of {a!r} ({n_cls} x {G} = "
                                         f"{n_cls * G}); a balanced subset needs the same count in every cell")
        m = size // (n_cls * G)
        if m > per_cell_max:
            c, g = np.unravel_index(int(np.argmin(n)), n.shape)
            need = m * G if "single" in designs else m
            raise ParameterError("size", f"{size} is too large for {a!r}: it needs {need} training rows of class "
                                         f"{classes[c]!r} in group {groups[g]!r}, which has {int(n[c, g])}; the "
                                         f"largest possible size is {per_cell_max * n_cls * G}")
    else:
        m = per_cell_max
    if m == 0:
        c, g = np.unravel_index(int(np.argmin(n)), n.shape)
        drawn.notes.append(f"{a}: no balanced or single-group subset: class {classes[c]!r} has "
                           f"{int(n[c, g])} training rows in group {groups[g]!r}")
        return 0
    if "balanced" in designs:
        want = {c * G + g: m for c in range(n_cls) for g in range(G)}
        drawn.add(f"balanced_{slug(a)}", "balanced", _take(drawn.priority, cell, want), attribute=a)
    if "single" in designs:
        for g, gname in enumerate(groups):
            want = {c * G + g: m * G for c in range(n_cls)}
            drawn.add(f"single_{slug(a)}_{slug(str(gname))}", "single", _take(drawn.priority, cell, want),
                      attribute=a, group=str(gname))
    return m * n_cls * G


def with_metrics(design: SubsetDesign) -> SubsetDesign:
    """Fill ``summary``, ``npmi`` and ``composition`` of a design from its subset tables (docs/METHODS.md §11.1).

    NSD is over the declared groups of each attribute; NMI and NPMI are
    between the label and the attribute. A subset with fewer than two groups
    of an attribute present is excluded from that attribute's metrics (NaN,
    with the reason in ``excluded.<a>``), as the bias-transfer paper does for
    its single-gender subsets.
    """
    rows, npmis, comps = [], [], []
    label, schema = design.label, design.schema
    for rec in design.catalog.to_dict("records"):
        name = rec["subset"]
        sub = design.subsets[name]
        sub.attrs["source"] = f"subset {name}"
        row = {**rec, "size": len(sub)}
        row["n_subjects"] = int(sub[design.subject_col].nunique()) if design.subject_col else len(sub)
        for a in design.attributes:
            counts = group_counts(sub, a, schema=schema)["n_samples"].to_numpy(dtype=float)
            ct = group_counts(sub, [label, a], schema=schema)["n_samples"]
            comp = ct.rename("n").reset_index().rename(columns={label: "class", a: "group"})
            comps.append(comp.assign(subset=name, attribute=a)[["subset", "attribute", "class", "group", "n"]])
            present = int((counts > 0).sum())
            if present < 2:
                row[f"nsd.{a}"] = row[f"nmi.{a}"] = float("nan")
                row[f"excluded.{a}"] = f"one {a} group only"
                continue
            row[f"nsd.{a}"] = float(nsd(counts))
            row[f"nmi.{a}"] = float(nmi(sub, label, a, schema=schema))
            row[f"excluded.{a}"] = ""
            t = npmi(sub, label, a, schema=schema)
            long = t.stack(future_stack=True).rename("npmi").reset_index()
            long.columns = ["class", "group", "npmi"]
            npmis.append(long.assign(subset=name, attribute=a)[["subset", "attribute", "class", "group", "npmi"]])
        rows.append(row)
    design.summary = pd.DataFrame(rows)
    design.npmi = pd.concat(npmis, ignore_index=True) if npmis else pd.DataFrame(
        columns=["subset", "attribute", "class", "group", "npmi"])
    design.composition = pd.concat(comps, ignore_index=True)
    for c in ("class", "group"):
        design.composition[c] = design.composition[c].astype(str)
        design.npmi[c] = design.npmi[c].astype(str)
    return design


# -- reading and writing ------------------------------------------------------------------------------------------

def write_design(design: SubsetDesign, folder: str | Path, *, fmt: str = "csv") -> dict[str, Path]:
    """Write the test set, every subset (``subsets/<name>.<fmt>``), the summary, NPMI and composition tables
    and ``design.json`` into ``folder`` (use inside :func:`fairvision.io.atomic.atomic_output_dir`)."""
    if fmt not in FORMATS:
        raise ParameterError("fmt", f"must be one of {', '.join(FORMATS)}, not {fmt!r}")
    folder = Path(folder)
    (folder / "subsets").mkdir(parents=True, exist_ok=True)
    paths = {"test": write_table(design.test, folder / f"test.{fmt}")}
    for name, sub in design.subsets.items():
        paths[name] = write_table(sub, folder / "subsets" / f"{name}.{fmt}")
    paths["summary"] = write_table(design.summary, folder / f"summary.{fmt}")
    paths["npmi"] = write_table(design.npmi, folder / f"npmi.{fmt}")
    paths["composition"] = write_table(design.composition, folder / f"composition.{fmt}")
    (folder / MANIFEST).write_text(json.dumps(design.manifest(fmt), indent=1), encoding="utf-8")
    paths["manifest"] = folder / MANIFEST
    return paths


def read_design(folder: str | Path) -> SubsetDesign:
    """Read a folder written by :func:`write_design` (``fairvision transfer subsets``) and recompute its metrics."""
    folder = Path(folder)
    man_path = folder / MANIFEST
    if not folder.is_dir():
        raise InputFileError(f"{folder}: no such folder (give the folder written by 'fairvision transfer subsets')")
    if not man_path.is_file():
        raise InputFileError(f"{folder}: no {MANIFEST}; give the folder written by 'fairvision transfer subsets'")
    try:
        man = json.loads(man_path.read_text(encoding="utf-8"))
        label, attributes, entries = man["label"], list(man["attributes"]), list(man["subsets"])
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise InputFileError(f"{man_path}: not a subset design ({type(exc).__name__}: {exc})") from None
    schema = Schema.from_dict(man.get("schema", {}), source=str(man_path))
    subject_col = man.get("subject_col")
    test = read_table(folder / man.get("test", "test.csv"))
    subsets = {}
    for e in entries:
        subsets[e["subset"]] = read_table(folder / e["file"])
    catalog = pd.DataFrame([{k: v for k, v in e.items() if k != "file"} for e in entries])
    catalog["fraction"] = catalog["fraction"].astype(float)
    for name, t in (("test", test), *subsets.items()):
        for col in [label, *attributes]:
            if col not in t.columns and (col not in schema or schema[col].source not in t.columns):
                raise InputFileError(f"{folder}: {name} has no column {col!r}")
    design = SubsetDesign(label, attributes, schema, subject_col, int(man.get("seed", 0)),
                          float(man.get("test_fraction", 0.0)), test, subsets, catalog, notes=list(man.get("notes", [])),
                          n_pool=int(man.get("n_pool", 0)))
    return with_metrics(design)


def attribute(design: SubsetDesign, name: str) -> Attribute:
    """The declared attribute (or label) ``name`` of a design."""
    return design.schema[name]
