"""Direct error modelling: which annotations explain a model's per-sample score.

FHIBE (docs/METHODS.md §7.1, "Direct error modelling"; FHIBE Methods and
Extended Data Figs. 3-6): the per-image score is the target, annotations and
derived features (visible keypoints, box size, measured skin L* and h*, ...)
are the predictors. A random forest ranks the features (impurity importance,
plus permutation importance on held-out subjects, which is not biased towards
features with many split points); the elbow of the ranked importances picks
the top features (about six in FHIBE); a shallow decision tree on those gives
the direction of each effect as readable rules ("visible keypoints <= 12 and
pose = lying: mean AR 0.41, n = 230"); and a cluster bootstrap (5,000
resamples of subjects by default; :func:`fairvision.stats.resample.group_mean_ci`,
docs/METHODS.md §4.2) gives standard errors of every rule's mean.

Categorical predictors are one-hot encoded (a missing value is its own level,
``(missing)``) and their importances summed over their levels; numeric
predictors keep NaN, which scikit-learn's trees route at each split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd
from sklearn.ensemble import RandomForestRegressor
from sklearn.metrics import r2_score
from sklearn.model_selection import GroupKFold, GroupShuffleSplit
from sklearn.tree import DecisionTreeRegressor

from fairvision.errors import ColumnError, FairvisionError
from fairvision.io.validate import finite_values, missing_rows, require_variation
from fairvision.stats.resample import group_mean_ci

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
        if f not in data.columns:
            raise ColumnError(f"{source}: no feature column {f!r}; columns are {', '.join(map(str, data.columns))}")
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


def elbow_point(values: Sequence[float], *, max_k: int | None = None, min_k: int = 1) -> int:
    """How many of the top-ranked values to keep, by the elbow (knee) rule.

    The values are sorted in decreasing order and both axes scaled to [0, 1];
    the elbow is the point farthest below the chord joining the first and the
    last point (the "kneedle" construction of Satopaa et al. 2011), and the
    values up to and including it are kept. The count is then clipped to
    ``[min_k, max_k]``.

    Returns
    -------
    int
    """
    v = np.sort(np.asarray(values, dtype=float))[::-1]
    p = v.size
    if p == 0:
        return 0
    if p <= 2:
        k = p
    else:
        span = v[0] - v[-1]
        if span <= 0:
            k = p
        else:
            x = np.linspace(0.0, 1.0, p)
            y = (v - v[-1]) / span
            k = int(np.argmax((1.0 - x) - y)) + 1
    hi = p if max_k is None else min(p, max_k)
    return int(min(max(k, min_k), hi))


def _fmt(v: float) -> str:
    return f"{v:.4g}"


def _pretty(name: str) -> str:
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
        d, name, kind = by_feat[f], _pretty(f), enc.kinds[f]
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


def _tree_leaves(tree, enc_sel: EncodedFeatures) -> dict[int, str]:
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


def _pruning_alpha(X: np.ndarray, y: np.ndarray, clusters: np.ndarray, max_depth: int, min_leaf: int,
                   seed: int, folds: int = 5) -> float:
    """Cost-complexity pruning strength by subject-grouped K-fold CV and the one-standard-error rule.

    Breiman et al. (1984, section 3.4.3): among the pruning levels whose CV
    error is within one standard error of the best, take the simplest. Splits
    that only fit noise are pruned away, so rules describe real effects.
    """
    n_groups = int(clusters.max()) + 1
    if n_groups < folds:
        return 0.0
    full = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=min_leaf, random_state=seed)
    alphas = np.unique(np.maximum(full.cost_complexity_pruning_path(X, y).ccp_alphas, 0.0))
    if alphas.size <= 1:
        return 0.0
    errs = np.empty((alphas.size, folds))
    for f, (tr, te) in enumerate(GroupKFold(n_splits=folds).split(X, y, clusters)):
        for i, a in enumerate(alphas):
            t = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=min_leaf, ccp_alpha=a, random_state=seed)
            t.fit(X[tr], y[tr])
            errs[i, f] = np.mean((t.predict(X[te]) - y[te]) ** 2)
    mean, se = errs.mean(1), errs.std(1, ddof=1) / np.sqrt(folds)
    best = int(np.argmin(mean))
    ok = np.flatnonzero(mean <= mean[best] + se[best])
    return float(alphas[ok.max()])


@dataclass
class ErrorModelResult:
    """Result of :func:`audit_error_model`.

    Attributes
    ----------
    importances : DataFrame
        Indexed by feature: ``kind``, ``impurity`` (mean decrease in impurity,
        summed over a categorical feature's levels), ``permutation`` and
        ``permutation_std`` (mean and SD of the drop in held-out R^2 when the
        feature is shuffled), ``rank`` and ``selected``.
    selected : list of str
        Top features by the elbow rule (or ``n_top``), most important first.
    rules : DataFrame
        One row per decision-tree leaf, worst mean first: ``rule`` (sentence),
        ``condition``, ``n``, ``n_subjects``, ``mean``, ``se``, ``ci_low``,
        ``ci_high`` (cluster bootstrap).
    """

    target: str
    label: str
    higher_is_better: bool
    importances: pd.DataFrame
    selected: list[str]
    rules: pd.DataFrame
    importance: str
    r2_forest: float
    r2_tree: float
    n_samples: int
    n_subjects: int
    n_dropped: int
    n_boot: int
    seed: int | None
    by_subject: bool
    overall_mean: float
    min_r2: float = 0.02
    meta: dict = field(default_factory=dict)

    @property
    def explained(self) -> bool:
        """Whether the forest predicts held-out subjects' scores at all (``R^2 >= min_r2``).

        When it does not, the importances and rules describe noise.
        """
        return bool(np.isfinite(self.r2_forest) and self.r2_forest >= self.min_r2)

    def to_frame(self) -> pd.DataFrame:
        return self.importances

    @property
    def sentences(self) -> list[str]:
        return list(self.rules["rule"])


def audit_error_model(
    data: pd.DataFrame,
    target: str,
    features: Sequence[str],
    *,
    subject_col: str | None = "subject_id",
    label: str | None = None,
    higher_is_better: bool = True,
    importance: str = "impurity",
    n_top: int | None = None,
    max_top: int = 6,
    n_estimators: int = 200,
    max_depth: int = 3,
    min_leaf: int | None = None,
    permutation_repeats: int = 5,
    test_size: float = 0.25,
    n_boot: int = 5000,
    level: float = 0.95,
    min_r2: float = 0.02,
    prune: bool = True,
    missing: str = "error",
    seed: int | None = 0,
) -> ErrorModelResult:
    """Model a per-sample score from annotations (FHIBE direct error modelling).

    Parameters
    ----------
    data : DataFrame
        One row per sample with the score column and the feature columns.
    target : str
        Per-sample score column (e.g. average recall, PCK, LPIPS).
    features : sequence of str
        Predictor columns: categorical (strings, booleans, categoricals) or numeric.
    subject_col : str or None
        Subject column; when present, the held-out split and the bootstrap
        resample subjects, not images.
    label : str, optional
        Name of the score in rule sentences (default: ``target``).
    higher_is_better : bool
        Orientation of the score; rules are listed worst first.
    importance : {"impurity", "permutation"}
        Which random-forest importance ranks the features for the elbow rule.
        FHIBE used impurity (variance reduction).
    n_top : int, optional
        Keep exactly this many features instead of the elbow rule.
    max_top : int
        Upper bound of the elbow selection (FHIBE: about six).
    n_estimators, max_depth, min_leaf :
        Forest size, depth of the explanatory tree, smallest leaf (default
        ``max(10, 2% of samples)``).
    permutation_repeats : int
        Shuffles per feature for the permutation importance.
    test_size : float
        Share of subjects held out for the permutation importance and R^2.
    n_boot : int
        Bootstrap replicates for the rule standard errors (FHIBE: 5,000).
    level : float
        Two-sided level of the rules' percentile confidence intervals.
    prune : bool
        Prune the explanatory tree by cost complexity, the strength chosen by
        subject-grouped 5-fold cross-validation with the one-standard-error
        rule, so that splits fitting noise do not become rules. ``False``
        keeps the full ``max_depth`` tree (FHIBE's plain tree).
    missing : {"error", "drop", "keep"}
        Empty feature cells: stop naming the row (default), leave those rows
        out, or keep them (an empty cell is its own level, ``(missing)``).
    min_r2 : float
        Held-out R^2 below which the result says the features explain nothing
        (``ErrorModelResult.explained`` is false).
    seed : int or None
        Seeds the split, the forest, the tree and the bootstrap: same seed,
        same numbers.

    Returns
    -------
    ErrorModelResult
    """
    src = str(data.attrs.get("source", "table"))
    if importance not in ("impurity", "permutation"):
        raise FairvisionError(f"unknown importance {importance!r}; use impurity or permutation")
    if target not in data.columns:
        raise ColumnError(f"{src}: no score column {target!r}; columns are {', '.join(map(str, data.columns))}")
    features = [f for f in features if f != target]
    if not features:
        raise FairvisionError(f"{src}: give at least one feature column besides the score")
    y_all = finite_values(data, target, source=src, what="score column")
    keep = ~np.isnan(y_all)
    keep &= missing_rows(data, features, missing, source=src, among=keep)
    n_dropped = int((~keep).sum())  # no score, or an empty feature cell with missing="drop"
    df = data.loc[keep]
    y = y_all[keep]
    if y.size < 20:
        raise FairvisionError(f"{src}: only {y.size} samples with a score; error modelling needs at least 20")
    require_variation(y, target, source=src)
    by_subject = subject_col is not None and subject_col in df.columns
    if by_subject:
        subj = df[subject_col].astype(object).where(df[subject_col].notna(), None)
        if subj.isna().any():
            row = int(np.flatnonzero(subj.isna().to_numpy())[0]) + 1
            raise ColumnError(f"{src}: row {row}: empty {subject_col!r}")
        clusters = pd.factorize(subj)[0]
    else:
        clusters = np.arange(y.size)
    n_clusters = int(clusters.max()) + 1
    enc = encode_features(df, features, source=src)
    blocks = enc.blocks()

    # forest on training subjects, permutation importance on held-out subjects
    rs = np.random.RandomState(seed if seed is not None else None)
    split_seed = int(rs.randint(0, 2**31 - 1))
    forest_seed = int(rs.randint(0, 2**31 - 1))
    perm_rng = np.random.default_rng(int(rs.randint(0, 2**31 - 1)))
    boot_seed = int(rs.randint(0, 2**31 - 1))
    if n_clusters >= 8:
        tr, te = next(GroupShuffleSplit(n_splits=1, test_size=test_size, random_state=split_seed).split(enc.X, y, clusters))
    else:
        tr = te = np.arange(y.size)
    forest = RandomForestRegressor(n_estimators=n_estimators, min_samples_leaf=5, random_state=forest_seed, n_jobs=1)
    forest.fit(enc.X[tr], y[tr])
    base_pred = forest.predict(enc.X[te])
    r2_forest = float(r2_score(y[te], base_pred)) if te.size > 1 else float("nan")
    imp_cols = forest.feature_importances_
    names = list(blocks)
    impurity = np.array([imp_cols[blocks[f]].sum() for f in names])
    perm_mean, perm_std = np.zeros(len(names)), np.zeros(len(names))
    xte = enc.X[te]
    for i, f in enumerate(names):
        drops = []
        for _ in range(permutation_repeats):
            xp = xte.copy()
            xp[:, blocks[f]] = xte[perm_rng.permutation(te.size)][:, blocks[f]]
            drops.append(r2_forest - r2_score(y[te], forest.predict(xp)))
        perm_mean[i], perm_std[i] = float(np.mean(drops)), float(np.std(drops, ddof=1)) if len(drops) > 1 else 0.0
    imp = pd.DataFrame({"kind": [enc.kinds[f] for f in names], "impurity": impurity,
                        "permutation": perm_mean, "permutation_std": perm_std}, index=pd.Index(names, name="feature"))
    key = imp[importance]
    imp = imp.loc[key.sort_values(ascending=False, kind="mergesort").index]
    imp["rank"] = np.arange(1, len(imp) + 1)
    k = min(n_top, len(imp)) if n_top is not None else elbow_point(imp[importance].clip(lower=0), max_k=max_top)
    selected = list(imp.index[:k])
    imp["selected"] = imp.index.isin(selected)

    # explanatory tree on the selected features, all samples
    cols = np.concatenate([blocks[f] for f in selected])
    enc_sel = EncodedFeatures(enc.X[:, cols], [enc.feature[j] for j in cols], [enc.level[j] for j in cols],
                              enc.kinds, enc.has_missing)
    leaf_min = min_leaf if min_leaf is not None else max(10, int(math.ceil(0.02 * y.size)))
    alpha = _pruning_alpha(enc_sel.X, y, clusters, max_depth, leaf_min, forest_seed) if prune else 0.0
    tree = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=leaf_min, ccp_alpha=alpha, random_state=forest_seed)
    tree.fit(enc_sel.X, y)
    r2_tree = float(r2_score(y, tree.predict(enc_sel.X)))
    descr = _tree_leaves(tree, enc_sel)
    leaf_of = tree.apply(enc_sel.X)
    leaf_ids = sorted(descr)
    code = {lf: i for i, lf in enumerate(leaf_ids)}
    gcodes = np.array([code[lf] for lf in leaf_of])
    boot = group_mean_ci(y, gcodes, clusters, n_groups=len(leaf_ids), n_boot=n_boot, level=level, seed=boot_seed)
    lab = label or _pretty(target)
    n_leaf = np.bincount(gcodes, minlength=len(leaf_ids))
    n_subj = pd.Series(clusters).groupby(gcodes).nunique().reindex(range(len(leaf_ids)), fill_value=0).to_numpy()
    rules = pd.DataFrame({
        "condition": [descr[lf] for lf in leaf_ids], "n": n_leaf, "n_subjects": n_subj,
        "mean": boot["estimate"].to_numpy(), "se": boot["se"].to_numpy(),
        "ci_low": boot["ci_low"].to_numpy(), "ci_high": boot["ci_high"].to_numpy(),
    })
    rules["rule"] = [f"{c}: mean {lab} {m:.3g} (SE {s:.2g}), n = {n}" for c, m, s, n in
                     zip(rules["condition"], rules["mean"], rules["se"], rules["n"])]
    rules = rules.sort_values("mean", ascending=higher_is_better, kind="mergesort").reset_index(drop=True)
    rules.index = pd.RangeIndex(1, len(rules) + 1, name="rule_no")
    rules = rules[["rule", "condition", "n", "n_subjects", "mean", "se", "ci_low", "ci_high"]]
    return ErrorModelResult(
        target=target, label=lab, higher_is_better=higher_is_better, importances=imp, selected=selected,
        rules=rules, importance=importance, r2_forest=r2_forest, r2_tree=r2_tree, n_samples=int(y.size),
        n_subjects=n_clusters, n_dropped=n_dropped, n_boot=n_boot, seed=seed, by_subject=by_subject,
        overall_mean=float(y.mean()), min_r2=min_r2,
        meta={"n_estimators": n_estimators, "max_depth": max_depth, "min_leaf": leaf_min, "test_size": test_size,
              "prune": prune, "ccp_alpha": alpha, "n_leaves": int(tree.get_n_leaves()),
              "n_train": int(tr.size), "n_test": int(te.size)},
    )
