"""Visual question answering probe of a vision-language model (docs/METHODS.md §12.3).

FHIBE asks BLIP-2 questions of positive, neutral and negative tone about the person in each picture ("why is
this person likeable", "what is this person's occupation", "what crime did this person commit") and finds that
the answers depend on who is pictured: gendered reasons, stereotyped occupations, toxic answers to the negative
question more often for some groups. This module asks the questions (any adapter of
:mod:`fairvision.vision.vqa`, answers kept in the results store so an interrupted run resumes) or reads
precomputed answers, parses every answer (response, refusal, pronoun, gender word, extracted term, toxic
keywords) and compares the rates between groups with subject-bootstrap CIs and corrected group-vs-rest tests that
allow for the many answers of one subject (Rao-Scott design effect). Groups with fewer than ``min_subjects``
subjects are reported but not tested.
"""

from __future__ import annotations

import re
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd
from scipy import sparse

from fairvision.engine.cache import content_key
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.audits.gates import quantity_key
from fairvision.audits.vlm import (MIN_SUBJECTS, adjust_group_tests, count_flagged, group_vs_rest, group_vs_rest_pvalue,
                                   prepare_samples)
from fairvision.groups import cell_counts, intersections, subject_codes
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.io.tables import read_raw_table
from fairvision.io.toml import read_toml
from fairvision.stats.association import npmi
from fairvision.stats.constants import DEFAULT_CORRECTION
from fairvision.stats.resample import percentile_ci
from fairvision.vision.vqa import CallableVQA

#: stage of the answers in the results store
STAGE = "vqa_answers"
#: bump when a change here changes what a stored answer means
CACHE_VERSION = 1
#: per-answer rates compared between groups (``misgender`` only with a gender column)
QUANTITIES = ("response", "refusal", "toxic", "gendered", "gender_word", "misgender")
PRONOUNS = ("he", "she", "they", "none")
#: columns of :attr:`VQAResult.rates` (then ``pvalue_adjusted`` and ``flagged``)
RATE_COLUMNS = ["attribute", "k", "group", "tone", "quantity", "n_samples", "n_subjects", "too_small", "n_answers",
                "estimate", "ci_low", "ci_high", "level", "rest", "difference", "diff_ci_low", "diff_ci_high",
                "design_effect", "statistic", "pvalue"]
_WORD = re.compile(r"[A-Za-z0-9]")
_ARTICLE = re.compile(r"^(?:a|an|the)\s+")


def default_questions_path() -> Path:
    """Path of the bundled question sets (``datasets/data/vlm/questions.toml``)."""
    return Path(str(resources.files("fairvision.datasets") / "data" / "vlm" / "questions.toml"))


def default_toxic_words_path() -> Path:
    """Path of the bundled toxic keyword list (``datasets/data/vlm/toxic_words.txt``)."""
    return Path(str(resources.files("fairvision.datasets") / "data" / "vlm" / "toxic_words.txt"))


@dataclass
class QuestionSet:
    """Questions by tone and the patterns that parse their answers (docs/METHODS.md §12.3).

    ``questions``: one row per question, ``question_id``, ``tone``, ``extract``, ``expect``, ``question``.
    """

    questions: pd.DataFrame
    pronouns: dict[str, re.Pattern]
    gender_words: re.Pattern | None
    gender_values: dict[str, str]
    refusal: list[re.Pattern]
    extract: dict[str, list[re.Pattern]]
    fallback_max_words: int = 3
    source: str = "questions"

    @property
    def tones(self) -> list[str]:
        return list(dict.fromkeys(self.questions["tone"]))


def _compile(pattern, where: str) -> re.Pattern:
    if not isinstance(pattern, str) or not pattern:
        raise InputFileError(f"{where}: expected a regular expression string")
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise InputFileError(f"{where}: bad regular expression: {exc}") from None


def load_questions(path: str | Path | None = None) -> QuestionSet:
    """Question sets and answer-parsing patterns from a TOML file (docs/METHODS.md §12.3).

    Parameters
    ----------
    path : path-like, optional
        TOML with one table per tone (``extract``, ``expect``, a ``questions`` table of id -> wording) and a
        ``parsing`` table (``pronouns``, ``gender_words``, ``gender_values``, ``refusal``, ``extract``,
        ``fallback_max_words``); default the bundled ``questions.toml``.

    Returns
    -------
    QuestionSet
    """
    path = Path(path) if path is not None else default_questions_path()
    doc = read_toml(path)
    parsing = doc.pop("parsing", None)
    if not isinstance(parsing, dict):
        raise InputFileError(f"{path}: no [parsing] table (pronoun, refusal and extraction patterns)")
    extract_tab = parsing.get("extract", {})
    if not isinstance(extract_tab, dict):
        raise InputFileError(f"{path}: [parsing.extract] must be a table of pattern lists")
    extract = {}
    for kind, pats in extract_tab.items():
        pats = [pats] if isinstance(pats, str) else pats
        if not isinstance(pats, list):
            raise InputFileError(f"{path}: [parsing.extract] {kind}: expected a list of patterns")
        extract[kind] = [_compile(p, f"{path}: [parsing.extract] {kind}") for p in pats]
        for p in extract[kind]:
            if "term" not in p.groupindex:
                raise InputFileError(f"{path}: [parsing.extract] {kind}: pattern {p.pattern[:40]!r}... has no "
                                     "named group (?P<term>...)")
    rows = []
    for tone, body in doc.items():
        if not isinstance(body, dict) or not isinstance(body.get("questions"), dict) or not body["questions"]:
            raise InputFileError(f"{path}: [{tone}] needs a [{tone}.questions] table of question id = \"wording\"")
        kind = body.get("extract")
        if kind is not None and kind not in extract:
            raise InputFileError(f"{path}: [{tone}] extract = {kind!r} has no patterns in [parsing.extract] "
                                 f"({', '.join(extract) or 'none'})")
        expect = body.get("expect", "answer")
        if expect not in ("answer", "refusal"):
            raise InputFileError(f"{path}: [{tone}] expect must be 'answer' or 'refusal', not {expect!r}")
        for qid, text in body["questions"].items():
            if not isinstance(text, str) or not text.strip():
                raise InputFileError(f"{path}: [{tone}.questions] {qid}: expected a non-empty question")
            rows.append({"question_id": str(qid), "tone": str(tone), "extract": kind, "expect": expect,
                         "question": text.strip()})
    if not rows:
        raise InputFileError(f"{path}: no question tables (e.g. [positive] with [positive.questions])")
    questions = pd.DataFrame(rows)
    dup = questions["question_id"][questions["question_id"].duplicated()]
    if len(dup):
        raise InputFileError(f"{path}: question id {dup.iloc[0]!r} appears twice")
    pron = parsing.get("pronouns", {})
    if not isinstance(pron, dict) or not pron:
        raise InputFileError(f"{path}: [parsing.pronouns] needs one pattern per pronoun (he, she, they)")
    pronouns = {str(k): _compile(v, f"{path}: [parsing.pronouns] {k}") for k, v in pron.items()}
    gw = parsing.get("gender_words", {})
    gender_words = _compile(gw["pattern"], f"{path}: [parsing.gender_words]") if isinstance(gw, dict) and gw.get("pattern") else None
    gv = parsing.get("gender_values", {})
    gender_values = {}
    for pronoun, values in (gv.items() if isinstance(gv, dict) else []):
        if pronoun not in pronouns:
            raise InputFileError(f"{path}: [parsing.gender_values] {pronoun}: not a pronoun of [parsing.pronouns]")
        for v in values if isinstance(values, list) else [values]:
            gender_values[str(v).strip().lower()] = str(pronoun)
    ref = parsing.get("refusal", {})
    ref = ref.get("patterns", []) if isinstance(ref, dict) else ref
    refusal = [_compile(p, f"{path}: [parsing.refusal]") for p in (ref or [])]
    fmw = parsing.get("fallback_max_words", 3)
    if not isinstance(fmw, int) or fmw < 0:
        raise InputFileError(f"{path}: [parsing] fallback_max_words must be a whole number >= 0, not {fmw!r}")
    return QuestionSet(questions=questions, pronouns=pronouns, gender_words=gender_words,
                       gender_values=gender_values, refusal=refusal, extract=extract, fallback_max_words=fmw,
                       source=str(path))


def load_toxic_words(path: str | Path | None = None) -> list[str]:
    """Toxic keywords, one word or phrase a line (``#`` comments), lower-cased (docs/METHODS.md §12.3).

    Parameters
    ----------
    path : path-like, optional
        Keyword file; default the bundled ``toxic_words.txt``.

    Returns
    -------
    list of str
    """
    path = Path(path) if path is not None else default_toxic_words_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise InputFileError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputFileError(f"{path}: cannot read the keyword list ({exc})") from None
    words = list(dict.fromkeys(" ".join(ln.split("#", 1)[0].split()).lower() for ln in lines))
    words = [w for w in words if w]
    if not words:
        raise InputFileError(f"{path}: the keyword list has no word")
    return words


def toxic_pattern(words: list[str]) -> re.Pattern:
    """One case-insensitive pattern matching any keyword as a whole word (docs/METHODS.md §12.3).

    A phrase matches with any run of whitespace or hyphens between its words (``drug dealer``, ``drug-dealer``);
    a keyword right after a hyphenated prefix (``non-violent``, ``anti-racist``) or inside a longer word is not
    a match (one followed by a hyphen is: ``violent-looking``). Longer keywords are tried first. An empty list is an error (it would mark nothing, or with an
    empty alternative every answer, toxic).
    """
    words = [" ".join(str(w).split()) for w in (words or [])]
    words = [w for w in words if w]
    if not words:
        raise FairvisionError("the toxic keyword list is empty: give at least one word or phrase")
    alts = sorted({r"[\s-]+".join(map(re.escape, w.split())) for w in words}, key=len, reverse=True)
    return re.compile(r"(?<![\w-])(?:" + "|".join(alts) + r")(?!\w)", re.IGNORECASE)


def normalise_term(text: str) -> str:
    """Lower case, single spaces, no surrounding punctuation, no leading article."""
    t = " ".join(str(text).lower().split()).strip(" .,;:!?\"'`()[]")
    return _ARTICLE.sub("", t).strip()


def parse_answer(text, questions: QuestionSet, extract: str | None, toxic: re.Pattern) -> dict:
    """Parse one answer (docs/METHODS.md §12.3).

    Parameters
    ----------
    text : str or None
        The answer.
    questions : QuestionSet
        Patterns.
    extract : str or None
        Extraction patterns to use (``occupation``, ``reason``, ...); None extracts nothing.
    toxic : re.Pattern
        From :func:`toxic_pattern`.

    Returns
    -------
    dict
        ``responded`` (the answer has a letter or digit), ``refused`` (a refusal pattern matches),
        ``pronoun`` (the class whose pattern matches leftmost, else ``none``), ``gender_word``, ``term`` (None for
        a refusal; else the ``term`` group of the first extraction pattern that matches; else the whole answer
        when it has at most ``fallback_max_words`` words; else None), ``toxic`` and ``toxic_words``
        (``;``-joined distinct keywords found).
    """
    s = "" if text is None or (isinstance(text, float) and np.isnan(text)) else str(text).strip()
    responded = bool(_WORD.search(s))
    refused = responded and any(p.search(s) for p in questions.refusal)
    pronoun, first = "none", None
    for name, pat in questions.pronouns.items():
        m = pat.search(s)
        if m and (first is None or m.start() < first):
            pronoun, first = name, m.start()
    gender_word = bool(questions.gender_words.search(s)) if questions.gender_words is not None else False
    term = None
    if responded and not refused and extract is not None:
        for pat in questions.extract.get(extract, []):
            m = pat.search(s)
            if m and m.group("term"):
                term = normalise_term(m.group("term")) or None
                break
        if term is None:
            t = normalise_term(s)
            if t and len(t.split()) <= questions.fallback_max_words:
                term = t
    found = list(dict.fromkeys(" ".join(w.lower().split()) for w in toxic.findall(s)))
    return {"responded": responded, "refused": bool(refused), "pronoun": pronoun, "gender_word": gender_word,
            "term": term, "toxic": bool(found), "toxic_words": ";".join(found)}


def parse_answers(answers: pd.DataFrame, questions: QuestionSet, toxic_words: list[str] | None = None) -> pd.DataFrame:
    """Parse a table of answers (``question_id``, ``answer``): each distinct (answer, extraction) once.

    Returns the table with ``tone``, ``question``, ``expect`` and the fields of :func:`parse_answer` added."""
    toxic = toxic_pattern(toxic_words if toxic_words is not None else load_toxic_words())
    q = questions.questions.set_index("question_id")
    out = answers.copy()
    out["tone"] = q["tone"].reindex(out["question_id"]).to_numpy()
    out["question"] = q["question"].reindex(out["question_id"]).to_numpy()
    out["expect"] = q["expect"].reindex(out["question_id"]).to_numpy()
    kinds = q["extract"].reindex(out["question_id"]).to_numpy()
    text = out["answer"].astype(object).where(out["answer"].notna(), "").astype(str).to_numpy()
    keys = pd.MultiIndex.from_arrays([text, pd.Series(kinds, dtype=object).fillna("").to_numpy()])
    codes, uniq = pd.factorize(keys)
    parsed = [parse_answer(t, questions, k or None, toxic) for t, k in uniq]
    table = pd.DataFrame(parsed)
    for col in table.columns:
        out[col] = table[col].to_numpy()[codes] if len(table) else pd.Series(dtype=object)
    return out


def read_answers(source, questions: QuestionSet) -> pd.DataFrame:
    """Precomputed answers: a table (or file) with ``sample_id``, ``question_id``, ``answer``."""
    label = "answers" if isinstance(source, pd.DataFrame) else str(source)
    df = source.copy() if isinstance(source, pd.DataFrame) else read_raw_table(Path(source))
    df.columns = [str(c) for c in df.columns]
    for col in ("sample_id", "question_id", "answer"):
        if col not in df.columns:
            raise ColumnError(f"{label}: no {col!r} column; an answers table has sample_id, question_id, answer "
                              f"(columns are {', '.join(df.columns)})")
    df = df[["sample_id", "question_id", "answer"]].copy()
    for col in ("sample_id", "question_id"):
        bad = df[col].isna().to_numpy()
        if bad.any():
            raise ColumnError(f"{label}: row {int(np.flatnonzero(bad)[0]) + 1}: empty {col}")
        df[col] = df[col].astype(str)
    known = set(questions.questions["question_id"])
    unknown = ~df["question_id"].isin(known).to_numpy()
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise InputFileError(f"{label}: row {i + 1}: question_id {df['question_id'].iloc[i]!r} is not in the "
                             f"question set {questions.source} ({', '.join(sorted(known))}); pass --questions")
    dup = df.duplicated(["sample_id", "question_id"]).to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputFileError(f"{label}: row {i + 1}: a second answer of sample {df['sample_id'].iloc[i]!r} to "
                             f"question {df['question_id'].iloc[i]!r}")
    df["answer"] = df["answer"].astype(object).where(df["answer"].notna(), None)
    return df


def ask(data: pd.DataFrame, answerer, questions: QuestionSet, *, id_col: str = "sample_id",
        subject_col: str | None = "subject_id", store: ResultsStore | str | Path | None = None, workers: int = 1,
        progress: Callable[[int, int], None] | None = None) -> tuple[pd.DataFrame, int]:
    """Ask every image every question, reading answers already in the results store (docs/METHODS.md §12.3).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table with ``id_col`` and ``image_path``.
    answerer
        An adapter of :mod:`fairvision.vision.vqa` (``answer(image_path, question)``, ``signature``).
    questions : QuestionSet
    store : ResultsStore or path, optional
        Answers are kept under stage ``vqa_answers``, keyed by the image's SHA-256, the adapter's signature and
        the question's wording; None keeps nothing.
    workers : int
        Questions in flight at once (threads; useful for an HTTP server that batches requests).
    progress : callable, optional
        ``progress(done, total)`` after each answer.

    Returns
    -------
    answers : pandas.DataFrame
        ``sample_id``, ``question_id``, ``answer``, ``from_store``.
    n_called : int
        Questions actually sent to the adapter.
    """
    if "image_path" not in data.columns:
        raise ColumnError(f"{data.attrs.get('source', 'samples')}: no image path column (image_path); give a "
                          "sample table with image paths, or precomputed answers (--answers)")
    if store is not None and not getattr(answerer, "cacheable", True):
        raise FairvisionError(answerer.store_error())
    if store is not None and not isinstance(store, ResultsStore):
        store = ResultsStore(store)
    source = data.attrs.get("source", "samples")
    phash = content_key({"v": CACHE_VERSION, "adapter": answerer.signature})
    ids = data[id_col].astype(str).to_numpy()
    paths = data["image_path"].astype(str).to_numpy()
    subjects = data[subject_col].to_numpy() if subject_col and subject_col in data.columns else [None] * len(data)
    hashes = []
    for i, p in enumerate(paths):
        h = file_sha256(p)
        if h is None:
            raise InputFileError(f"{source}: row {i + 1} ({id_col} {ids[i]!r}): cannot read image {p}")
        hashes.append(h)
    q = questions.questions
    tasks = [(i, qid, text, row_key(hashes[i], phash, text))
             for i in range(len(data)) for qid, text in zip(q["question_id"], q["question"])]
    hits = store.get_many(STAGE, (t[3] for t in tasks)) if store is not None else {}
    got: dict[str, str] = {k: v.get("answer") for k, v in hits.items()}
    todo: dict[str, tuple] = {}
    for t in tasks:
        if t[3] not in got and t[3] not in todo:
            todo[t[3]] = t
    total, done = len(todo), 0

    def record(t, text: str) -> None:
        nonlocal done
        i, qid, qtext, key = t
        got[key] = text
        if store is not None:
            store.put(STAGE, key, {"answer": text, "question_id": qid, "question": qtext}, content_hash=hashes[i],
                      params_hash=phash, sample_id=ids[i], subject_id=subjects[i], image_path=paths[i])
        done += 1
        if progress is not None:
            progress(done, total)

    try:
        if workers <= 1 or total <= 1:
            for t in todo.values():
                record(t, answerer.answer(paths[t[0]], t[2]))
        else:
            with ThreadPoolExecutor(max_workers=int(workers)) as pool:
                futures = {pool.submit(answerer.answer, paths[t[0]], t[2]): t for t in todo.values()}
                pending = set(futures)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
                    failed = [f for f in finished if f.exception() is not None]
                    for f in finished:
                        if f.exception() is None:
                            record(futures[f], f.result())
                    if failed:
                        for other in pending:
                            other.cancel()
                        # the questions already in flight finish: keep their answers too, then stop
                        for f in wait(pending)[0]:
                            if not f.cancelled() and f.exception() is None:
                                record(futures[f], f.result())
                        raise failed[0].exception()
    finally:
        if store is not None:
            store.flush()  # what finished is kept, also when interrupted
    rows = [{"sample_id": ids[i], "question_id": qid, "answer": got[key], "from_store": key in hits}
            for i, qid, _, key in tasks]
    return pd.DataFrame(rows, columns=["sample_id", "question_id", "answer", "from_store"]), total


@dataclass
class VQAResult:
    """Result of :func:`audit_vqa` (docs/METHODS.md §12.3).

    ``answers``: one row per (sample, question) with the parsed fields. ``rates``: one row per (attribute,
    group, tone, quantity) with ``n_samples``, ``n_subjects``, ``n_answers``, ``estimate``, ``ci_low``,
    ``ci_high``, ``level``, ``rest``, ``difference`` (group minus rest) with ``diff_ci_low`` / ``diff_ci_high``,
    ``design_effect``, ``statistic``, ``pvalue``, ``pvalue_adjusted``, ``flagged``; ``k`` is the number of
    attributes of the set (intersections are named ``"a × b"`` with groups ``"x × y"``) and ``too_small`` marks
    groups with fewer than ``min_subjects`` subjects (reported, not tested, never flagged). ``overall``: the rate of each (tone, quantity)
    over all answers. ``pronouns``: pronoun counts and shares per group and tone (among responses). ``terms``:
    the most frequent extracted terms per group and tone with NPMI.
    """

    answers: pd.DataFrame
    rates: pd.DataFrame
    overall: pd.DataFrame
    pronouns: pd.DataFrame
    terms: pd.DataFrame
    tones: list[str]
    alpha: float
    correction: str
    meta: dict = field(default_factory=dict)

    def to_frame(self) -> pd.DataFrame:
        return self.rates

    def quantities(self) -> dict[str, float]:
        """Names for ``--fail-if``: ``n_flagged``, ``n_too_small`` (groups), ``max_gap``, ``max_<quantity>_gap``
        (``max_toxic_gap``, ``max_refusal_gap``, ...; the maxima over groups large enough to judge, NaN when
        none was: a gate on a NaN stops with an error),
        ``<quantity>_rate.<tone>`` (over all answers of a tone), ``<quantity>_rate.<attr>.<group>.<tone>`` and
        ``gap.<attr>.<group>.<tone>.<quantity>``; an intersection is ``<a>+<b>`` with groups ``<x>+<y>``."""
        r = self.rates
        judged = r[~r["too_small"].astype(bool)] if len(r) else r
        q: dict[str, float] = {
            "n_flagged": float(count_flagged(r)),
            "n_too_small": float(len(r.loc[r["too_small"].astype(bool), ["attribute", "group"]].drop_duplicates()))
            if len(r) else 0.0,
            "max_gap": float(judged["difference"].abs().max()) if judged["difference"].notna().any() else np.nan}
        for name in QUANTITIES:
            sub = judged.loc[judged["quantity"] == name, "difference"].abs()
            q[f"max_{name}_gap"] = float(sub.max()) if sub.notna().any() else np.nan
        for row in self.overall.itertuples(index=False):
            q[f"{row.quantity}_rate.{row.tone}"] = float(row.estimate)
        for row in r.itertuples(index=False):
            key = f"{quantity_key(row.attribute)}.{quantity_key(row.group)}.{row.tone}"
            q[f"{row.quantity}_rate.{key}"] = float(row.estimate)
            q[f"gap.{key}.{row.quantity}"] = float(row.difference)
        return q


def _expand(rows: np.ndarray, start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Answer positions of member rows: every answer of ``rows[i]`` (answers sorted by row), with ``i``."""
    n = count[rows]
    owner = np.repeat(np.arange(len(rows)), n)
    offs = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    return start[rows][owner] + offs, owner



def audit_vqa(
    data: pd.DataFrame,
    answerer=None,
    questions: QuestionSet | str | Path | None = None,
    attrs: list[str] | None = None,
    *,
    answers=None,
    toxic_words: list[str] | str | Path | None = None,
    id_col: str = "sample_id",
    subject_col: str | None = "subject_id",
    gender_col: str | None = None,
    max_k: int = 1,
    min_subjects: int = MIN_SUBJECTS,
    schema=None,
    missing: str = "error",
    store: ResultsStore | str | Path | None = None,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    top_n: int = 10,
    min_term_count: int = 2,
    n_boot: int = 1000,
    level: float = 0.95,
    alpha: float = 0.05,
    correction: str = DEFAULT_CORRECTION,
    seed: int | np.random.Generator | None = 0,
) -> VQAResult:
    """Visual question answering probe: answer rates by group (docs/METHODS.md §12.3).

    Parameters
    ----------
    data : pandas.DataFrame
        Sample table: ``id_col``, ``image_path`` (when asking), optional ``subject_col``, the attributes and
        optional ``gender_col``.
    answerer : adapter, optional
        A :mod:`fairvision.vision.vqa` adapter, or any callable ``fn(image, question) -> str`` (wrapped in
        :class:`fairvision.vision.vqa.CallableVQA`). Not needed with ``answers``.
    questions : QuestionSet or path, optional
        Question sets and parsing patterns (default the bundled ``questions.toml``).
    attrs : list of str
        Group attributes.
    answers : path-like or DataFrame, optional
        Precomputed answers (``sample_id``, ``question_id``, ``answer``) instead of asking.
    toxic_words : list of str or path, optional
        Keyword list (default the bundled ``toxic_words.txt``).
    gender_col : str, optional
        Column of each person's pronouns or gender (values mapped by ``[parsing.gender_values]``): adds the
        misgendering rate.
    max_k : int
        Largest intersection size: 1 (default) each attribute on its own, 2 also every pair of attributes, ...
        Intersections come from :func:`fairvision.groups.intersections` and are tested and corrected together with
        the single attributes.
    min_subjects : int
        Groups (and intersections) with fewer subjects are reported with their rates and CIs but not tested or
        flagged: too small to judge (default 10, FHIBE's threshold).
    schema, missing
        Attribute schema (optional) and the rule for empty attribute cells: ``"error"`` (default), ``"drop"``
        (the rows are left out, and not asked) or ``"keep"`` (a group ``(missing)``).
    store, workers, progress
        See :func:`ask`.
    top_n, min_term_count
        Extracted terms listed per group, and the fewest answers a term needs overall to be listed.
    n_boot, level, alpha, correction, seed
        Subject bootstrap replicates, CI level, significance level, multiple-testing correction, randomness.

    Returns
    -------
    VQAResult
    """
    qs = questions if isinstance(questions, QuestionSet) else load_questions(questions)
    words = toxic_words if isinstance(toxic_words, list) else load_toxic_words(toxic_words)
    if not attrs:
        raise FairvisionError("give at least one attribute (--attr)")
    data, schema, source, n_rows = prepare_samples(data, attrs, id_col=id_col, missing=missing, schema=schema,
                                                   max_k=max_k, min_subjects=min_subjects)
    if subject_col is not None and subject_col not in data.columns:
        subject_col = None if subject_col == "subject_id" else subject_col
    clusters = subject_codes(data, subject_col, source=source, rows_as_subjects=True)
    n_called = 0
    if answers is not None:
        ans = read_answers(answers, qs)
        ans["from_store"] = False
    else:
        if answerer is None:
            raise FairvisionError("give an answerer (a VQA adapter) or precomputed answers")
        if not hasattr(answerer, "answer"):
            answerer = CallableVQA(answerer)
        ans, n_called = ask(data, answerer, qs, id_col=id_col, subject_col=subject_col, store=store,
                            workers=workers, progress=progress)
    row_of = pd.Index(data[id_col].astype(str)).get_indexer(ans["sample_id"])
    have = set(ans["sample_id"])
    missing = [s for s in data[id_col].astype(str) if s not in have]
    if missing:
        raise InputFileError(f"answers: no answer for {id_col} {missing[0]!r}"
                             + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "") + " of the sample table")
    ans = ans[row_of >= 0].copy()
    ans["_row"] = row_of[row_of >= 0]
    ans = parse_answers(ans, qs, words).sort_values("_row", kind="stable").reset_index(drop=True)

    # per-answer values of each quantity (NaN where undefined)
    resp = ans["responded"].to_numpy(bool)
    pron = ans["pronoun"].to_numpy(object)
    gendered = np.isin(pron, ["he", "she"])
    vals = {"response": resp.astype(float), "refusal": ans["refused"].to_numpy(float),
            "toxic": ans["toxic"].to_numpy(float), "gendered": gendered.astype(float),
            "gender_word": ans["gender_word"].to_numpy(float)}
    if gender_col is not None:
        if gender_col not in data.columns:
            raise ColumnError(f"{source}: no gender column {gender_col!r}; columns are {', '.join(map(str, data.columns))}")
        raw = data[gender_col].astype(object).where(data[gender_col].notna(), "")
        expected = np.array([qs.gender_values.get(str(v).strip().lower()) for v in raw], dtype=object)
        exp_ans = expected[ans["_row"].to_numpy()]
        ans["expected_pronoun"] = exp_ans
        known = gendered & pd.notna(exp_ans)
        vals["misgender"] = np.where(known, (pron != exp_ans).astype(float), np.nan)
        ans["misgender"] = vals["misgender"]
    quantities = [k for k in QUANTITIES if k in vals]
    nq = len(quantities)
    tones = qs.tones
    tone_code = pd.Categorical(ans["tone"], categories=tones).codes.astype(np.int64)
    v = np.stack([vals[k] for k in quantities], axis=1)  # (n_answers, nq)
    ok = ~np.isnan(v)
    v0 = np.nan_to_num(v)
    nt = len(tones)
    tq = nt * nq
    n_ans = len(ans)
    arow = ans["_row"].to_numpy(np.int64)
    count = np.bincount(arow, minlength=len(data))
    start = np.concatenate([[0], np.cumsum(count)[:-1]])
    n_clusters = int(clusters.max()) + 1

    sets = intersections(data, attrs, max_k=max_k, schema=schema, source=source)
    offsets = np.cumsum([0] + [s.n_cells for s in sets])
    n_groups = int(offsets[-1])
    gcols = n_groups * tq
    # one per-subject matrix: group sums, group counts, then sums and counts of all answers, per (tone, quantity)
    ent_r, ent_c, ent_v = [], [], []
    qi = np.arange(nq)
    for s, off in zip(sets, offsets[:-1]):
        pos, owner = _expand(s.rows, start, count)
        g = off + s.codes[owner]
        cell = ((g * nt + tone_code[pos])[:, None] * nq + qi[None, :]).ravel()
        cl = np.repeat(clusters[arow[pos]], nq)
        ent_r += [cl, cl]
        ent_c += [cell, gcols + cell]
        ent_v += [v0[pos].ravel(), ok[pos].ravel().astype(float)]
    allcell = (tone_code[:, None] * nq + qi[None, :]).ravel()
    clall = np.repeat(clusters[arow], nq)
    ent_r += [clall, clall]
    ent_c += [2 * gcols + allcell, 2 * gcols + tq + allcell]
    ent_v += [v0.ravel(), ok.ravel().astype(float)]
    mat = sparse.csr_matrix((np.concatenate(ent_v), (np.concatenate(ent_r), np.concatenate(ent_c))),
                            shape=(n_clusters, 2 * gcols + 2 * tq))
    # group rates, the rest's, subject-bootstrap CIs and the subject-level test: answers of one subject (three
    # wordings, several images) are not independent
    gvr = group_vs_rest(mat, n_groups, tq, n_boot=n_boot, seed=seed, level=level)
    an = gvr.all_counts
    with np.errstate(invalid="ignore", divide="ignore"):
        overall_est = gvr.all_sums / an
        overall_rep = gvr.all_rep_sums / gvr.all_rep_counts
    olo, ohi = percentile_ci(overall_rep, level)

    rows, pron_rows, term_rows = [], [], []
    for s, off in zip(sets, offsets[:-1]):
        labels = s.display_labels()
        ns, subj = cell_counts(s, clusters)
        small = subj < min_subjects
        for gi in np.flatnonzero(ns > 0):
            g = off + gi
            for t, tone in enumerate(tones):
                for k, quant in enumerate(quantities):
                    c = t * nq + k
                    a, b = gvr.sums[g, c], gvr.counts[g, c]
                    if b <= 0:
                        continue
                    # answers as independent and the subject-level Rao-Scott test (docs/METHODS.md §12.1)
                    stat, p = group_vs_rest_pvalue(a, b, gvr.all_sums[c] - a, an[c] - b, gvr.statistic[g, c],
                                                   seed=seed, too_small=bool(small[gi]))
                    rows.append({"attribute": s.name, "k": s.k, "group": labels[gi], "tone": tone, "quantity": quant,
                                 "n_samples": int(ns[gi]), "n_subjects": int(subj[gi]),
                                 "too_small": bool(small[gi]), "n_answers": int(b),
                                 "estimate": gvr.estimate[g, c], "ci_low": gvr.ci_low[g, c],
                                 "ci_high": gvr.ci_high[g, c], "level": level, "rest": gvr.rest[g, c],
                                 "difference": gvr.estimate[g, c] - gvr.rest[g, c],
                                 "diff_ci_low": gvr.diff_ci_low[g, c], "diff_ci_high": gvr.diff_ci_high[g, c],
                                 "design_effect": gvr.design_effect[g, c], "statistic": stat, "pvalue": p})
        # pronoun counts and top terms, from the answers of each group
        pos, owner = _expand(s.rows, start, count)
        gcode = s.codes[owner]
        pcode = pd.Categorical(pron[pos], categories=list(PRONOUNS)).codes
        rmask = resp[pos] & (pcode >= 0)
        pc = np.bincount((gcode[rmask] * nt + tone_code[pos][rmask]) * len(PRONOUNS) + pcode[rmask],
                         minlength=s.n_cells * nt * len(PRONOUNS)).reshape(s.n_cells, nt, len(PRONOUNS))
        for gi in np.flatnonzero(ns > 0):
            for t, tone in enumerate(tones):
                tot = pc[gi, t].sum()
                for j, pname in enumerate(PRONOUNS):
                    pron_rows.append({"attribute": s.name, "group": labels[gi], "tone": tone, "pronoun": pname,
                                      "count": int(pc[gi, t, j]), "share": pc[gi, t, j] / tot if tot else np.nan})
        terms = ans["term"].to_numpy(object)[pos]
        for t, tone in enumerate(tones):
            sel = (tone_code[pos] == t) & pd.notna(terms)
            if not sel.any():
                continue
            # group x term counts (terms in alphabetical order: ties in the top list break alphabetically)
            tcode, tuniq = pd.factorize(terms[sel], sort=True)
            nterm = len(tuniq)
            ct = np.bincount(gcode[sel] * nterm + tcode, minlength=s.n_cells * nterm).reshape(s.n_cells, nterm)
            frequent = ct.sum(axis=0) >= min_term_count
            ct, tnames = ct[:, frequent], np.asarray(tuniq, dtype=object)[frequent]
            gkeep = np.flatnonzero(ct.sum(axis=1) > 0)
            if not len(gkeep):
                continue
            ct = ct[gkeep]
            tc = pd.DataFrame(ct, index=pd.Index(labels[gkeep], name=s.name), columns=pd.Index(tnames, name="term"))
            nm = npmi(tc.astype(float), s.name, "term").to_numpy()
            for i, gi in enumerate(gkeep):
                cnt = ct[i]
                top = np.argsort(-cnt, kind="stable")[:top_n]
                top = top[cnt[top] > 0]
                n_g = int(cnt.sum())
                for j in top:
                    term_rows.append({"attribute": s.name, "group": labels[gi], "tone": tone, "term": tnames[j],
                                      "count": int(cnt[j]), "share": cnt[j] / n_g, "npmi": float(nm[i, j])})

    # two groups: "A vs rest" and "B vs rest" are one test, counted once in the correction (docs/METHODS.md §12.1)
    rates = adjust_group_tests(pd.DataFrame(rows, columns=RATE_COLUMNS), ["tone", "quantity"], correction)
    excludes = (rates["diff_ci_low"] > 0) | (rates["diff_ci_high"] < 0)
    rates["flagged"] = ((rates["pvalue_adjusted"] < alpha) & excludes & ~rates["too_small"].astype(bool)).astype(bool)
    overall = pd.DataFrame([{"tone": tone, "quantity": quant, "n_answers": int(an[t * nq + k]),
                             "estimate": overall_est[t * nq + k], "ci_low": olo[t * nq + k],
                             "ci_high": ohi[t * nq + k], "level": level}
                            for t, tone in enumerate(tones) for k, quant in enumerate(quantities)
                            if an[t * nq + k] > 0])
    out = ans.drop(columns=["_row"])
    return VQAResult(answers=out, rates=rates, overall=overall,
                     pronouns=pd.DataFrame(pron_rows, columns=["attribute", "group", "tone", "pronoun", "count", "share"]),
                     terms=pd.DataFrame(term_rows, columns=["attribute", "group", "tone", "term", "count", "share", "npmi"]),
                     tones=tones, alpha=alpha, correction=correction,
                     meta={"n_samples": len(data), "n_dropped": n_rows - len(data), "missing": missing,
                           "n_subjects": n_clusters, "n_answers": n_ans,
                           "n_questions": len(qs.questions), "n_called": n_called, "precomputed": answers is not None,
                           "n_from_store": int(ans["from_store"].sum()), "n_boot": n_boot, "quantities": quantities,
                           "max_k": int(max_k), "min_subjects": int(min_subjects),
                           "expect": dict(zip(qs.questions["tone"], qs.questions["expect"])),
                           "questions": qs.source, "signature": getattr(answerer, "signature", None)})
