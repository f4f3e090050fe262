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

Categorical predictors are one-hot encoded (:mod:`.tree_rules`; a missing value is its own level,
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

from fairvision.audits.diagnosis.tree_rules import EncodedFeatures, encode_features, pretty_name, tree_leaves
from fairvision.audits.settings import AuditSettings, SettingsView
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.validate import finite_values, missing_rows, require_columns, require_variation
from fairvision.stats.resample import group_mean_ci

IMPORTANCES = ("impurity", "permutation")
#: settings of :func:`audit_error_model` when given none: FHIBE's 5,000 bootstrap replicates
DEFAULTS = AuditSettings(n_boot=5000)


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


@dataclass(frozen=True)
class ErrorModelOptions:
    """How :func:`audit_error_model` models the score (docs/METHODS.md §7.1).

    Parameters
    ----------
    importance : {"impurity", "permutation"}
        Which random-forest importance ranks the features for the elbow rule.
        FHIBE used impurity (variance reduction).
    n_top : int, optional
        Keep exactly this many features instead of the elbow rule.
    max_top : int
        Upper bound of the elbow selection (FHIBE: about six).
    n_estimators : int
        Trees in the random forest.
    max_depth : int
        Depth of the explanatory decision tree.
    min_leaf : int, optional
        Smallest leaf of the explanatory tree (default ``max(10, 2% of samples)``).
    permutation_repeats : int
        Shuffles per feature for the permutation importance.
    test_size : float
        Share of subjects held out for the permutation importance and R^2.
    min_r2 : float
        Held-out R^2 below which the result says the features explain nothing
        (``ErrorModelResult.explained`` is false).
    prune : bool
        Prune the explanatory tree by cost complexity, the strength chosen by
        subject-grouped 5-fold cross-validation with the one-standard-error
        rule, so that splits fitting noise do not become rules. ``False``
        keeps the full ``max_depth`` tree (FHIBE's plain tree).
    """

    importance: str = "impurity"
    n_top: int | None = None
    max_top: int = 6
    n_estimators: int = 200
    max_depth: int = 3
    min_leaf: int | None = None
    permutation_repeats: int = 5
    test_size: float = 0.25
    min_r2: float = 0.02
    prune: bool = True

    def __post_init__(self) -> None:
        if self.importance not in IMPORTANCES:
            raise ParameterError("importance", f"must be impurity or permutation, not {self.importance!r}")


@dataclass
class ErrorModelResult(SettingsView):
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
    settings : AuditSettings
        The options of the audit (``n_boot``, ``level``, ``seed``).
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
    settings: AuditSettings
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
    missing: str = "error",
    options: ErrorModelOptions | None = None,
    settings: AuditSettings | None = None,
) -> ErrorModelResult:
    """Model a per-sample score from annotations (FHIBE direct error modelling; docs/METHODS.md §7.1).

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
    missing : {"error", "drop", "keep"}
        Empty feature cells: stop naming the row (default), leave those rows
        out, or keep them (an empty cell is its own level, ``(missing)``).
    options : ErrorModelOptions, optional
        The forest, the feature selection and the explanatory tree (default ``ErrorModelOptions()``).
    settings : AuditSettings, optional
        ``n_boot`` bootstrap replicates for the rule standard errors (at least 2; FHIBE: 5,000, the
        default :data:`DEFAULTS`), ``level`` of the rules' percentile intervals, and ``seed``, which seeds
        the split, the forest, the tree and the bootstrap: same seed, same numbers.

    Returns
    -------
    ErrorModelResult
    """
    options = options or ErrorModelOptions()
    settings = settings or DEFAULTS
    settings.require_bootstrap("the rules' standard errors need replicates", least=2)
    if settings.seed is not None:
        settings.integer_seed("the forest, the split and the bootstrap derive their seeds from it")
    src = str(data.attrs.get("source", "table"))
    features = [f for f in features if f != target]
    df, y, clusters, n_dropped, by_subject = _scored_rows(data, target, features, subject_col, missing, src)
    enc = encode_features(df, features, source=src)
    blocks = enc.blocks()
    split_seed, forest_seed, perm_rng, boot_seed = _seeds(settings.seed)
    imp, selected, r2_forest, tr, te = _rank_features(enc, blocks, y, clusters, options, split_seed, forest_seed,
                                                      perm_rng)
    lab = label or pretty_name(target)
    rules, tree, r2_tree, leaf_min, alpha = _explain(enc, blocks, selected, y, clusters, options, forest_seed,
                                                     boot_seed, settings, lab, higher_is_better)
    return ErrorModelResult(
        target=target, label=lab, higher_is_better=higher_is_better, importances=imp, selected=selected,
        rules=rules, importance=options.importance, r2_forest=r2_forest, r2_tree=r2_tree, n_samples=int(y.size),
        n_subjects=int(clusters.max()) + 1, n_dropped=n_dropped, settings=settings, by_subject=by_subject,
        overall_mean=float(y.mean()), min_r2=options.min_r2,
        meta={"n_estimators": options.n_estimators, "max_depth": options.max_depth, "min_leaf": leaf_min,
              "test_size": options.test_size, "prune": options.prune, "ccp_alpha": alpha,
              "n_leaves": int(tree.get_n_leaves()), "n_train": int(tr.size), "n_test": int(te.size)},
    )


def _scored_rows(data: pd.DataFrame, target: str, features: Sequence[str], subject_col: str | None, missing: str,
                 src: str) -> tuple[pd.DataFrame, np.ndarray, np.ndarray, int, bool]:
    """The rows with a score: ``(rows, scores, subject codes, rows left out, by subject)``."""
    require_columns(data, [target], source=src, what="score column")
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
    return df, y, clusters, n_dropped, by_subject


def _seeds(seed) -> tuple[int, int, np.random.Generator, int]:
    """Seeds of the held-out split and the forest, the permutation generator and the bootstrap seed, drawn from
    ``seed`` in that order."""
    rs = np.random.RandomState(seed if seed is not None else None)
    split_seed = int(rs.randint(0, 2**31 - 1))
    forest_seed = int(rs.randint(0, 2**31 - 1))
    perm_rng = np.random.default_rng(int(rs.randint(0, 2**31 - 1)))
    boot_seed = int(rs.randint(0, 2**31 - 1))
    return split_seed, forest_seed, perm_rng, boot_seed


def _rank_features(enc: EncodedFeatures, blocks: dict, y: np.ndarray, clusters: np.ndarray,
                   options: ErrorModelOptions, split_seed: int, forest_seed: int, perm_rng: np.random.Generator):
    """Random forest on training subjects, permutation importance on held-out subjects, and the features the
    elbow rule (or ``n_top``) keeps: ``(importances, selected, held-out R^2, train rows, test rows)``."""
    if int(clusters.max()) + 1 >= 8:
        tr, te = next(GroupShuffleSplit(n_splits=1, test_size=options.test_size, random_state=split_seed)
                      .split(enc.X, y, clusters))
    else:
        tr = te = np.arange(y.size)
    forest = RandomForestRegressor(n_estimators=options.n_estimators, min_samples_leaf=5, random_state=forest_seed,
                                   n_jobs=1)
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
        for _ in range(options.permutation_repeats):
            xp = xte.copy()
            xp[:, blocks[f]] = xte[perm_rng.permutation(te.size)][:, blocks[f]]
            drops.append(r2_forest - r2_score(y[te], forest.predict(xp)))
        perm_mean[i], perm_std[i] = float(np.mean(drops)), float(np.std(drops, ddof=1)) if len(drops) > 1 else 0.0
    imp = pd.DataFrame({"kind": [enc.kinds[f] for f in names], "impurity": impurity,
                        "permutation": perm_mean, "permutation_std": perm_std}, index=pd.Index(names, name="feature"))
    key = imp[options.importance]
    imp = imp.loc[key.sort_values(ascending=False, kind="mergesort").index]
    imp["rank"] = np.arange(1, len(imp) + 1)
    k = (min(options.n_top, len(imp)) if options.n_top is not None
         else elbow_point(imp[options.importance].clip(lower=0), max_k=options.max_top))
    selected = list(imp.index[:k])
    imp["selected"] = imp.index.isin(selected)
    return imp, selected, r2_forest, tr, te


def _explain(enc: EncodedFeatures, blocks: dict, selected: list[str], y: np.ndarray, clusters: np.ndarray,
             options: ErrorModelOptions, forest_seed: int, boot_seed: int, settings: AuditSettings, lab: str,
             higher_is_better: bool):
    """Explanatory tree on the selected features (all samples) and its leaves as rules with cluster-bootstrap
    SEs: ``(rules, tree, R^2 of the tree, smallest leaf, pruning strength)``."""
    cols = np.concatenate([blocks[f] for f in selected])
    enc_sel = EncodedFeatures(enc.X[:, cols], [enc.feature[j] for j in cols], [enc.level[j] for j in cols],
                              enc.kinds, enc.has_missing)
    max_depth = options.max_depth
    leaf_min = options.min_leaf if options.min_leaf is not None else max(10, int(math.ceil(0.02 * y.size)))
    alpha = _pruning_alpha(enc_sel.X, y, clusters, max_depth, leaf_min, forest_seed) if options.prune else 0.0
    tree = DecisionTreeRegressor(max_depth=max_depth, min_samples_leaf=leaf_min, ccp_alpha=alpha, random_state=forest_seed)
    tree.fit(enc_sel.X, y)
    r2_tree = float(r2_score(y, tree.predict(enc_sel.X)))
    descr = tree_leaves(tree, enc_sel)
    leaf_of = tree.apply(enc_sel.X)
    leaf_ids = sorted(descr)
    code = {lf: i for i, lf in enumerate(leaf_ids)}
    gcodes = np.array([code[lf] for lf in leaf_of])
    boot = group_mean_ci(y, gcodes, clusters, n_groups=len(leaf_ids), n_boot=settings.n_boot, level=settings.level,
                         seed=boot_seed)
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
    return rules, tree, r2_tree, leaf_min, alpha
