"""``fairvision power retrieval`` and ``fairvision power model``: plan an audit before results exist.

``retrieval``: from the catalog's distribution of a protected attribute, K and alpha, the power of the
retrieval parity tests at a target nRR against catalog size, and the items each test needs
(docs/METHODS.md §8.3). ``model``: from the subjects in each group and the images per subject, the smallest
difference of a mean or a rate that a corrected comparison of two groups detects (docs/METHODS.md §6.7).
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from fairvision.audits.settings import AuditSettings
from fairvision.cli.common import check_outdir, done
from fairvision.cli.options import with_settings
from fairvision.errors import FairvisionError

power_app = typer.Typer(
    help=("Plan an audit before results exist: the catalog a retrieval audit needs, or the smallest difference "
          "between groups a model audit can detect."),
    no_args_is_help=True,
)


def _number(text: str, flag: str, kind=float):
    try:
        return kind(text)
    except ValueError:
        raise FairvisionError(f"{flag}: {text!r} is not a{'n integer' if kind is int else ' number'}") from None


def _shares(share: list[str], catalog: Optional[Path], attr: Optional[str]) -> dict:
    """The catalog distribution: --share VALUE=SHARE pairs, or the value counts of --attr in --catalog."""
    if share and catalog is not None:
        raise FairvisionError("give either --share or --catalog, not both")
    if catalog is not None:
        if not attr:
            raise FairvisionError("--catalog needs --attr (the column with the protected attribute)")
        from fairvision.io.tables import read_table  # lazy: pandas

        data = read_table(catalog)
        if attr not in data.columns:
            raise FairvisionError(f"{catalog}: no column {attr!r} for --attr; columns are {', '.join(map(str, data.columns))}")
        values = data[attr].dropna()
        values = values[values.astype(str).str.strip() != ""].astype(str)
        if values.empty:
            raise FairvisionError(f"{catalog}: column {attr!r} has no values")
        if len(values) < len(data):
            typer.echo(f"left out: {len(data) - len(values):,} of {len(data):,} catalog items without {attr!r}; "
                       f"shares counted from the other {len(values):,}")
        counts = values.value_counts(sort=False)
        return {k: float(v) / float(counts.sum()) for k, v in counts.sort_index().items()}
    if not share:
        raise FairvisionError("give the catalog distribution: --share VALUE=SHARE (repeat) or --catalog PATH --attr COLUMN")
    out: dict = {}
    for item in share:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise FairvisionError(f"--share: {item!r} is not VALUE=SHARE (e.g. --share dark=0.2)")
        if name.strip() in out:
            raise FairvisionError(f"--share: value {name.strip()!r} given twice")
        v = _number(value, "--share")
        if not 0 < v < 1:
            raise FairvisionError(f"--share: {item!r}: a share must be between 0 and 1")
        out[name.strip()] = v
    total = sum(out.values())
    if len(out) < 2:
        raise FairvisionError("--share: give at least two values")
    if abs(total - 1) > 1e-3:
        raise FairvisionError(f"--share: the shares sum to {total:.4g}, not 1")
    return {k: v / total for k, v in out.items()}


@with_settings("alpha", "seed", alpha=0.01)
def power_retrieval_cmd(
    share: List[str] = typer.Option([], "--share", help="Share of one value of the protected attribute in the catalog, VALUE=SHARE (repeat; the shares sum to 1)."),
    catalog: Optional[Path] = typer.Option(None, "--catalog", help="Instead of --share: a table of the catalog's items (CSV, Parquet, ...); the shares are counted from --attr."),
    attr: Optional[str] = typer.Option(None, "--attr", "-a", help="Column of --catalog with the protected attribute."),
    k: int = typer.Option(6, "--k", "-k", min=1, help="Results per query (K)."),
    target_nrr: float = typer.Option(0.8, "--target-nrr", help="The bias to detect, as a normalised risk ratio in (0, 1): 0.8 is the 80% rule (RR 0.8 and 1.25)."),
    sizes: List[int] = typer.Option([100, 250, 1000, 2500], "--size", help="Catalog sizes of the power curve (repeat)."),
    target_power: float = typer.Option(0.8, "--target-power", help="Power a test must reach."),
    trials: int = typer.Option(1000, "--trials", min=10, help="Monte Carlo trials per point."),
    output: Path = typer.Option(Path("fairvision-power-retrieval"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Before a retrieval audit: the power of its parity tests to detect a bias of --target-nrr against catalog
    size, and the number of catalog items each test needs (docs/METHODS.md §8.3; Khaziev et al., Algorithm 1).

    Every catalog item is also a query, as in the paper's power analysis. Writes report.html (with the power
    curve), report.json and tables/*.parquet.

    Examples:

      fairvision power retrieval --share light=0.6 --share medium=0.3 --share dark=0.1

      fairvision power retrieval --catalog items.csv --attr skin_tone -k 10 --target-nrr 0.9 --alpha 0.05
    """
    check_outdir(output)
    if not 0 < target_nrr < 1:
        raise FairvisionError(f"--target-nrr must be between 0 and 1 (exclusive), got {target_nrr:g}")
    if not 0 < target_power < 1:
        raise FairvisionError(f"--target-power must be between 0 and 1 (exclusive), got {target_power:g}")
    if any(n < 1 for n in sizes):
        raise FairvisionError(f"--size: catalog sizes must be positive, got {min(sizes)}")
    shares = _shares(share, catalog, attr)
    # lazy: numpy, pandas, scipy and the report stack cost about 1.5 s of start-up
    from fairvision.report import Report
    from fairvision.report.sections.power import catalog_power_section
    from fairvision.stats.power_model import CatalogDesign, catalog_plan

    plan = catalog_plan(shares, CatalogDesign(k=k, target_nrr=target_nrr, sizes=tuple(sorted(set(sizes)))),
                        alpha=settings.alpha, target=target_power, trials=trials, seed=settings.seed)
    report = Report(title=title or "Retrieval audit plan", subtitle="fairvision power retrieval",
                    meta={"shares": shares, "K": k, "target nRR": target_nrr, "target power": target_power,
                          "trials": trials, "catalog": str(catalog) if catalog else "(--share)",
                          "settings": settings.to_meta()})
    report.add(catalog_power_section(plan))
    paths = report.write(output)
    omni = plan.needed.loc["omnibus", "n_needed"]
    need = f"about {int(omni):,} items" if omni != float("inf") else "more than 1,000,000 items"
    done(paths, f"omnibus test at nRR = {target_nrr:g}: {need} for {target_power:.0%} power")


def _groups(subjects: list[str], groups: Optional[int]) -> dict:
    """Group -> subjects: NAME=N pairs, N per group, or one N for --groups equal groups."""
    if not subjects:
        raise FairvisionError("give the subjects per group: --subjects N (repeat, one per group) or --subjects N --groups G")
    out: dict = {}
    for i, item in enumerate(subjects):
        name, sep, value = item.rpartition("=")
        name = name.strip() if sep else f"group {i + 1}"
        if name in out:
            raise FairvisionError(f"--subjects: group {name!r} given twice")
        n = _number(value, "--subjects", int)
        if n < 2:
            raise FairvisionError(f"--subjects: {item!r}: a group needs at least 2 subjects")
        out[name] = n
    if groups is not None:
        if len(out) != 1:
            raise FairvisionError("--groups needs exactly one --subjects value (the size of every group)")
        if groups < 2:
            raise FairvisionError(f"--groups must be at least 2, got {groups}")
        n = next(iter(out.values()))
        return {f"group {i + 1}": n for i in range(groups)}
    if len(out) < 2:
        raise FairvisionError("--subjects: give one value per group (at least two), or add --groups G")
    return out


@with_settings("alpha", "correction")
def power_model_cmd(
    subjects: List[str] = typer.Option([], "--subjects", "-n", help="Subjects in one group, N or NAME=N (repeat, one per group); with --groups, the size of every group."),
    groups: Optional[int] = typer.Option(None, "--groups", "-g", help="Number of equal groups of --subjects subjects."),
    images_per_subject: float = typer.Option(1.0, "--images-per-subject", "-m", help="Images per subject (a mean is fine)."),
    icc: float = typer.Option(0.5, "--icc", help="Intraclass correlation of one subject's images (0: independent, 1: copies); design effect 1 + (m - 1) ICC."),
    sd: float = typer.Option(1.0, "--sd", help="Standard deviation of the metric per image (1 gives differences in SD units)."),
    base_rate: float = typer.Option(0.5, "--base-rate", help="Expected rate (accuracy, error rate, ...) of the reference group."),
    power: float = typer.Option(0.8, "--power", help="Chance of detecting the difference."),
    output: Path = typer.Option(Path("fairvision-power-model"), "--output", "-o", help="Output folder for report.html, report.json and tables/."),
    title: Optional[str] = typer.Option(None, "--title", help="Report title."),
    settings: AuditSettings = None,
):
    """Before a model audit: the smallest difference of a mean or a rate between two groups that a two-sided test
    detects with --power at --alpha, corrected over every pair of groups (Bonferroni as the planning bound),
    with images of one subject counted through the design effect (docs/METHODS.md §6.7).

    Writes report.html (with the power curve), report.json and tables/*.parquet.

    Examples:

      fairvision power model --subjects 50 --groups 4 --images-per-subject 3

      fairvision power model -n female=120 -n male=80 --base-rate 0.9 --alpha 0.05 --correction bonferroni
    """
    check_outdir(output)
    sizes = _groups(subjects, groups)
    # lazy: numpy, pandas, scipy and the report stack cost about 1.5 s of start-up
    from fairvision.report import Report
    from fairvision.report.sections.power import model_power_section
    from fairvision.stats.power_model import ModelDesign, plan_model_audit

    plan = plan_model_audit(sizes, ModelDesign(images_per_subject=images_per_subject, icc=icc, sd=sd, base_rate=base_rate),
                            alpha=settings.alpha, power=power, correction=settings.correction)
    report = Report(title=title or "Model audit plan", subtitle="fairvision power model",
                    meta={"subjects": sizes, "images per subject": images_per_subject, "ICC": icc, "SD": sd,
                          "base rate": base_rate, "power": power, "settings": settings.to_meta()})
    report.add(model_power_section(plan))
    paths = report.write(output)
    worst = plan.pairs["mean_difference_sd"].max()
    done(paths, f"{plan.n_tests} pair(s) at alpha {plan.alpha_per_test:.3g} each: smallest detectable mean difference "
                f"up to {worst:.3f} SD, rate rise up to {plan.pairs['rate_rise'].max():.3f} from {base_rate:g}")


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    power_app.command("retrieval")(power_retrieval_cmd)
    power_app.command("model")(power_model_cmd)
    app.add_typer(power_app, name="power")
