"""``fairvision audit generative``: BiasPainter metamorphic test of an image generator.

``fairvision audit generative init DIR`` writes a commented starter spec that runs as is;
``fairvision audit generative SPEC -o OUT`` (or ``... run SPEC``) generates, assesses, scores and
writes the report (with the per-pair changes in ``OUT/generative/``);
``fairvision audit generative compare OUT OUT ... -o DIR`` puts the generators of finished runs side by side. The audit, report and pandas imports stay inside the commands (they add about a
second to ``fairvision --help``, measured for the other command modules).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import (
    NO_STORE_OPTION,
    STORE_OPTION,
    StageLines,
    check_outdir,
    done,
    exit_if_gates_failed,
    progress_bars,
    results_store,
)
from fairvision.cli.options import with_settings
from fairvision.cli.startup import Group
from fairvision.errors import FairvisionError


class _DefaultRunGroup(Group):
    """A group whose first argument, when it is not a subcommand, is the spec of ``run`` (with the help layout
    of every group, :class:`fairvision.cli.startup.Group`)."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and not args[0].startswith("-"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


generative_app = typer.Typer(
    cls=_DefaultRunGroup,
    help="Audit an image generator with neutral prompts (BiasPainter): does 'a photo of a person who is a "
         "nurse' change the person's skin colour, age or gender? 'init DIR' writes a starter spec; "
         "'SPEC -o OUT' runs it.",
    no_args_is_help=True,
)


def init_cmd(
    folder: Path = typer.Argument(..., metavar="DIR", help="Folder to write spec.toml into (created if needed)."),
    force: bool = typer.Option(False, "--force", help="Overwrite an existing spec.toml."),
):
    """Write a commented starter spec (bundled CC0 portraits as seeds, the built-in editor, default
    assessors) that runs as is: fairvision audit generative DIR/spec.toml -o OUT."""
    from fairvision.audits.generative.spec import starter_spec  # lazy: see the module docstring
    from fairvision.io.atomic import atomic_write_text

    if folder.exists() and not folder.is_dir():
        raise FairvisionError(f"{folder}: exists and is not a folder")
    spec = folder / "spec.toml"
    if spec.exists() and not force:
        raise FairvisionError(f"{spec}: exists; pass --force to overwrite it")
    check_outdir(folder)
    atomic_write_text(spec, starter_spec(str(spec)))
    typer.echo(f"spec: {spec.resolve()}")
    typer.echo(f"run:  fairvision audit generative {spec} -o {folder / 'report'}")


@with_settings("workers", "engine", "address", workers=2)
def run_cmd(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="The experiment spec (TOML; see 'init')."),
    output: Path = typer.Option(Path("generative-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    store: Optional[Path] = STORE_OPTION,
    no_store: bool = NO_STORE_OPTION,
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'max_abs_word_skin>10', 'n_flagged_words>0', 'model_age>3', 'face_lost_share>0.05'. Repeat: any one failing fails."),
    show_images: bool = typer.Option(False, "--show-images", help="Embed before/after thumbnails of flagged words (face images: off by default)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Progress bars on stderr on a terminal; otherwise one line per finished stage (generation, assessment, scoring) with its failures."),
    settings: AuditSettings = None,
):
    """Run a generative audit: every generator edits every seed with every neutral prompt (outputs that
    exist are kept), seeds and outputs are assessed (skin colour, age, gender, identity, lost faces; kept in
    the results store, so a rerun assesses only what is new),
    and word, topic and model scores with bootstrap CIs and corrected paired tests are reported. --workers
    parallelises the built-in editor, folder outputs and the assessment (a callable or HTTP generator runs one at
    a time unless its spec sets workers). A generator none of whose outputs could be made is an error naming
    the most common cause; the failures table is written to OUT/failures.csv."""
    from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition  # lazy: see the docstring
    from fairvision.audits.generative import audit_generative, load_spec
    from fairvision.audits.generative.failures import GenerationFailed
    from fairvision.audits.generative.runs import FAILURES_FILE, run_files
    from fairvision.io.atomic import atomic_write_text
    from fairvision.engine import check_engine
    from fairvision.report import Report
    from fairvision.report.sections.generative import generative_sections

    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    check_outdir(output)
    check_engine(settings.engine, settings.address)
    results = results_store(store, no_store)
    spec = load_spec(spec_path)
    planted = _planted_line(spec)
    if planted:
        typer.echo(f"note: {planted}", err=True)
    with progress_bars(progress) as advance:
        # on a terminal the bars; in a log the audit's own line per finished stage, which counts its failures
        bars = advance if not isinstance(advance, StageLines) else None
        stages = (lambda line: typer.echo(line, err=True)) if isinstance(advance, StageLines) else None
        try:
            result = audit_generative(spec, settings=settings, progress=bars, store=results, stages=stages)
        except GenerationFailed as exc:  # the list goes where the report would have gone, and the line says so
            where = output / "failures.csv"
            atomic_write_text(where, exc.failures.to_csv(index=False))
            raise FairvisionError(exc.message_for(str(where))) from None
    gates = evaluate_conditions(conditions, result.quantities()) if conditions else []
    demo = {"demonstration": f"planted shifts of the built-in editor ({', '.join(result.planted)}), not a model's bias"}
    report = Report(title=f"Generative audit: {spec.name}", subtitle="fairvision generative model audit (BiasPainter)",
                    meta={"spec": str(spec_path), "generators": ", ".join(result.generators),
                          "seeds": len(spec.seeds), "prompt words": len(spec.prompts),
                          **(demo if result.planted else {}),
                          "settings": spec.run_settings(settings).to_meta(), **(gate_meta(gates) if gates else {})})
    for sec in generative_sections(result, show_images=show_images):
        report.add(sec)
    paths = report.write(output, extra_files=run_files(result))
    for note in result.notes:  # ids that differ only in case or punctuation, no skin measured: said here too
        typer.echo(f"note: {note}", err=True)
    for cov in result.coverage.values():  # outputs left out: how many, why, and where each one is listed
        typer.echo(f"note: {cov.summary_line()}; every failure with its reason: {output / FAILURES_FILE} "
                   "(and the report's failures table)", err=True)
    n_flag = int(result.words["flagged"].sum())
    n_fail = int((~result.records["ok"].astype(bool)).sum())
    counts = result.settings.get("assessments", {})
    n_stored = int(sum(counts.get("from_store", {}).values()))
    done(paths, f"{len(result.records):,} outputs ({int(result.records['generated'].sum()):,} generated now, "
                f"{n_fail:,} failed); {result.n_assessed():,} assessments computed, {n_stored:,} from the store; "
                f"{n_flag:,} flagged word-property pairs"
                + ("; a demonstration of planted shifts, not a model's bias" if result.planted else ""))
    exit_if_gates_failed(gates)


@with_settings("n_boot", "level", "alpha", "correction", "seed")
def compare_cmd(
    runs: List[Path] = typer.Argument(..., metavar="RUN_DIR...", help="Two or more output folders of 'fairvision audit generative' (one folder with several generators also works)."),
    output: Path = typer.Option(Path("generative-compare"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    name: List[str] = typer.Option([], "--name", help="A label per generator, in the order of the runs (repeat); default the generator names."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'n_flagged_differences>0', 'model_difference_skin_L>2', 'model_skin_L.sd15>3'. Repeat: any one failing fails."),
    settings: AuditSettings = None,
):
    """Compare the generators of finished generative audits on the same seeds and words: model, topic and word
    scores side by side, paired tests between generators (corrected), and the most and least biased generator
    per topic with the CI of the difference. Runs with different seeds or words are an error."""
    from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition  # lazy: see the docstring
    from fairvision.audits.generative.compare import compare_generative
    from fairvision.report import Report
    from fairvision.report.sections.generative import compare_section

    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    check_outdir(output)
    cmp = compare_generative(runs, names=name or None, settings=settings)
    gates = evaluate_conditions(conditions, cmp.quantities()) if conditions else []
    report = Report(title="Generative audit: generators compared",
                    subtitle="fairvision generative model comparison (BiasPainter)",
                    meta={"runs": ", ".join(map(str, runs)), "generators": ", ".join(cmp.generators),
                          "seeds": cmp.settings["n_seeds"], "prompt words": cmp.settings["n_words"],
                          "settings": settings.to_meta(), **(gate_meta(gates) if gates else {})})
    report.add(compare_section(cmp, conditions=gates))
    paths = report.write(output)
    q = cmp.quantities()
    done(paths, f"{len(cmp.generators)} generators; {int(q['n_flagged_model_differences'])} model, "
                f"{int(q['n_flagged_topic_differences'])} topic and {int(q['n_flagged_word_differences'])} word "
                "differences flagged")
    exit_if_gates_failed(gates)


def _planted_line(spec) -> str:
    """The line that says a run of the built-in editor is a demonstration of the shifts its spec planted."""
    builtin = [g for g in spec.generators if g["kind"] == "builtin"]
    if not builtin:
        return ""
    shifts = {w for g in builtin for w in (g.get("shifts") or {})}
    what = (f"the shifts planted in the spec for {len(shifts)} word{'s' if len(shifts) != 1 else ''} "
            f"({', '.join(sorted(map(str, shifts))[:5])}{', ...' if len(shifts) > 5 else ''})" if shifts
            else "no planted shift (only its jitter)")
    return (f"demonstration: the built-in editor ({', '.join(str(g['name']) for g in builtin)}) is not a model; it "
            f"applies {what}, so its findings show the audit finding planted shifts, not a model's bias")


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    generative_app.command("init")(init_cmd)
    generative_app.command("run")(run_cmd)
    generative_app.command("compare")(compare_cmd)
    audit_app.add_typer(generative_app, name="generative")
