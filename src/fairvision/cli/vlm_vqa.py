"""``fairvision audit vlm vqa``: visual question answering probe of a vision-language model (docs/METHODS.md §12.3)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (NO_STORE_OPTION, STORE_OPTION, check_outdir, done, exit_if_gates_failed,
                                   results_store, progress_bar)
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError, ParameterError

BACKENDS = ("http", "transformers")
#: where the bundled questions live, relative to the repository root (for --help)
QUESTIONS_FILE = "src/fairvision/datasets/data/vlm/questions.toml"


def bundled_question_ids() -> str:
    """The question ids of the bundled questions.toml for ``--help``, read with the standard library only (the
    CLI must start without numpy or pandas)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python < 3.11
        return f"see {QUESTIONS_FILE}"
    path = Path(__file__).resolve().parents[1] / "datasets" / "data" / "vlm" / "questions.toml"
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return f"see {QUESTIONS_FILE}"
    ids = [qid for table in doc.values() if isinstance(table, dict) and isinstance(table.get("questions"), dict)
           for qid in table["questions"]]
    return f"bundled: {', '.join(ids)}" if ids else f"see {QUESTIONS_FILE}"


QUESTION_IDS_HELP = bundled_question_ids()


@with_settings("correction", "alpha", "n_boot", "seed", "min_subjects", "workers", workers=4)
def audit_vqa_cmd(
    samples: Path = typer.Option(..., "--samples", help="Sample table: sample_id, image_path (when asking), subject_id (optional), the attribute columns."),
    attr: List[str] = typer.Option(..., "--attr", "-a", help="Group attribute column (repeat: -a gender -a ancestry)."),
    backend: Optional[str] = typer.Option(None, "--backend", help="Who answers: http (an OpenAI-compatible chat server with image input: vLLM, llama.cpp server, Ollama; --url, --model) or transformers (local weights in the folder --model). Not needed with --answers."),
    url: Optional[str] = typer.Option(None, "--url", help="Server root for --backend http, e.g. http://127.0.0.1:8000 (POST /v1/chat/completions). An API key, if needed, is read from $OPENAI_API_KEY."),
    model: Optional[str] = typer.Option(None, "--model", help="--backend http: the model name the server knows; --backend transformers: the folder of save_pretrained weights (nothing is downloaded)."),
    answers: Optional[Path] = typer.Option(None, "--answers", help=f"Precomputed answers instead of asking: a table with sample_id, question_id, answer; question_id is one of the ids of the questions file ({QUESTION_IDS_HELP})."),
    questions: Optional[Path] = typer.Option(None, "--questions", help="TOML of questions by tone and answer-parsing patterns (default: the bundled src/fairvision/datasets/data/vlm/questions.toml)."),
    toxic_words: Optional[Path] = typer.Option(None, "--toxic-words", help="Toxic keyword list, one word or phrase a line (default: the bundled short list; replace it with your own)."),
    gender_col: Optional[str] = typer.Option(None, "--gender-col", help="Column of each person's pronouns or gender (he/him, she/her, male, female, ...): adds the misgendering rate."),
    subject_col: str = typer.Option("subject_id", "--subject-col", help="Column identifying the person (bootstrap unit); every row its own subject when absent."),
    image_col: Optional[str] = typer.Option(None, "--image-col", help="Column of the image paths (default: image_path or a common alias)."),
    max_k: int = typer.Option(1, "--max-k", min=1, max=4, help="Largest intersection size (2 = also every pair of attributes, tested and corrected with them)."),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds to wait for one answer from the server (positive)."),
    max_tokens: int = typer.Option(64, "--max-tokens", min=1, help="Longest answer, in tokens."),
    max_side: int = typer.Option(1024, "--max-side", min=0, help="--backend http: images with a longer side are downscaled to this many pixels before sending (0: send as they are)."),
    missing: str = typer.Option("error", "--missing", help="Empty attribute cells: 'error' (stop), 'drop' (leave the rows out), 'keep' (group '(missing)')."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    output: Path = typer.Option(Path("fairvision-vqa-report"), "--output", "-o", help="Output folder for report.html, report.json, answers.parquet and tables/."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_flagged>0', 'n_too_small>0', 'max_toxic_gap>0.05', 'toxic_rate.negative>0.1'."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Ask every image questions of positive, neutral and negative tone (why is this person likeable, what is
    their occupation, what crime did they commit) and compare the answers between groups: response, refusal,
    toxic and misgendering rates with subject-bootstrap CIs and corrected group-vs-rest tests, pronouns used and
    top extracted terms with NPMI (docs/METHODS.md §12.3). Answers are kept in the results store, so an
    interrupted run resumes. With --backend http, --workers questions are in flight at once."""
    check_outdir(output)
    if missing not in ("error", "drop", "keep"):
        raise FairvisionError(f"--missing must be error, drop or keep, not {missing!r}")
    if not timeout > 0:
        raise FairvisionError(f"--timeout must be a positive number of seconds, not {timeout:g}")
    conditions = [parse_condition(c) for c in fail_if]
    if answers is not None:
        ignored = [opt for opt, given in (("--timeout", timeout != 120.0), ("--max-tokens", max_tokens != 64),
                                          ("--workers", settings.workers != 4), ("--max-side", max_side != 1024),
                                          ("--store", store is not None), ("--no-store", no_store),
                                          ("--url", url is not None), ("--model", model is not None)) if given]
        if ignored:
            typer.echo(f"warning: {', '.join(ignored)} ignored with --answers (nothing is asked)", err=True)
    elif url is not None and backend != "http":
        typer.echo("warning: --url ignored without --backend http", err=True)
    if answers is None:
        if backend is None:
            raise FairvisionError("give --backend http|transformers (with --url / --model), or precomputed --answers")
        if backend not in BACKENDS:
            raise FairvisionError(f"--backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        if backend == "http" and (not url or not model):
            raise FairvisionError("--backend http needs --url (e.g. http://127.0.0.1:8000) and --model (the server's model name)")
        if backend == "transformers" and not model:
            raise FairvisionError("--backend transformers needs --model (a folder of save_pretrained weights)")
    elif backend is not None:
        raise FairvisionError("give either --answers or --backend, not both")
    if samples.is_dir():
        raise FairvisionError(f"{samples}: is a folder; give a sample table with the attribute columns (a folder "
                              "has none), e.g. a CSV with sample_id, image_path and one column per attribute")
    # lazy: numpy, pandas and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.vlm.samples import SampleOptions
    from fairvision.audits.vlm.vqa import audit_vqa
    from fairvision.audits.vlm.vqa_parsing import default_questions_path, default_toxic_words_path, load_questions
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.vlm_vqa import failed_replies_section, vlm_vqa_section
    from fairvision.stats.versus_rest import count_flagged
    from fairvision.vision.vqa import OpenAIChatVQA, TransformersVQA

    qs = load_questions(questions)
    data = read_table(samples, image_col=image_col)
    answerer, results = None, None
    if answers is None:
        if backend == "http":
            try:
                answerer = OpenAIChatVQA(url, model, timeout=timeout, max_tokens=max_tokens, max_side=max_side)
            except ParameterError as exc:  # the adapter's base_url is this command's --url
                if exc.parameter != "base_url":
                    raise
                raise ParameterError("url", str(exc).removeprefix("base_url ")) from None
        else:
            answerer = TransformersVQA(model, max_new_tokens=max_tokens)
            settings = settings.replace(workers=1)  # one model in this process
        results = results_store(store, no_store)
    with progress_bar("asking", answers is None) as advance:
        result = audit_vqa(data, answerer, qs, attr, answers=answers, toxic_words=toxic_words,
                           samples=SampleOptions(subject_col=subject_col, missing=missing), gender_col=gender_col,
                           max_k=max_k, store=results, progress=advance, settings=settings)
    evaluated = evaluate_conditions(conditions, result.quantities()) if conditions else []
    who = str(answers) if answers is not None else (f"{url} ({model})" if backend == "http" else str(model))
    report = Report(title=title or f"Visual question answering probe: {samples.name}",
                    subtitle="fairvision audit vlm vqa",
                    meta={"samples": str(samples), "answers" if answers is not None else "model": who,
                          "questions": str(questions or default_questions_path()),
                          "toxic words": str(toxic_words or default_toxic_words_path()),
                          "results store": str(results.root) if results is not None else "none",
                          "max_k": max_k, "missing": missing, "settings": settings.to_meta(),
                          **gate_meta(evaluated)})
    report.add(vlm_vqa_section(result, conditions=evaluated))
    failed_section = failed_replies_section(result)
    if failed_section is not None:
        report.add(failed_section)
    buf = io.BytesIO()
    result.answers.to_parquet(buf, index=False)
    paths = report.write(output, extra_files={"answers.parquet": buf.getvalue()})
    done(paths, f"answers: {(output / 'answers.parquet').resolve()}\n{result.meta['n_answers']} answers "
                f"({result.meta['n_called']} asked now); {count_flagged(result.rates)} group differences flagged"
                + (f"\n{result.meta['n_failed']} failed replies left out of every rate ("
                   + ", ".join(f"{k}: {v}" for k, v in result.meta["failures"].items()) + "); a rerun asks them again"
                   + f"\n{result.coverage.summary_line()}" if result.meta.get("n_failed") else ""))
    exit_if_gates_failed(evaluated)


def register(vlm_app: typer.Typer) -> None:
    vlm_app.command("vqa")(audit_vqa_cmd)
