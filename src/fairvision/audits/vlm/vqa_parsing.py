"""Question sets of the visual question answering probe and the parsing of answers (docs/METHODS.md §12.3).

A question set (``datasets/data/vlm/questions.toml``) holds questions of positive, neutral and negative tone and
the patterns that read their answers: whether the model responded or refused, the pronoun it used, gender words,
the term it named (an occupation, a reason) and toxic keywords (``datasets/data/vlm/toxic_words.txt``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.tables import read_raw_table
from fairvision.io.toml import read_toml

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
                             f"question set {questions.source} ({', '.join(sorted(known))}); give the question set the answers belong to")
    dup = df.duplicated(["sample_id", "question_id"]).to_numpy()
    if dup.any():
        i = int(np.flatnonzero(dup)[0])
        raise InputFileError(f"{label}: row {i + 1}: a second answer of sample {df['sample_id'].iloc[i]!r} to "
                             f"question {df['question_id'].iloc[i]!r}")
    df["answer"] = df["answer"].astype(object).where(df["answer"].notna(), None)
    return df
