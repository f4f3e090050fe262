"""What every command does before its own work: help that fits the terminal, and the cheap checks.

Help layout: typer's rich panels need about 100 columns; in a narrower terminal their help column shrinks to a
few characters and rich cuts long words (defaults, paths, examples) with an ellipsis. Below
:data:`RICH_HELP_COLUMNS` the help is click's plain layout instead, wrapped at spaces only (:func:`wrap_help`),
which cuts nothing, and the command lists show the whole first paragraph of each command's help, as the rich
panels do.

Start-up checks (:func:`checked_first`): before a command runs (and so before it imports pandas, numpy, torch
or mediapipe, which take 0.5 to 3 s), its input paths must exist and ``$FAIRVISION_MAX_PIXELS`` must be a
positive whole number, so that a typo is one line on stderr at once rather than after the imports.
"""

from __future__ import annotations

import functools
import inspect
import re
import shutil
import textwrap
from pathlib import Path

import typer
from typer.core import TyperCommand, TyperGroup
from typer.models import DefaultPlaceholder

from fairvision.errors import InputFileError
from fairvision.io.limits import env_max_pixels

#: the narrowest terminal that gets typer's rich help panels; narrower ones get click's plain layout
RICH_HELP_COLUMNS = 100

#: parameters that name something a command writes or creates: never checked for existence
OUTPUT_PARAMETERS = frozenset({"output", "outdir", "store", "cache", "overlays", "save_groups", "strip_to", "log"})
#: values of an image source that name bundled data rather than a path
BUNDLED_SOURCES = frozenset({"portraits", "demo"})


def help_columns() -> int:
    """The terminal's width in columns (``$COLUMNS`` first, as rich and click read it; 80 when unknown)."""
    return shutil.get_terminal_size((80, 24)).columns


def wrap_help(text: str, width: int, indent: str = "") -> str:
    """Help text as click's plain layout shows it, but wrapped only at spaces (no word is cut, and a flag such
    as ``--measure-skin`` is never split at its hyphen), with indented lines (examples) kept as written."""
    wrapper = textwrap.TextWrapper(width=max(width, 20), initial_indent=indent, subsequent_indent=indent,
                                   break_long_words=False, break_on_hyphens=False)
    text = re.sub(r"\[default: [^\]]*\]", lambda m: m[0].replace(" ", "\0"), text)  # kept on one line
    out = []
    for para in re.split(r"\n[ \t]*\n", text.strip("\n")):
        lines, prose = [], []
        raw = para.splitlines()
        if raw and raw[0].strip() == "\b":  # click's marker of a block that is not rewrapped
            out.append("\n".join(indent + ln.rstrip() for ln in raw[1:]))
            continue
        for line in raw:
            if line[:1].isspace():
                if prose:
                    lines.append(wrapper.fill(" ".join(prose)))
                    prose = []
                lines.append(indent + line.rstrip())
            else:
                prose.append(line.strip())
        if prose:
            lines.append(wrapper.fill(" ".join(prose)))
        out.append("\n".join(lines))
    return "\n\n".join(out).replace("\0", " ")


class _PlainText:
    """Mixed into click's help formatter: prose through :func:`wrap_help` instead of click's wrapper, which
    splits words at hyphens and joins the lines of examples."""

    def write_text(self, text: str) -> None:
        self.write(wrap_help(text, self.width, " " * self.current_indent) + "\n")

    def write_dl(self, rows, col_max: int = 30, col_spacing: int = 2) -> None:
        rows = list(rows)
        first_col = min(max((len(r[0]) for r in rows), default=0), col_max) + col_spacing
        pad = " " * (first_col + self.current_indent)
        for first, second in rows:
            self.write(f"{'':>{self.current_indent}}{first}")
            if not second:
                self.write("\n")
                continue
            self.write(" " * (first_col - len(first)) if len(first) <= first_col - col_spacing else "\n" + pad)
            lines = wrap_help(second, max(self.width - first_col - 2, 10)).splitlines() or [""]
            self.write(lines[0] + "\n" + "".join(f"{pad}{ln}\n" if ln else "\n" for ln in lines[1:]))


class _FittedHelp:
    """Rich help panels when they fit (:data:`RICH_HELP_COLUMNS`), else click's plain layout (:class:`_PlainText`)."""

    def format_help(self, ctx, formatter) -> None:
        if help_columns() >= RICH_HELP_COLUMNS:
            return super().format_help(ctx, formatter)
        plain = type("PlainFormatter", (_PlainText, type(formatter)), {})(width=formatter.width)
        saved, self.rich_markup_mode = self.rich_markup_mode, None
        try:
            super().format_help(ctx, plain)
        finally:
            self.rich_markup_mode = saved
        formatter.write(plain.getvalue())


class Command(_FittedHelp, TyperCommand):
    """A command whose help fits the terminal."""


def summary(cmd) -> str:
    """What a command list says of ``cmd``: its ``short_help``, else the first paragraph of its help, whole (as
    the rich panels show it; click would cut it at 45 characters or at the first word ending in a full stop,
    such as "et al.")."""
    text = inspect.cleandoc(cmd.short_help or cmd.help or "")
    return " ".join(re.split(r"\n[ \t]*\n", text, maxsplit=1)[0].split())


class Group(_FittedHelp, TyperGroup):
    """A command group whose help fits the terminal and lists the first paragraph of each command's help."""

    def format_commands(self, ctx, formatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, summary(cmd)))  # the formatter wraps it
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def fit_help(typer_app: typer.Typer) -> None:
    """Give every command and group of ``typer_app`` (recursively) the help layout of :class:`Command` / :class:`Group`."""
    for cmd in typer_app.registered_commands:
        cmd.cls = cmd.cls if cmd.cls not in (None, TyperCommand) else Command
    for group in typer_app.registered_groups:
        chosen = [c for c in (group.cls, group.typer_instance.info.cls) if not isinstance(c, DefaultPlaceholder)]
        if not chosen or chosen[0] in (None, TyperGroup):  # a group class of a command's own is left as it is
            group.cls = Group
        fit_help(group.typer_instance)


def _is_path(annotation) -> bool:
    text = annotation if isinstance(annotation, str) else str(annotation)
    return "Path" in text or annotation is Path


def input_paths(callback) -> dict[str, str]:
    """The parameters of a command that name files or folders it reads: ``{parameter: how the user gave it}``
    (an option's long flag, or an argument's metavar). Outputs (:data:`OUTPUT_PARAMETERS`, or a folder "created
    if needed") are left out."""
    out = {}
    for p in inspect.signature(callback).parameters.values():
        info = p.default
        if not isinstance(info, typer.models.ParameterInfo) or not _is_path(p.annotation):
            continue
        if p.name in OUTPUT_PARAMETERS or "created if needed" in (info.help or ""):
            continue
        if isinstance(info, typer.models.ArgumentInfo):
            out[p.name] = info.metavar or p.name.upper()
        else:
            decls = [d for d in (info.param_decls or ()) if d.startswith("--")]
            out[p.name] = decls[0] if decls else "--" + p.name.replace("_", "-")
    return out


def _missing(value) -> bool:
    """A path given on the command line that does not exist (patterns, bundled names and URLs are the
    command's own business)."""
    text = str(value)
    if not text or text in BUNDLED_SOURCES or "://" in text or any(c in text for c in "*?[{"):
        return False
    return not Path(text).exists()


def check_input_paths(values: dict, given: dict[str, str], helps: dict[str, str]) -> None:
    """Raise :class:`InputFileError` for the first input path that does not exist: ``"<path>: no such file or
    folder"``, with the option's flag (``"<path>: no such masks folder (--masks)"`` for an option whose help
    says it is a folder)."""
    for name, how in given.items():
        value = values.get(name)
        for v in (value if isinstance(value, (list, tuple)) else [value]):
            if v is None or not _missing(v):
                continue
            if not how.startswith("--"):
                raise InputFileError(f"{v}: no such file or folder")
            noun = "file or folder"
            if helps.get(name, "").lower().startswith("folder"):
                noun = how.lstrip("-").removesuffix("-dir").replace("-", " ") + " folder"
            raise InputFileError(f"{v}: no such {noun} ({how})")


def checked_first(callback, *, environment: bool = True):
    """``callback`` (a command) wrapped so that, before it runs, ``$FAIRVISION_MAX_PIXELS`` is checked (unless
    ``environment`` is False), then its shared options (``@with_settings``), then that every input path it was
    given exists (:func:`check_input_paths`)."""
    given = input_paths(callback)
    sig = inspect.signature(callback)
    helps = {n: (sig.parameters[n].default.help or "") for n in given}

    settings_of = getattr(callback, "settings_of", None)  # commands with shared options (cli/options.py)

    @functools.wraps(callback)
    def run(*args, **kwargs):
        if environment:
            env_max_pixels()  # a bad value is an error before any work, not at the first image
        values = sig.bind_partial(*args, **kwargs).arguments
        if settings_of is not None:
            settings_of(values)  # a bad --alpha or --workers is named before a missing input
        check_input_paths(values, given, helps)
        return callback(*args, **kwargs)

    return run  # its signature is the callback's (functools.wraps), which typer reads


def check_first(typer_app: typer.Typer) -> None:
    """Wrap every command of ``typer_app`` (recursively) with :func:`checked_first`. A command whose callback
    has ``reports_environment = True`` (``doctor``) reports the environment instead of refusing it."""
    for cmd in typer_app.registered_commands:
        if cmd.callback is not None and not getattr(cmd.callback, "fairvision_checked", False):
            wrapped = checked_first(cmd.callback, environment=not getattr(cmd.callback, "reports_environment", False))
            wrapped.fairvision_checked = True
            cmd.callback = wrapped
    for group in typer_app.registered_groups:
        check_first(group.typer_instance)
