"""``fairvision curate ...``: responsible-curation commands (docs/METHODS.md §13).

Each command lives in its own module (``curate_diversity``, ``curate_visual``, ``curate_agreement``,
``curate_withdraw``, ``curate_faces``, ``curate_qa``, ``curate_release``, ``curate_inpaint``, ``curate_exclusions``) with a ``register(curate_app)`` function, so this
module stays a list and every command imports its heavy dependencies only when it runs.
"""

from __future__ import annotations

import importlib

import typer

curate_app = typer.Typer(
    help=("Curate a human-centric image dataset responsibly: diversity beyond head counts, visual statistics "
          "by group, annotation agreement, consent withdrawal with balanced replacement, derived face sets, "
          "image quality and collection-guideline checks with known-content matching, a privacy-checked release, "
          "in-painting of bystanders, and what exclusions do to the demographics."),
    no_args_is_help=True,
)

COMMANDS = ("curate_diversity", "curate_visual", "curate_agreement", "curate_withdraw", "curate_faces", "curate_qa",
            "curate_release", "curate_inpaint", "curate_exclusions")


def register(app: typer.Typer, audit_app: typer.Typer) -> None:
    for name in COMMANDS:
        importlib.import_module(f"fairvision.cli.{name}").register(curate_app)
    app.add_typer(curate_app, name="curate")
