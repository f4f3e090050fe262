"""Model matrix of an annotation table, and decision-tree paths as readable rules (docs/METHODS.md §7.1).

Categorical predictors are one-hot encoded (a missing value is its own level,
``(missing)``); numeric predictors keep NaN, which scikit-learn's trees route
at each split. A root-to-leaf path of a tree fitted on such a matrix is merged
into one clause per feature: ``visible keypoints <= 12 and pose = lying``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.io.validate import require_columns
from fairvision.errors import ColumnError, FairvisionError

MISSING_LEVEL = "(missing)"
MAX_LEVELS = 100


@dataclass
class EncodedFeatures:
    """Model matrix of a sample table.

    Attributes
    ----------
    X : ndarray (n_samples, n_columns)
        Numeric columns as floats (NaN = missing) and 0/1 indicator columns
        for every level of every categorical feature.
    feature : list of str
        Source feature of each column.
    level : list
        Category level of each indicator column (None for numeric columns).
    kinds : dict
        ``feature -> "numeric" | "integer" | "categorical"``.
    """

    X: np.ndarray
    feature: list[str]
    level: list
    kinds: dict[str, str]
    has_missing: dict[str, bool]

    def blocks(self) -> dict[str, np.ndarray]:
        """Column indices of every source feature."""
        out: dict[str, list[int]] = {}
        for j, f in enumerate(self.feature):
            out.setdefault(f, []).append(j)
        return {f: np.asarray(v) for f, v in out.items()}


def encode_features(data: pd.DataFrame, features: Sequence[str], *, source: str = "table") -> EncodedFeatures:
    """One-hot encode categorical features and keep numeric ones (NaN = missing).

    Booleans, strings and pandas categoricals are categorical; other numbers
    numeric (``integer`` when every value is a whole number, so that rules
    can say ``<= 12`` instead of ``<= 12.5``).
    """
    cols, feat, level, kinds, miss = [], [], [], {}, {}
    for f in features:
        require_columns(data, [f], source=source, what="feature column")
        s = data[f]
        miss[f] = bool(s.isna().any())
        is_num = pd.api.types.is_numeric_dtype(s) and not pd.api.types.is_bool_dtype(s)
        if is_num and not isinstance(s.dtype, pd.CategoricalDtype):
            v = s.to_numpy(dtype=float, na_value=np.nan)
            if np.isnan(v).all():
                raise ColumnError(f"{source}: feature column {f!r} has no values")
            if np.isinf(v).any():
                raise ColumnError(f"{source}: feature column {f!r} has infinite values")
            fin = v[~np.isnan(v)]
            kinds[f] = "integer" if np.all(fin == np.round(fin)) else "numeric"
            cols.append(v)
            feat.append(f)
            level.append(None)
        else:
            obj = s.astype(object).where(s.notna(), MISSING_LEVEL)
            if isinstance(s.dtype, pd.CategoricalDtype):
                levels = [c for c in s.cat.categories if (obj == c).any()]
                if miss[f]:
                    levels.append(MISSING_LEVEL)
            else:
                levels = sorted(pd.unique(obj), key=lambda v: (v == MISSING_LEVEL, str(v)))
            if len(levels) > MAX_LEVELS:
                raise ColumnError(f"{source}: feature column {f!r} has {len(levels)} distinct values; "
                                  f"at most {MAX_LEVELS} (is it an identifier?)")
            kinds[f] = "categorical"
            arr = obj.to_numpy()
            for lv in levels:
                cols.append((arr == lv).astype(float))
                feat.append(f)
                level.append(lv)
    if not cols:
        raise FairvisionError(f"{source}: no features to model")
    return EncodedFeatures(np.column_stack(cols), feat, level, kinds, miss)

def _fmt(v: float) -> str:
    return f"{v:.4g}"


def pretty_name(name: str) -> str:
    """A column name as words: ``visible_keypoints`` -> ``visible keypoints``."""
    return str(name).replace("_", " ")


def _describe(conds: list[tuple], enc: EncodedFeatures) -> str:
    """Merge the split conditions of one root-to-leaf path into a readable clause."""
    by_feat: dict[str, dict] = {}
    order: list[str] = []
    for col, op, thr, missing_here in conds:
        f = enc.feature[col]
        if f not in by_feat:
            by_feat[f] = {"lo": -np.inf, "hi": np.inf, "eq": None, "ne": [], "missing": True}
            order.append(f)
        d = by_feat[f]
        d["missing"] = d["missing"] and missing_here
        if enc.level[col] is not None:
            if op == ">":
                d["eq"] = enc.level[col]
            else:
                d["ne"].append(enc.level[col])
        elif op == "<=":
            d["hi"] = min(d["hi"], thr)
        else:
            d["lo"] = max(d["lo"], thr)
    parts = []
    for f in order:
        d, name, kind = by_feat[f], pretty_name(f), enc.kinds[f]
        if kind == "categorical":
            rest = [lv for c, lv in zip(enc.feature, enc.level) if c == f and lv not in d["ne"]]
            if d["eq"] is not None:
                parts.append(f"{name} = {d['eq']}")
            elif len(rest) == 1:
                parts.append(f"{name} = {rest[0]}")
            elif len(d["ne"]) == 1:
                parts.append(f"{name} ≠ {d['ne'][0]}")
            elif len(rest) < len(d["ne"]):
                parts.append(f"{name} in {{{', '.join(map(str, rest))}}}")
            else:
                parts.append(f"{name} not in {{{', '.join(map(str, d['ne']))}}}")
            continue
        lo, hi = d["lo"], d["hi"]
        if kind == "integer":
            lo_s = f">= {math.floor(lo) + 1}" if np.isfinite(lo) else None
            hi_s = f"<= {math.floor(hi)}" if np.isfinite(hi) else None
            lo_v, hi_v = (str(math.floor(lo) + 1) if np.isfinite(lo) else None), (str(math.floor(hi)) if np.isfinite(hi) else None)
            if lo_v is not None and hi_v is not None:
                text = f"{name} = {lo_v}" if lo_v == hi_v else f"{lo_v} <= {name} <= {hi_v}"
            else:
                text = f"{name} {lo_s or hi_s}"
        else:
            if np.isfinite(lo) and np.isfinite(hi):
                text = f"{_fmt(lo)} < {name} <= {_fmt(hi)}"
            elif np.isfinite(lo):
                text = f"{name} > {_fmt(lo)}"
            else:
                text = f"{name} <= {_fmt(hi)}"
        if enc.has_missing[f]:
            text = f"({text} or {name} missing)" if d["missing"] else text
        parts.append(text)
    return " and ".join(parts) if parts else "all samples"


def tree_leaves(tree, enc_sel: EncodedFeatures) -> dict[int, str]:
    """The readable condition of every leaf of a fitted tree (leaf node id -> clause)."""
    t = tree.tree_
    missing_left = getattr(t, "missing_go_to_left", np.zeros(t.node_count, dtype=np.uint8))
    out: dict[int, str] = {}
    stack = [(0, [])]
    while stack:
        node, conds = stack.pop()
        left, right = t.children_left[node], t.children_right[node]
        if left == -1:
            out[node] = _describe(conds, enc_sel)
            continue
        col, thr = int(t.feature[node]), float(t.threshold[node])
        ml = bool(missing_left[node])
        stack.append((right, conds + [(col, ">", thr, not ml)]))
        stack.append((left, conds + [(col, "<=", thr, ml)]))
    return out
