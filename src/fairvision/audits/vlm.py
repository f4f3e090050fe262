"""Zero-shot vision-language probe from precomputed embeddings (docs/METHODS.md §12.1).

A CLIP-style model labels every image with the prompt set it is closest to (cosine similarity between the
image embedding and the normalised mean of each label's prompt embeddings). The probe then asks whether the
labels it hands out depend on who is in the picture: per-group label rates (including a neutral
``unspecified`` label) and error rates with subject-level bootstrap CIs, for each attribute and (``max_k``) their
intersections from :func:`fairvision.groups.intersections`, a chi-square test of label x group, per-group-vs-rest
tests that allow for several images of one subject (Rao-Scott design effect), corrected for multiple testing over
all groups and intersections, and NPMI between predicted labels and groups. Groups with fewer than
``min_subjects`` subjects are reported but not tested.

Embeddings are the universal input: no model is loaded here. The default prompt sets
(``datasets/data/vlm/prompts.toml``) are text only; the user embeds them with the text encoder of the model
that embedded the images.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import sparse
from scipy.stats import chi2 as chi2_dist

from fairvision.audits.gates import quantity_key
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.groups import cell_counts, intersections, subject_codes
from fairvision.io.embeddings import npz_array, read_embeddings
from fairvision.io.tables import read_raw_table
from fairvision.io.toml import read_toml
from fairvision.io.validate import check_missing_rule, missing_rows
from fairvision.schema import Schema
from fairvision.stats.association import npmi
from fairvision.stats.chisquare import chi2_test
from fairvision.stats.constants import DEFAULT_CORRECTION
from fairvision.stats.corrections import adjust_pvalues
from fairvision.stats.clustered import group_vs_rest_design_effect
from fairvision.stats.resample import bootstrap_column_sums, percentile_ci

#: the neutral label of the default gender prompt set
UNSPECIFIED = "unspecified"
#: groups with fewer subjects are reported but not tested (FHIBE: 10)
MIN_SUBJECTS = 10
#: columns of :attr:`VLMResult.rates` (then ``pvalue_adjusted`` and ``flagged``)
RATE_COLUMNS = ["attribute", "k", "group", "quantity", "n_samples", "n_subjects", "too_small", "estimate", "ci_low",
                "ci_high", "level", "rest", "difference", "diff_ci_low", "diff_ci_high", "design_effect", "statistic",
                "pvalue"]
EMBED_HINT = ("no CLIP weights ship with fairvision: embed the prompts of the prompt set with the text encoder of "
              "the model that embedded the images and pass them with --text-embeddings")


def default_prompts_path() -> Path:
    """Path of the bundled prompt sets (``datasets/data/vlm/prompts.toml``)."""
    return Path(str(resources.files("fairvision.datasets") / "data" / "vlm" / "prompts.toml"))


def load_prompt_sets(path: str | Path | None = None) -> dict[str, dict[str, list[str]]]:
    """Prompt sets from a TOML file: ``{probe: {label: [prompt, ...]}}`` (docs/METHODS.md §12.1).

    Parameters
    ----------
    path : path-like, optional
        TOML file with one table per probe holding a ``labels`` table of prompt lists; default the bundled
        prompt sets.

    Returns
    -------
    dict
        Probe name -> label -> prompts, in file order.
    """
    path = Path(path) if path is not None else default_prompts_path()
    doc = read_toml(path)
    out: dict[str, dict[str, list[str]]] = {}
    for name, body in doc.items():
        labels = body.get("labels") if isinstance(body, dict) else None
        if not isinstance(labels, dict) or len(labels) < 2:
            raise InputFileError(f"{path}: [{name}] needs a [{name}.labels] table with at least two labels")
        for lab, prompts in labels.items():
            if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
                raise InputFileError(f"{path}: [{name}.labels] {lab}: expected a non-empty list of prompts")
        out[name] = {str(k): list(v) for k, v in labels.items()}
    return out


def read_text_embeddings(source, probe: str | None = None) -> tuple[np.ndarray, list[str], list[str]]:
    """Prompt embeddings with their labels.

    Parameters
    ----------
    source : path-like or DataFrame
        A table (Parquet, CSV, ...) with a ``label`` column, an optional ``prompt`` column, an optional
        ``probe`` column (the combined file of ``audit vlm embed``) and the embedding (one list-valued
        ``embedding`` column or one numeric column per dimension), or an ``.npz`` with arrays ``embeddings``,
        ``labels`` and optionally ``prompts`` (string arrays: save them with ``.astype(str)``).
    probe : str, optional
        With a ``probe`` column, keep only the rows of this prompt set. Without it, a table holding a single
        probe is used whole and one holding several is an error asking for the probe.

    Returns
    -------
    embeddings : numpy.ndarray, shape (n_prompts, d)
    labels, prompts : list of str
    """
    if source is None:
        raise FairvisionError(f"text embeddings are required: {EMBED_HINT} (prompts: {default_prompts_path()})")
    label = "text embeddings" if isinstance(source, pd.DataFrame) else str(source)
    if not isinstance(source, pd.DataFrame) and Path(source).suffix.lower() == ".npz":
        path = Path(source)
        if not path.is_file():
            raise InputFileError(f"{path}: no such file")
        try:
            z = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise InputFileError(f"{path}: cannot read as .npz: {str(exc).splitlines()[0]}") from None
        if "labels" not in z.files:
            raise InputFileError(f"{path}: no array named 'labels' (one label per prompt embedding)")
        labels = [str(v) for v in npz_array(z, "labels", path)]
        prompts = [str(v) for v in npz_array(z, "prompts", path)] if "prompts" in z.files else [""] * len(labels)
        x, _ = read_embeddings(path)
    else:
        df = source.copy() if isinstance(source, pd.DataFrame) else read_raw_table(Path(source))
        df.columns = [str(c) for c in df.columns]
        if "label" not in df.columns:
            raise ColumnError(f"{label}: no 'label' column; columns are {', '.join(df.columns)}")
        if "probe" in df.columns:
            have = list(dict.fromkeys(df["probe"].astype(str)))
            if probe is None and len(have) > 1:
                raise InputFileError(f"{label}: holds the prompt embeddings of several probes ({', '.join(have)}); "
                                     "choose one with --probe")
            if probe is not None:
                if probe not in have:
                    raise InputFileError(f"{label}: no prompt embeddings of probe {probe!r} (probes: {', '.join(have)})")
                df = df.loc[(df["probe"].astype(str) == probe).to_numpy()].reset_index(drop=True)
        if df["label"].isna().any():
            raise ColumnError(f"{label}: row {int(np.flatnonzero(df['label'].isna().to_numpy())[0]) + 1}: empty label")
        labels = df["label"].astype(str).tolist()
        prompts = df["prompt"].astype(str).tolist() if "prompt" in df.columns else [""] * len(df)
        rest = df.drop(columns=[c for c in ("label", "prompt", "probe") if c in df.columns])
        rest.insert(0, "_row", [str(i) for i in range(len(rest))])
        try:
            x, _ = read_embeddings(rest, id_col="_row")
        except FairvisionError as exc:
            raise InputFileError(f"{label}: {str(exc).removeprefix('embeddings: ')}") from None
    if len(labels) != len(x):
        raise InputFileError(f"{label}: {len(labels)} labels for {len(x)} embeddings")
    return x, labels, prompts


def pick_probe(text_labels: list[str], prompt_sets: dict[str, dict[str, list[str]]], probe: str | None, *,
               source: str) -> str | None:
    """The prompt set the text embeddings belong to, checking every label of it has an embedding.

    With ``probe`` None, the set sharing the most labels with the embeddings (None when none shares any:
    the labels of the embeddings are then used as they are)."""
    have = set(text_labels)
    if probe is None:
        overlap = {name: len(have & set(labels)) for name, labels in prompt_sets.items()}
        best = max(overlap, key=overlap.get) if overlap else None
        if best is None or overlap[best] == 0:
            return None
        probe = best
    if probe not in prompt_sets:
        raise FairvisionError(f"unknown probe {probe!r}; the prompt file has {', '.join(prompt_sets)}")
    missing = [lab for lab in prompt_sets[probe] if lab not in have]
    if missing:
        raise InputFileError(f"{source}: no text embedding for label {missing[0]!r} of prompt set {probe!r}"
                             + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                             + f"; {EMBED_HINT}")
    extra = sorted(have - set(prompt_sets[probe]))
    if extra:
        raise InputFileError(f"{source}: label {extra[0]!r} is not in prompt set {probe!r} "
                             f"(labels: {', '.join(prompt_sets[probe])})")
    return probe


def label_embeddings(text: np.ndarray, labels: list[str], order: list[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """One unit vector per label: the mean of its L2-normalised prompt embeddings, normalised again
    (docs/METHODS.md §12.1)."""
    text = np.asarray(text, dtype=np.float64)
    t = text / np.maximum(np.linalg.norm(text, axis=1, keepdims=True), 1e-12)
    order = order or list(dict.fromkeys(labels))
    codes = pd.Categorical(labels, categories=order).codes
    m = sparse.csr_matrix((np.ones(len(codes)), (codes, np.arange(len(codes)))), shape=(len(order), len(codes)))
    mean = np.asarray(m @ t)
    return mean / np.maximum(np.linalg.norm(mean, axis=1, keepdims=True), 1e-12), order


def zero_shot_labels(images: np.ndarray, label_vectors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Label code (argmax of cosine similarity) and the similarity matrix (docs/METHODS.md §12.1)."""
    x = np.asarray(images, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))[:, None]
    sim = (x @ np.asarray(label_vectors, dtype=np.float64).T) / np.maximum(norms, 1e-12)
    return sim.argmax(axis=1), sim


def max_prompt_labels(images: np.ndarray, text: np.ndarray, labels: list[str], order: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Label code of the single most similar prompt, and each label's best prompt similarity
    (``combine="max"``, FHIBE's rule; docs/METHODS.md §12.1)."""
    t = np.asarray(text, dtype=np.float64)
    t = t / np.maximum(np.linalg.norm(t, axis=1, keepdims=True), 1e-12)
    _, sim = zero_shot_labels(images, t)  # (n, n_prompts)
    codes = pd.Categorical(labels, categories=order).codes
    best = np.full((sim.shape[0], len(order)), -np.inf)
    for j in range(len(order)):  # one column block per label (a handful), vectorised over images
        best[:, j] = sim[:, codes == j].max(axis=1)
    return best.argmax(axis=1), best



@dataclass
class VLMResult:
    """Result of :func:`audit_vlm`.

    ``rates``: one row per (attribute or intersection, group, quantity) with ``quantity`` a label (its rate) or
    ``error``: ``k`` (attributes in the set), ``n_samples``, ``n_subjects``, ``too_small`` (fewer than
    ``min_subjects`` subjects: reported, not tested), ``estimate``, ``ci_low``, ``ci_high``, ``level``, ``rest``,
    ``difference`` (group minus rest) with ``diff_ci_low`` / ``diff_ci_high``, ``design_effect``, ``statistic``,
    ``pvalue``, ``pvalue_adjusted``, ``flagged``. Intersections are named ``"a × b"`` with groups ``"x × y"``. ``independence``: chi-square of label x group per attribute. ``npmi``: long table of NPMI.
    ``predictions``: ``sample_id``, ``predicted`` (and ``true``), one similarity column per label.
    """

    labels: list[str]
    probe: str | None
    predictions: pd.DataFrame
    rates: pd.DataFrame
    independence: pd.DataFrame
    npmi: pd.DataFrame
    counts: dict[str, pd.DataFrame]
    alpha: float
    correction: str
    meta: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.rates

    def quantities(self) -> dict[str, float]:
        """Names for ``--fail-if``: ``n_flagged``, ``n_too_small`` (groups), ``max_gap``, ``max_unspecified_gap``,
        ``max_error_gap`` (over groups large enough to judge; NaN when no group was judged, so a gate on them
        stops with an error rather than passing), ``rate.<attr>.<group>.<label>``,
        ``gap.<attr>.<group>.<label|error>``, ``error_rate.<attr>.<group>``, ``chi2_pvalue.<attr>``; an
        intersection is ``<a>+<b>`` with groups ``<x>+<y>``."""
        r = self.rates
        judged = r[~r["too_small"].astype(bool)] if len(r) else r
        q: dict[str, float] = {"n_flagged": float(count_flagged(r)),
                               "n_too_small": float(len(r.loc[r["too_small"].astype(bool), ["attribute", "group"]]
                                                        .drop_duplicates())) if len(r) else 0.0,
                               "max_gap": float(judged["difference"].abs().max()) if judged["difference"].notna().any() else np.nan}
        for name, lab in (("max_unspecified_gap", UNSPECIFIED), ("max_error_gap", "error")):
            sub = judged.loc[judged["quantity"] == lab, "difference"].abs()
            q[name] = float(sub.max()) if sub.notna().any() else np.nan
        for row in r.itertuples(index=False):
            key = f"{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.quantity}"
            if row.quantity == "error":
                q[f"error_rate.{quantity_key(row.attribute)}.{quantity_key(row.group)}"] = float(row.estimate)
            else:
                q[f"rate.{key}"] = float(row.estimate)
            q[f"gap.{key}"] = float(row.difference)
        for row in self.independence.itertuples(index=False):
            q[f"chi2_pvalue.{quantity_key(row.attribute)}"] = float(row.pvalue)
        return q


def adjust_group_tests(rates: pd.DataFrame, by: list[str], correction: str) -> pd.DataFrame:
    """Correct the group-vs-rest p-values of ``rates`` once per distinct test (docs/METHODS.md §12.1).

    Within each block of rows sharing ``attribute`` and the columns ``by`` (the quantity, and the tone for VQA),
    an attribute with exactly two non-empty groups A and B has "A vs rest" and "B vs rest" as one and the same
    test (A vs B). The second row then gets ``same_test_as`` = A, the first row's p-value, and is left out of the
    correction family; it takes the first row's adjusted p-value. Returns ``rates`` with ``same_test_as`` (None
    elsewhere) and ``pvalue_adjusted``.
    """
    rates = rates.copy()
    same = np.full(len(rates), None, dtype=object)
    pairs: list[tuple[int, int]] = []  # (repeating row, first row)
    p = rates["pvalue"].to_numpy(float).copy()
    if len(rates):
        nonempty = rates["n_samples"].to_numpy() > 0
        keys = [rates["attribute"].astype(str)] + [rates[c].astype(str) for c in by]
        block = pd.MultiIndex.from_arrays(keys).factorize()[0]
        sizes = np.bincount(block[nonempty], minlength=int(block.max()) + 1)
        first_of: dict[int, int] = {}
        groups = rates["group"].astype(str).to_numpy()
        for i in np.flatnonzero(nonempty & (sizes[block] == 2)):  # two rows per such block
            j = first_of.setdefault(int(block[i]), int(i))
            if j != i and np.isfinite(p[j]) and np.isfinite(p[i]):
                same[i] = groups[j]
                p[i] = p[j]
                pairs.append((int(i), j))
    rates["pvalue"] = p
    rates["same_test_as"] = same
    padj = np.full(len(rates), np.nan)
    family = np.isfinite(p) & pd.isna(same)
    if family.any():
        padj[family] = adjust_pvalues(p[family], correction)
    for i, j in pairs:
        padj[i] = padj[j]
    rates["pvalue_adjusted"] = padj
    return rates


def count_flagged(rates: pd.DataFrame) -> int:
    """Flagged differences, each counted once: a row that repeats another's test (``same_test_as``) is not."""
    if not len(rates):
        return 0
    flagged = rates["flagged"].astype(bool)
    if "same_test_as" in rates.columns:
        flagged &= rates["same_test_as"].isna()
    return int(flagged.sum())


def apply_missing(data: pd.DataFrame, attrs: list[str], missing: str, schema, *, source: str):
    """The sample table and schema under the ``--missing error|drop|keep`` rule for empty attribute cells
    (:func:`fairvision.io.validate.missing_rows`): ``error`` stops at the first empty cell, ``drop`` leaves the
    rows out, ``keep`` makes them a group ``(missing)``. With a schema and ``error`` the schema's own rule applies."""
    check_missing_rule(missing)
    if schema is not None and missing == "error":
        return data, schema
    keep = missing_rows(data, [a for a in attrs if isinstance(a, str)], missing, source=source)
    if missing == "drop" and not keep.all():
        kept = data.loc[keep].reset_index(drop=True)
        kept.attrs = dict(data.attrs)
        data = kept
    if missing != "error":
        schema = copy.deepcopy(schema) if schema is not None else Schema()
        schema.declare([a for a in attrs if isinstance(a, str)], missing=missing)
    return data, schema


def prepare_samples(data: pd.DataFrame, attrs: list[str], *, id_col: str, missing: str, schema,
                    max_k: int = 1, min_subjects: int = 1) -> tuple[pd.DataFrame, object, str, int]:
    """The checks every probe makes of its sample table (docs/METHODS.md §12.1): ``max_k`` and ``min_subjects``
    at least 1, one row per id, the ``missing`` rule for empty attribute cells. Returns the table (index reset, its
    ``source`` kept), the schema, the source name and the number of rows before any were dropped."""
    if int(max_k) < 1:
        raise FairvisionError(f"max_k must be at least 1, not {max_k}")
    if int(min_subjects) < 1:
        raise FairvisionError(f"min_subjects must be at least 1, not {min_subjects}")
    source = data.attrs.get("source", "samples")
    data = data.reset_index(drop=True)
    data.attrs = {**data.attrs, "source": source}
    check_unique_ids(data, id_col, source)
    n_rows = len(data)
    data, schema = apply_missing(data, attrs, missing, schema, source=source)
    return data, schema, source, n_rows


def check_unique_ids(data: pd.DataFrame, id_col: str, source: str) -> None:
    """One row per sample: a repeated id is a one-line error naming the table and the id."""
    if id_col not in data.columns:
        raise ColumnError(f"{source}: no id column {id_col!r}; columns are {', '.join(map(str, data.columns))}")
    ids = data[id_col].astype(str)
    dup = ids.duplicated().to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise ColumnError(f"{source}: row {i + 1}: {id_col} {ids.iloc[i]!r} appears twice")


def _align(data: pd.DataFrame, ids: list[str], id_col: str, source: str) -> np.ndarray:
    if id_col not in data.columns:
        raise ColumnError(f"samples: no id column {id_col!r}; columns are {', '.join(map(str, data.columns))}")
    pos = pd.Index(ids).get_indexer(data[id_col].astype(str))
    if (pos < 0).any():
        bad = data[id_col].astype(str).to_numpy()[pos < 0]
        raise InputFileError(f"{source}: no embedding for {id_col} {bad[0]!r}"
                             + (f" (and {len(bad) - 1} more)" if len(bad) > 1 else "") + " of the sample table")
    return pos



@dataclass(frozen=True)
class GroupVsRest:
    """Each group against the rest of the audit, per quantity, from one per-subject matrix (docs/METHODS.md §12.1).

    Arrays of shape ``(G, Q)`` unless stated: ``sums`` and ``counts`` of each group's cells, ``all_sums`` and
    ``all_counts`` (``(Q,)``) over every row, the group's rate ``estimate`` and the ``rest``'s, the subject-bootstrap
    percentile interval of the rate (``ci_low``, ``ci_high``) and of the rate minus the rest's (``diff_ci_low``,
    ``diff_ci_high``), the subject-level Rao-Scott ``statistic`` and ``design_effect``, and the bootstrap
    replicates of the totals ``all_rep_sums`` and ``all_rep_counts`` (``(n_boot, Q)``).
    """

    sums: np.ndarray
    counts: np.ndarray
    all_sums: np.ndarray
    all_counts: np.ndarray
    estimate: np.ndarray
    rest: np.ndarray
    ci_low: np.ndarray
    ci_high: np.ndarray
    diff_ci_low: np.ndarray
    diff_ci_high: np.ndarray
    statistic: np.ndarray
    design_effect: np.ndarray
    all_rep_sums: np.ndarray
    all_rep_counts: np.ndarray


def group_vs_rest(mat, n_groups: int, n_quantities: int, *, n_boot: int, seed=0, level: float = 0.95) -> GroupVsRest:
    """Rates of each group and of the rest, subject-bootstrap CIs and the Rao-Scott test (docs/METHODS.md §12.1).

    Parameters
    ----------
    mat : scipy.sparse matrix, shape (n_subjects, 2 G Q + 2 Q)
        Per-subject sums: the 0/1 values of each (group, quantity) cell (G x Q columns, group-major), their
        counts (G x Q), then the values and counts of all rows (Q and Q), as
        :func:`fairvision.stats.clustered.group_vs_rest_design_effect` takes them.
    n_groups, n_quantities : int
        G and Q.
    n_boot : int
        Subject-bootstrap replicates (:func:`fairvision.stats.resample.bootstrap_column_sums`).
    seed : int, Generator or None
    level : float
        Two-sided level of the percentile intervals.

    Returns
    -------
    GroupVsRest
        NaN rates and intervals where a group, the rest or every replicate is empty.
    """
    g, q = int(n_groups), int(n_quantities)
    gq = g * q
    full = np.asarray(mat.sum(axis=0)).ravel()
    reps = bootstrap_column_sums(mat, n_boot, seed)
    est_s, est_n = full[:gq].reshape(g, q), full[gq:2 * gq].reshape(g, q)
    all_s, all_n = full[2 * gq:2 * gq + q], full[2 * gq + q:]
    rep_s, rep_n = reps[:, :gq].reshape(n_boot, g, q), reps[:, gq:2 * gq].reshape(n_boot, g, q)
    rep_as, rep_an = reps[:, 2 * gq:2 * gq + q], reps[:, 2 * gq + q:]
    with np.errstate(invalid="ignore", divide="ignore"):
        est = est_s / est_n
        rest = (all_s - est_s) / (all_n - est_n)
        rep = rep_s / rep_n
        rep_diff = rep - (rep_as[:, None, :] - rep_s) / (rep_an[:, None, :] - rep_n)
    lo, hi = percentile_ci(rep, level)
    dlo, dhi = percentile_ci(rep_diff, level)
    stat_rs, deff = group_vs_rest_design_effect(mat, g, q)
    return GroupVsRest(sums=est_s, counts=est_n, all_sums=all_s, all_counts=all_n, estimate=est, rest=rest,
                       ci_low=lo, ci_high=hi, diff_ci_low=dlo, diff_ci_high=dhi, statistic=stat_rs,
                       design_effect=deff, all_rep_sums=rep_as, all_rep_counts=rep_an)


def group_vs_rest_pvalue(a: float, b: float, c: float, d: float, statistic: float, *, seed=0,
                         too_small: bool = False) -> tuple[float, float]:
    """p-value of one group against the rest (docs/METHODS.md §12.1).

    Parameters
    ----------
    a, b : float
        Sum of the 0/1 values and number of values of the group.
    c, d : float
        The same for the rest.
    statistic : float
        The subject-level Rao-Scott statistic (:attr:`GroupVsRest.statistic`).
    seed : int
        Seed of the exact fallback of :func:`fairvision.stats.chisquare.chi2_test`.
    too_small : bool
        The group has too few subjects to be tested.

    Returns
    -------
    statistic, pvalue : float
        The Rao-Scott statistic and the larger of the image-level 2 x 2 chi-square p-value (exact fallback for
        small counts) and the Rao-Scott one (valid when either assumption holds); the image-level p-value alone
        where the Rao-Scott statistic is not finite. Both NaN (untested) for a group that is too small, an empty
        group or rest, or a quantity that never varies (every value 0 or every value 1: nothing can differ, and
        a p-value of 1 would only weaken the correction of the others).
    """
    if not (b > 0 and d > 0 and not too_small and 0 < a + c < b + d):
        return np.nan, np.nan
    res = chi2_test(np.array([[a, b - a], [c, d - c]]), seed=seed, warn=False)
    pvalue = max(float(res.pvalue), float(chi2_dist.sf(statistic, 1))) if np.isfinite(statistic) else float(res.pvalue)
    return statistic, pvalue


def audit_vlm(
    data: pd.DataFrame,
    image_embeddings,
    text_embeddings,
    attrs: list[str],
    *,
    id_col: str = "sample_id",
    subject_col: str | None = "subject_id",
    true_col: str | None = None,
    prompt_sets: dict[str, dict[str, list[str]]] | None = None,
    probe: str | None = None,
    combine: str = "mean",
    schema=None,
    missing: str = "error",
    max_k: int = 1,
    min_subjects: int = MIN_SUBJECTS,
    n_boot: int = 1000,
    level: float = 0.95,
    alpha: float = 0.05,
    correction: str = DEFAULT_CORRECTION,
    seed: int | np.random.Generator | None = 0,
) -> VLMResult:
    """Zero-shot probe of a vision-language model from precomputed embeddings (docs/METHODS.md §12.1).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: ``id_col``, optional ``subject_col``, the attribute columns, optional ``true_col``.
    image_embeddings : path-like, array or DataFrame
        Read with :func:`fairvision.io.embeddings.read_embeddings`; ids must cover ``data[id_col]``.
    text_embeddings : path-like or DataFrame
        Prompt embeddings with labels (:func:`read_text_embeddings`), from the same model.
    attrs : list of str
        Group attributes.
    true_col : str, optional
        Column of the true label; adds per-group error rates.
    prompt_sets, probe
        Prompt sets (default the bundled ones) and the one the text embeddings belong to (default: the set
        sharing most labels; every label of it must have an embedding).
    combine : {"mean", "max"}
        ``"mean"``: the label whose normalised mean prompt embedding is most similar (default); ``"max"``: the
        label of the single most similar prompt (FHIBE's rule).
    schema, missing
        Attribute schema (optional) and the rule for empty attribute cells: ``"error"`` (default), ``"drop"``
        (the rows are left out) or ``"keep"`` (a group ``(missing)``).
    max_k : int
        Largest intersection size: 1 (default) each attribute on its own, 2 also every pair of attributes, ...
        Intersections come from :func:`fairvision.groups.intersections` and are tested and corrected together with
        the single attributes.
    min_subjects : int
        Groups (and intersections) with fewer subjects are reported with their rates and CIs but not tested or
        flagged: too small to judge (default 10, FHIBE's threshold).
    n_boot, level, alpha, correction, seed
        Subject bootstrap replicates, CI level, significance level, multiple-testing correction, randomness.

    Returns
    -------
    VLMResult
    """
    img_src = "image embeddings" if not isinstance(image_embeddings, (str, Path)) else str(image_embeddings)
    txt_src = "text embeddings" if not isinstance(text_embeddings, (str, Path)) else str(text_embeddings)
    x, ids = read_embeddings(image_embeddings)
    t, tlabels, _ = read_text_embeddings(text_embeddings, probe)
    if t.shape[1] != x.shape[1]:
        raise InputFileError(f"{txt_src}: text embeddings have {t.shape[1]} dimensions, the image embeddings "
                             f"({img_src}) {x.shape[1]}: they must come from the same model")
    sets = load_prompt_sets() if prompt_sets is None else prompt_sets
    probe = pick_probe(tlabels, sets, probe, source=txt_src)
    order = list(sets[probe]) if probe else list(dict.fromkeys(tlabels))
    data, schema, source, n_rows = prepare_samples(data, attrs, id_col=id_col, missing=missing, schema=schema,
                                                   max_k=max_k, min_subjects=min_subjects)
    pos = _align(data, ids, id_col, img_src)
    if combine == "mean":
        vec, labels = label_embeddings(t, tlabels, order)
        pred, sim = zero_shot_labels(x[pos], vec)
    elif combine == "max":
        labels = order
        pred, sim = max_prompt_labels(x[pos], t, tlabels, order)
    else:
        raise FairvisionError(f"combine must be 'mean' or 'max', not {combine!r}")
    k, n = len(labels), len(data)
    if subject_col is not None and subject_col not in data.columns:
        subject_col = None if subject_col == "subject_id" else subject_col
    clusters = subject_codes(data, subject_col, source=source, rows_as_subjects=True)
    n_clusters = int(clusters.max()) + 1

    preds = pd.DataFrame({id_col: data[id_col].astype(str).to_numpy(), "predicted": np.asarray(labels)[pred]})
    quantities = list(labels)
    values = [(pred == j).astype(float) for j in range(k)]
    if true_col is not None:
        if true_col not in data.columns:
            raise ColumnError(f"{source}: no true-label column {true_col!r}; columns are {', '.join(map(str, data.columns))}")
        truth = data[true_col]
        known = truth.notna().to_numpy()
        tv = truth.astype(str).to_numpy()
        unknown = sorted(set(tv[known]) - set(labels))
        if unknown:
            raise ColumnError(f"{source}: column {true_col!r}: value {unknown[0]!r} is not a label of the probe "
                              f"({', '.join(labels)})")
        preds["true"] = truth.to_numpy()
        values.append(np.where(known, (tv != preds["predicted"].to_numpy()).astype(float), np.nan))
        quantities.append("error")
    for j, lab in enumerate(labels):
        preds[f"similarity_{lab}"] = sim[:, j]
    vals = np.stack(values, axis=1)  # (n, q)
    q = vals.shape[1]
    ok = ~np.isnan(vals)
    v0 = np.nan_to_num(vals)

    all_rows = np.repeat(np.arange(q)[None, :], n, axis=0).ravel()
    cl_rep = np.repeat(clusters[:, None], q, axis=1).ravel()
    okf = ok.astype(float)

    rows, independence, npmi_rows, counts = [], [], [], {}
    for inter in intersections(data, attrs, max_k, schema, source=source):
        g, name = inter.n_cells, inter.name
        r, c = inter.rows, inter.codes
        groups = [str(v) for v in inter.display_labels()]
        # one (n_clusters x cols) matrix of per-subject sums: group x quantity sums and counts, then totals
        cell = (c[:, None] * q + np.arange(q)[None, :]).ravel()
        cl = np.repeat(clusters[r], q)
        gq = g * q
        mat = sparse.csr_matrix(
            (np.concatenate([v0[r].ravel(), okf[r].ravel(), v0.ravel(), okf.ravel()]),
             (np.concatenate([cl, cl, cl_rep, cl_rep]),
              np.concatenate([cell, gq + cell, 2 * gq + all_rows, 2 * gq + q + all_rows]))),
            shape=(n_clusters, 2 * gq + 2 * q))
        gvr = group_vs_rest(mat, g, q, n_boot=n_boot, seed=seed, level=level)
        ns, subj = cell_counts(inter, clusters)
        small = subj < min_subjects
        ct = np.bincount(c * k + pred[r], minlength=g * k).reshape(g, k)
        table = pd.DataFrame(ct, index=pd.Index(groups, name=name), columns=pd.Index(labels, name="predicted"))
        counts[name] = table
        chi = chi2_test(table, seed=seed, label=f"{name} x predicted label", warn=False)
        independence.append({"attribute": name, "k": inter.k, "statistic": chi.statistic, "df": chi.df,
                             "pvalue": chi.pvalue, "cramers_v": getattr(chi, "cramers_v", np.nan), "n": int(ct.sum())})
        if ct.sum() > 0:
            nm = npmi(table.astype(float), name, "predicted").to_numpy()
            for gi, grp in enumerate(groups):
                for j, lab in enumerate(labels):
                    npmi_rows.append({"attribute": name, "group": grp, "label": lab, "npmi": float(nm[gi, j])})
        for gi, grp in enumerate(groups):
            for qi, quant in enumerate(quantities):
                a, b = gvr.sums[gi, qi], gvr.counts[gi, qi]
                # images as independent and the subject-level Rao-Scott test (docs/METHODS.md §12.1)
                stat, p = group_vs_rest_pvalue(a, b, gvr.all_sums[qi] - a, gvr.all_counts[qi] - b,
                                               gvr.statistic[gi, qi], seed=seed, too_small=bool(small[gi]))
                rows.append({"attribute": name, "k": inter.k, "group": grp, "quantity": quant,
                             "n_samples": int(ns[gi]), "n_subjects": int(subj[gi]), "too_small": bool(small[gi]),
                             "estimate": gvr.estimate[gi, qi], "ci_low": gvr.ci_low[gi, qi],
                             "ci_high": gvr.ci_high[gi, qi], "level": level, "rest": gvr.rest[gi, qi],
                             "difference": gvr.estimate[gi, qi] - gvr.rest[gi, qi],
                             "diff_ci_low": gvr.diff_ci_low[gi, qi], "diff_ci_high": gvr.diff_ci_high[gi, qi],
                             "design_effect": gvr.design_effect[gi, qi],
                             "statistic": stat, "pvalue": p})
    # two groups: "A vs rest" and "B vs rest" are one test, counted once in the correction (docs/METHODS.md §12.1)
    rates = adjust_group_tests(pd.DataFrame(rows, columns=RATE_COLUMNS), ["quantity"], correction)
    excludes = (rates["diff_ci_low"] > 0) | (rates["diff_ci_high"] < 0)
    rates["flagged"] = (rates["pvalue_adjusted"] < alpha) & excludes & ~rates["too_small"].astype(bool)
    ind = pd.DataFrame(independence)
    if len(ind):
        ind["pvalue_adjusted"] = adjust_pvalues(ind["pvalue"].to_numpy(), correction)
    return VLMResult(labels=labels, probe=probe, predictions=preds, rates=rates, independence=ind,
                     npmi=pd.DataFrame(npmi_rows, columns=["attribute", "group", "label", "npmi"]), counts=counts,
                     alpha=alpha, correction=correction,
                     meta={"n_samples": n, "n_dropped": n_rows - n, "missing": missing,
                           "n_subjects": n_clusters, "n_prompts": len(tlabels), "n_boot": n_boot,
                           "combine": combine, "max_k": max_k, "min_subjects": min_subjects})
