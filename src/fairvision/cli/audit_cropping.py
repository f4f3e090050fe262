"""``fairvision audit cropping``: Elo ratings of faces from a saliency cropper's choices, compared by group
(docs/METHODS.md §6.9).

Reads the games table that ``fairvision benchmark cropping run`` writes (or a table of a, b, winner with a groups
table), rates every face over random orders of the games, and reports the ratings by group, the pairwise
comparisons, direct win rates and position bias.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.gates import evaluate_conditions, gate_meta, parse_condition
from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done, exit_if_gates_failed
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError, InputFileError

#: files looked for, in this order, when GAMES is a folder (the output folder of ``benchmark cropping run``)
GAMES_FILES = ("games.parquet", "games.csv")


def games_file(path: Path) -> Path:
    """GAMES itself, or the games table inside a run folder."""
    path = Path(path)
    if not path.is_dir():
        return path
    for name in GAMES_FILES:
        if (path / name).is_file():
            return path / name
    raise InputFileError(f"{path}: a folder without {' or '.join(GAMES_FILES)}")


@with_settings("min_subjects", "correction", "alpha", "n_boot", "level", "seed")
def audit_cropping_cmd(
    games: Path = typer.Argument(..., metavar="GAMES", help="Games table (CSV, TSV, Parquet, JSON/JSONL) from 'fairvision benchmark cropping run', or its output folder; or any table with columns a, b, winner (the kept face, empty when none) together with --groups."),
    output: Path = typer.Option(Path("fairvision-cropping-report"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    groups: Optional[Path] = typer.Option(None, "--groups", help="Groups table with sample_id and a group column (and optionally subject_id): the group of every face; used instead of the games table's top_group and bottom_group."),
    group_col: str = typer.Option("group", "--group-col", help="Group column of --groups."),
    attribute: Optional[str] = typer.Option(None, "--attribute", help="The attribute to audit when the games table holds games of several (its attribute column)."),
    orders: int = typer.Option(100, "--orders", min=0, help="Random orders of the games the ratings are averaged over (0 = the table's order only)."),
    elo_m: float = typer.Option(400.0, "--elo-m", help="Elo scale M: a difference of M points means 10 to 1 odds."),
    elo_k: float = typer.Option(16.0, "--elo-k", help="Elo update factor K."),
    initial: float = typer.Option(1400.0, "--initial", help="Initial Elo rating of every face."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit with status 1 after writing the report when a condition holds, e.g. 'max_preference_pct>55', 'max_win_pct>60' (direct games), 'significant>0', 'min_pvalue<0.05', 'position_share>0.7'. Repeat: any one failing fails."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Audit a saliency cropper for group bias: every composite of two faces is a game won by the face the crop
    kept; each face gets an Elo rating averaged over random orders of the games, and the report compares the
    groups' mean ratings (bootstrap intervals over subjects and orders, corrected t-tests), gives the preference
    each difference implies, the direct win rates of every pair of groups and the position bias (how often the
    top face is kept). Games without a winner are counted, not rated. --fail-if gates a CI pipeline.

    Example:
      fairvision audit cropping bench/run/games.csv -o crop-audit --fail-if 'significant>0'
    """
    check_outdir(output)
    conditions = [parse_condition(c) for c in fail_if]  # check syntax before the work
    for flag, value in (("--elo-m", elo_m), ("--elo-k", elo_k)):
        if not (math.isfinite(value) and value > 0):
            raise FairvisionError(f"{flag} must be a positive number, not {value!r}")
    path = games_file(games)
    paths, result, evaluated = run_cropping_audit(path, output, groups=groups, group_col=group_col, attribute=attribute,
                                                  n_orders=orders, m=elo_m, k=elo_k, initial=initial,
                                                  settings=settings, conditions=conditions, title=title)
    typer.echo(result.coverage.summary_line())
    q = result.quantities()
    n_sig = int(q["significant"])
    def share(v: float) -> str:
        return f"{v:.1f}%" if math.isfinite(v) else "n/a"

    extra = (f"{result.n_games:,} games, {len(result.players):,} faces, {len(result.groups)} groups; largest Elo "
             f"preference {share(q['max_preference_pct'])} (direct games: a group won up to "
             f"{share(q['max_win_pct'])}), {n_sig} pair{'' if n_sig == 1 else 's'} of groups "
             f"differ{'s' if n_sig == 1 else ''}; {result.position_name} face kept in "
             f"{100 * q['position_share']:.1f}% of games")
    done(paths, extra)
    exit_if_gates_failed(evaluated)


def run_cropping_audit(games, output, *, groups=None, group_col="group", attribute=None, n_orders=100, m=400.0,
                       k=16.0, initial=1400.0, settings=None, conditions=(), title=None):
    """Read, audit and write the report; returns ``(paths, result, evaluated_conditions)``."""
    # lazy: pandas, scipy and the report stack cost about 1.5 s, ten times the CLI's start-up
    from fairvision.audits.cropping import audit_cropping
    from fairvision.io.tables import read_table
    from fairvision.report import Report
    from fairvision.report.sections.coverage import coverage_section
    from fairvision.report.sections.cropping import cropping_section

    data = read_table(games)
    group_table = read_table(groups) if groups is not None else None
    result = audit_cropping(data, groups=group_table, group_col=group_col, attribute=attribute, m=m, k=k,
                            initial=initial, n_orders=n_orders, settings=settings, source=str(games),
                            groups_source=str(groups))
    evaluated = evaluate_conditions(list(conditions), result.quantities()) if conditions else []
    report = Report(
        title=title or f"Cropping audit: {Path(str(games)).name}",
        subtitle="fairvision cropping audit",
        meta={"games": str(games), "groups": str(groups) if groups else None, "attribute": result.attribute,
              "elo": {"m": m, "k": k, "initial": initial, "orders": n_orders},
              "settings": result.settings.to_meta(), **gate_meta(evaluated)},
    )
    report.add(cropping_section(result, conditions=evaluated))
    if result.n_left_out:
        report.add(coverage_section(result.coverage, id="cropping-coverage", title="Games left out, by pair of groups"))
    paths = report.write(output)
    return paths, result, evaluated


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    audit_app.command("cropping")(audit_cropping_cmd)
