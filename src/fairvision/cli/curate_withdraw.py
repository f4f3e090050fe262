"""``fairvision curate withdraw``: consent withdrawal with an audit log and balanced replacement (docs/METHODS.md §13.5)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.cli.common import check_outdir
from fairvision.errors import FairvisionError


def _split(values: List[str]) -> list[str]:
    out = []
    for v in values:
        out += [x.strip() for x in v.split(",") if x.strip()]
    return out


def withdraw_cmd(
    samples: Path = typer.Argument(..., help="Samples table (sample_id, subject_id, image_path, attributes): CSV, TSV, Parquet, JSON or JSONL."),
    subject: List[str] = typer.Option(..., "--subject", help="Subject id to withdraw (repeat for several). Without a subject_id column every sample is its own subject."),
    derived: List[Path] = typer.Option([], "--derived", help="A derived file to clean too (repeat): a table with sample_id and/or subject_id columns, or a COCO JSON file."),
    pool: Optional[Path] = typer.Option(None, "--pool", help="Candidate images (a table like SAMPLES) to propose replacements from."),
    match: List[str] = typer.Option([], "--match", help="Primary match attributes, comma-separated (default: pronoun/gender, age group, ancestry: those present)."),
    secondary: List[str] = typer.Option([], "--secondary", help="Secondary match attributes, comma-separated (weighed below any primary one)."),
    features: List[str] = typer.Option([], "--features", help="Numeric columns (e.g. image complexity) compared last, comma-separated."),
    apply: bool = typer.Option(False, "--apply", help="Change the files (default: a dry run, which changes nothing, except that it first finishes an earlier --apply that was interrupted, as --apply would, and says so)."),
    replace: bool = typer.Option(False, "--replace", help="Add the proposed replacements to the samples table (needs --pool)."),
    delete_images: bool = typer.Option(False, "--delete-images", help="Delete the subject's image files (default: list them)."),
    store: Optional[Path] = typer.Option(None, "--store", metavar="PATH", help="Results store to remove the subject's rows from (default: $FAIRVISION_STORE, else ~/.cache/fairvision/store)."),
    no_store: bool = typer.Option(False, "--no-store", help="Leave the results store alone."),
    log: Optional[Path] = typer.Option(None, "--log", help="Audit log, JSON Lines, appended to (default: withdrawals.log.jsonl beside SAMPLES)."),
    operator: Optional[str] = typer.Option(None, "--operator", help="Who does the withdrawal, for the log (default: the OS user)."),
    hash_subject: bool = typer.Option(False, "--hash-subject", help="Log the SHA-256 of the subject id, not the id (and no sample ids); the report (-o) then shows no subject or sample id of the withdrawn subjects either."),
    subject_col: Optional[str] = typer.Option(None, "--subject-col", help="Column of the subject id (default subject_id)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Also write a report (report.html, report.json, tables/) to this folder."),
):
    """Withdraw a subject's consent: remove their images and every derived row (samples table, derived files,
    results store) in one all-or-nothing step, append a line to an audit log (hashes, never images), and
    propose optimal replacements from a candidate pool, with the group table before and after
    (docs/METHODS.md §13.5). A dry run unless --apply (it changes nothing, except that an earlier --apply left
    unfinished by a crash is finished or undone first, and reported); a second run is a no-op."""
    if output is not None:
        check_outdir(output)
    if not subject or any(not s.strip() for s in subject):
        raise FairvisionError("give at least one non-empty --subject")
    if replace and pool is None:
        raise FairvisionError("--replace needs a candidate pool (--pool TABLE)")
    if store is not None and no_store:
        raise FairvisionError("give either --store or --no-store, not both")
    # lazy: pandas, scipy, DuckDB and pyarrow cost over a second, ten times the CLI's start-up
    from fairvision.audits.curation.withdraw import apply_withdrawal, plan_withdrawal, recover
    from fairvision.io.store import open_store

    if not samples.is_file():
        raise FairvisionError(f"{samples}: no such file")
    # an interrupted --apply is finished (committed) or undone (not committed) even by a dry run: it restores a
    # consistent dataset before anything is planned, and is reported
    finished = recover(samples)
    if finished:
        typer.echo(f"an interrupted earlier --apply was found and {finished}"
                   + ("" if apply else " (this changed files even though this run is a dry run)"))
    res = open_store(store, enabled=not no_store)
    plan = plan_withdrawal(samples, subject, derived=derived, store=res, pool=pool, match=_split(match) or None,
                           secondary=_split(secondary), features=_split(features), replace=replace,
                           delete_images=delete_images, log=log, subject_col=subject_col)
    who = ", ".join(repr(s) for s in plan.subjects)
    if plan.nothing_to_do:
        when = plan.previous[-1].get("time") if plan.previous else None
        typer.echo(f"nothing to do: subject {who} is in none of the files" +
                   (f" (withdrawn {when}, logged in {plan.log_path})" if when else ""))
        if output is not None:
            _write_report(plan, output, samples=samples, pool=pool, applied=False, hash_subject=hash_subject)
        return
    _print_plan(plan, applied=apply)
    entry = None
    if apply:
        entry = apply_withdrawal(plan, operator=operator, hash_subject=hash_subject)
        typer.echo(f"done; logged in {plan.log_path}" if entry else "nothing to do")
    else:
        typer.echo("dry run: nothing " + ("else " if finished else "") + "was changed (--apply does it)")
    if output is not None:
        _write_report(plan, output, samples=samples, pool=pool, applied=bool(entry), hash_subject=hash_subject)


def _write_report(plan, output: Path, *, samples: Path, pool: Optional[Path], applied: bool, hash_subject: bool) -> None:
    """The report of a withdrawal (also of one with nothing to do): with --hash-subject no withdrawn subject or
    sample id appears in it, as in the log."""
    from fairvision.report import Report
    from fairvision.report.sections.curation_withdraw import withdraw_section

    report = Report(title=f"Consent withdrawal: {samples.name}", subtitle="fairvision curate withdraw",
                    meta={"samples": str(samples), "applied": applied, "log": str(plan.log_path),
                          "pool": str(pool) if pool else None, "subject ids": "hashed" if hash_subject else "shown"})
    report.add(withdraw_section(plan, applied=applied, hash_subject=hash_subject))
    paths = report.write(output)
    typer.echo(f"report: {Path(paths['html']).resolve()}" +
               (" (nothing changed: the report says so)" if plan.nothing_to_do else ""))


def _print_plan(plan, *, applied: bool) -> None:
    verb = "removing" if applied else "would remove"
    typer.echo(f"withdrawal of subject {', '.join(repr(s) for s in plan.subjects)}: {len(plan.sample_ids)} image(s)")
    for f in plan.files:
        typer.echo(f"  {verb} {f.detail}: {f.path}")
    for stage, n in sorted(plan.store_rows.items()):
        typer.echo(f"  {verb} {n} row(s) of stage {stage!r}: results store {plan.store_root}")
    for r in plan.images.itertuples(index=False):
        what = ("deleted" if applied else "would be deleted") if plan.delete_images else "kept (--delete-images removes it)"
        typer.echo(f"  image {r.image_path}: " + (f"sha256 {r.sha256}, {what}" if r.exists else "missing"))
    rep = plan.replacement
    if rep is not None:
        typer.echo(f"replacements from {rep.pool_path} (match on {', '.join(rep.match)}; {rep.n_eligible} of "
                   f"{rep.n_candidates} candidates eligible):")
        for r in rep.pairs.itertuples(index=False):
            if r.sample_id is None:
                typer.echo(f"  {r.withdrawn_sample_id} -> (no candidate left)")
            else:
                typer.echo(f"  {r.withdrawn_sample_id} -> {r.sample_id} ({int(r.primary_mismatches)} primary, "
                           f"{int(r.secondary_mismatches)} secondary mismatches)")
    if plan.groups is not None:
        typer.echo("images per group:")
        typer.echo(plan.groups.to_string())


def register(curate_app: typer.Typer) -> None:
    curate_app.command("withdraw")(withdraw_cmd)
