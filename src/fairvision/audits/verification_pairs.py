"""Face verification by group from a sample table and embeddings: the pairs built here (docs/METHODS.md §6.1).

:func:`audit_verification_samples`: a sample table (person, pronoun or gender, skin tone level, attributes) and one
embedding per image -> every genuine pair plus FHIBE's hard impostors (same pronoun, skin tone within one level),
capped and seeded, scored by cosine similarity -> :func:`fairvision.audits.verification.audit_verification_pairs`
(by default at one global threshold). Images without an embedding are left out and reported with the shared
coverage audit.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from fairvision.audits.coverage import audit_coverage
from fairvision.audits.settings import AuditSettings, DEFAULT_SETTINGS
from fairvision.audits.verification import VerificationAuditResult, audit_verification_pairs
from fairvision.errors import ColumnError, FairvisionError, ParameterError
from fairvision.io.tables import SAMPLE_ID
from fairvision.io.validate import check_unique_ids, require_columns
from fairvision.metrics.verification import cosine_scores, positive_pairs, sample_hard_negative_pairs


@dataclass(frozen=True)
class PairRule:
    """How the pairs are built from the sample table (docs/METHODS.md §6.1).

    Attributes
    ----------
    pronoun_col : str
        Impostor pairs share this column's value (FHIBE: pronoun; gender works the same).
    tone_col : str
        Skin tone level (1-6, ``"IV"``, ``"Type IV"``, ``"MST7"``); impostors differ by at most ``max_tone_diff``.
    max_tone_diff : int
        FHIBE: 1.
    max_impostors : int or None
        Most impostor pairs, a seeded uniform sample of all hard impostors (None: all of them).
    max_genuine : int or None
        Most genuine pairs, a seeded uniform sample (None: all of them, as FHIBE).
    """

    pronoun_col: str = "pronoun"
    tone_col: str = "skin_tone"
    max_tone_diff: int = 1
    max_impostors: int | None = 1_000_000
    max_genuine: int | None = None

    def check(self) -> None:
        if self.max_tone_diff < 0:
            raise ParameterError("max_tone_diff", f"must be 0 or more, not {self.max_tone_diff}")
        for name in ("max_impostors", "max_genuine"):
            v = getattr(self, name)
            if v is not None and v < 1:
                raise ParameterError(name, f"must be 1 or more, not {v}")


def build_pairs(data: pd.DataFrame, subject_col: str, rule: PairRule, *, seed=0,
                source: str = "samples") -> pd.DataFrame:
    """Every genuine pair and the FHIBE hard impostor pairs of a sample table (docs/METHODS.md §6.1).

    Parameters
    ----------
    data : pandas.DataFrame
        ``sample_id``, ``subject_col``, ``rule.pronoun_col``, ``rule.tone_col``.
    subject_col : str
        Person of every sample.
    rule : PairRule
    seed : int, numpy.random.Generator or None
        Randomness of the capped samples.
    source : str
        Name of the table in error messages.

    Returns
    -------
    pandas.DataFrame
        ``sample_a``, ``sample_b`` (str), ``same_subject`` (bool); genuine pairs first.
    """
    rule.check()
    require_columns(data, [SAMPLE_ID, subject_col, rule.pronoun_col, rule.tone_col], source=source,
                    why=" (needed to build verification pairs)")
    for col in (subject_col, rule.pronoun_col, rule.tone_col):
        miss = data[col].isna().to_numpy()
        if miss.any():
            i = int(np.flatnonzero(miss)[0])
            raise ColumnError(f"{source}: row {i + 1}: empty {col!r} (needed to build verification pairs)")
    ids = data[SAMPLE_ID].astype(str).to_numpy()
    person = data[subject_col].astype(str).to_numpy()
    rng = np.random.default_rng(seed)
    gi, gj = positive_pairs(person)
    if rule.max_genuine is not None and gi.size > rule.max_genuine:
        keep = np.sort(rng.choice(gi.size, rule.max_genuine, replace=False))
        gi, gj = gi[keep], gj[keep]
    try:
        ni, nj = sample_hard_negative_pairs(person, data[rule.pronoun_col].astype(str).to_numpy(),
                                            data[rule.tone_col].to_numpy(), max_pairs=rule.max_impostors,
                                            max_tone_diff=rule.max_tone_diff, seed=rng)
    except FairvisionError as e:
        raise ColumnError(f"{source}: column {rule.tone_col!r}: {e}") from None
    i, j = np.r_[gi, ni], np.r_[gj, nj]
    return pd.DataFrame({"sample_a": ids[i], "sample_b": ids[j],
                         "same_subject": np.r_[np.ones(gi.size, bool), np.zeros(ni.size, bool)]})


def audit_verification_samples(
    data: pd.DataFrame,
    attributes: Sequence,
    embeddings,
    embedding_ids: Sequence[str],
    *,
    rule: PairRule = PairRule(),
    far: Sequence[float] = (0.001,),
    threshold: str = "global",
    subject_col: str = "subject_id",
    max_k: int = 1,
    schema=None,
    settings: AuditSettings | None = None,
    source: str = "samples",
    left_out=None,
) -> VerificationAuditResult:
    """Face verification by group with the pairs built from the sample table (docs/METHODS.md §6.1).

    Builds every genuine pair and FHIBE's hard impostors (:func:`build_pairs`) over the images that have an
    embedding, scores them by cosine similarity and reports TAR at FAR and accuracy per group and intersection
    (:func:`fairvision.audits.verification.audit_verification_pairs`); a pair counts for a group when both of its
    images are in it. Images without an embedding are left out, reported by group with
    :func:`fairvision.audits.coverage.audit_coverage` (``result.coverage``).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: ``sample_id``, ``subject_col``, the pronoun and tone columns of ``rule``, attribute columns.
    attributes : sequence of str or Attribute
        Attributes that define the groups.
    embeddings : array_like (n, d)
        One embedding per id of ``embedding_ids``.
    embedding_ids : sequence of str
        Sample id of every embedding row.
    rule : PairRule
        Pronoun and tone columns, tone gap, caps.
    far : sequence of float
        Target false accept rates.
    threshold : {"global", "group"}
        One threshold from all pairs (default) or each group's own (FHIBE Table 3).
    subject_col : str
        Person of every sample (genuine pairs; CIs resample people).
    max_k : int
        Largest intersection size.
    schema : Schema, optional
    settings : AuditSettings, optional
        ``seed`` also draws the capped pairs.
    source : str
        Name of the sample table in error messages.
    left_out : array_like of str, optional
        Per row of ``data``, why it is left out before the pairs are built ("" or None: kept), e.g. "no face"
        from the descriptor or "skin not measured"; rows without an embedding are left out as "no embedding".

    Returns
    -------
    VerificationAuditResult
        With ``coverage`` (None when no image was left out) and ``pair_rule``.
    """
    settings = settings or DEFAULT_SETTINGS
    check_unique_ids(data, SAMPLE_ID, source)
    emb = np.asarray(embeddings, dtype=float)
    eids = pd.Index([str(i) for i in embedding_ids])
    if emb.ndim != 2 or emb.shape[0] != len(eids):
        raise FairvisionError(f"embeddings: {emb.shape[0] if emb.ndim else 0} rows but {len(eids)} ids")
    sid = data[SAMPLE_ID].astype(str)
    why = np.where(sid.isin(eids).to_numpy(), "", "no embedding").astype(object)
    if left_out is not None:
        given = pd.Series(left_out, dtype=object).fillna("").astype(str).to_numpy()
        if given.size != len(data):
            raise FairvisionError(f"left_out has {given.size} reasons for {len(data)} samples")
        why = np.where(given != "", given, why)
    ok = why == ""
    coverage = None
    if not ok.all():
        names = [str(getattr(a, "name", a)) for a in attributes]
        coverage = audit_coverage(data, ok, names, schema=schema, step="face embedding", settings=settings,
                                  reasons=why.astype(str), unit="images")
    kept = data[ok].reset_index(drop=True)
    if len(kept) < 2:
        raise FairvisionError(f"{source}: only {len(kept)} of {len(data)} samples have an embedding; "
                              "verification needs pairs")
    pairs = build_pairs(kept, subject_col, rule, seed=settings.seed, source=source)
    rows = eids.get_indexer(kept[SAMPLE_ID].astype(str))
    pos = pd.Series(np.arange(len(kept)), index=kept[SAMPLE_ID].astype(str).to_numpy())
    ia, ib = pos[pairs["sample_a"]].to_numpy(), pos[pairs["sample_b"]].to_numpy()
    pairs["score"] = cosine_scores(emb, rows[ia], rows[ib]).astype(float)
    result = audit_verification_pairs(kept, pairs, attributes, far=far, threshold=threshold, subject_col=subject_col,
                                      max_k=max_k, schema=schema, settings=settings, source=source,
                                      pairs_source=f"pairs built from {source}")
    result.coverage = coverage
    result.pair_rule = {**asdict(rule), "seed": settings.seed, "n_samples": len(data), "n_used": len(kept),
                        "n_genuine": int(pairs["same_subject"].sum()),
                        "n_impostor": int((~pairs["same_subject"]).sum())}
    return result
