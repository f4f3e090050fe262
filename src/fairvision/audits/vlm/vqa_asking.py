"""Asking a vision-language model the questions of the VQA probe, answers kept in the results store
(docs/METHODS.md §12.3).

Any adapter of :mod:`fairvision.vision.vqa` answers; every answer is kept under the image's SHA-256, the adapter's
signature and the question's wording, so an interrupted run resumes and a second run asks nothing. A failed
reply (:class:`fairvision.vision.vqa.FailedReply`: over the byte cap, ``content: null``) is not an answer: it is
noted in the ``failure`` column, kept out of the store, and asked again by the next run.
"""

from __future__ import annotations

from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Callable

import pandas as pd

from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.audits.vlm.vqa_parsing import QuestionSet
from fairvision.engine.cache import content_key
from fairvision.errors import ColumnError, FairvisionError, InputFileError
from fairvision.io.store import ResultsStore, file_sha256, row_key
from fairvision.vision.vqa import FailedReply

#: stage of the answers in the results store
STAGE = "vqa_answers"
#: bump when a change here changes what a stored answer means
CACHE_VERSION = 1


def ask(data: pd.DataFrame, answerer, questions: QuestionSet, *, id_col: str = "sample_id",
        subject_col: str | None = "subject_id", store: ResultsStore | str | Path | None = None,
        progress: Callable[[int, int], None] | None = None,
        settings: AuditSettings | None = None) -> tuple[pd.DataFrame, int]:
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
    progress : callable, optional
        ``progress(done, total)`` after each answer.
    settings : AuditSettings, optional
        ``workers``: questions in flight at once (threads; useful for an HTTP server that batches requests).

    Returns
    -------
    answers : pandas.DataFrame
        ``sample_id``, ``question_id``, ``answer``, ``from_store``, ``failure`` (None for an answer; for a
        failed reply the kind of failure, e.g. ``"content null"``, with ``answer`` None). The first failure's
        full message is in ``answers.attrs["first_failure"]``.
    n_called : int
        Questions actually sent to the adapter.
    """
    if "image_path" not in data.columns:
        raise ColumnError(f"{data.attrs.get('source', 'samples')}: no image path column (image_path); give a "
                          "sample table with image paths, or precomputed answers")
    if store is not None and not getattr(answerer, "cacheable", True):
        raise FairvisionError(answerer.store_error())
    if store is not None and not isinstance(store, ResultsStore):
        store = ResultsStore(store)
    workers = (settings or DEFAULT_SETTINGS).workers
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
    failed: dict[str, FailedReply] = {}
    todo: dict[str, tuple] = {}
    for t in tasks:
        if t[3] not in got and t[3] not in todo:
            todo[t[3]] = t
    total, done = len(todo), 0

    def record(t, text: str | FailedReply) -> None:
        nonlocal done
        i, qid, qtext, key = t
        if isinstance(text, FailedReply):
            failed[key] = text
        else:
            got[key] = text
        if store is not None and key in got:
            store.put(STAGE, key, {"answer": text, "question_id": qid, "question": qtext}, content_hash=hashes[i],
                      params_hash=phash, sample_id=ids[i], subject_id=subjects[i], image_path=paths[i])
        done += 1
        if progress is not None:
            progress(done, total)

    try:
        if workers <= 1 or total <= 1:
            for t in todo.values():
                record(t, answer_or_failure(answerer, paths[t[0]], t[2]))
        else:
            _ask_in_threads(answerer, list(todo.values()), paths, workers, record)
    finally:
        if store is not None:
            store.flush()  # what finished is kept, also when interrupted
    rows = [{"sample_id": ids[i], "question_id": qid, "answer": got.get(key), "from_store": key in hits,
             "failure": failed[key].reason if key in failed else None} for i, qid, _, key in tasks]
    out = pd.DataFrame(rows, columns=["sample_id", "question_id", "answer", "from_store", "failure"])
    if failed:
        out.attrs["first_failure"] = str(next(iter(failed.values())))
    return out, total


def answer_or_failure(answerer, path: str, question: str) -> str | FailedReply:
    """The adapter's answer, or the :class:`FailedReply` it raised (any other error propagates)."""
    try:
        return answerer.answer(path, question)
    except FailedReply as exc:
        return exc


def failure_summary(answers: pd.DataFrame) -> dict:
    """Failed replies of an answers table (``failure`` column of :func:`ask`; none when it has no such column):
    ``n_failed``, ``failures`` (count per kind, most frequent first, ties by name) and ``first_failure`` (its message)."""
    if "failure" not in answers.columns:
        return {"n_failed": 0, "failures": {}, "first_failure": None}
    kinds = answers["failure"].dropna().astype(str)
    return {"n_failed": int(len(kinds)), "failures": dict(sorted(((str(k), int(v)) for k, v in kinds.value_counts().items()),
                                                         key=lambda kv: (-kv[1], kv[0]))),
            "first_failure": answers.attrs.get("first_failure") if len(kinds) else None}


def _ask_in_threads(answerer, tasks: list[tuple], paths, workers: int, record: Callable) -> None:
    """Ask ``tasks`` with ``workers`` questions in flight, calling ``record(task, answer)`` for each answer. On the
    first failure the questions not started are cancelled, those in flight finish (their answers are recorded),
    and the failure is raised."""
    with ThreadPoolExecutor(max_workers=int(workers)) as pool:
        futures = {pool.submit(answer_or_failure, answerer, paths[t[0]], t[2]): t for t in tasks}
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
