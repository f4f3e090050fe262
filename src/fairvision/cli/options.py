"""The options every audit command shares, declared once.

``@with_settings("correction", "alpha", ...)`` adds those options to a command and hands the command one
validated :class:`fairvision.audits.settings.AuditSettings` as its ``settings`` parameter, so help text,
defaults and checks are the same in every command. A command whose method has another default (the
retrieval paper's alpha of 0.01, say) passes it as a keyword: ``@with_settings("alpha", alpha=0.01)``.
"""

from __future__ import annotations

import functools
import inspect
from typing import Optional

import typer

from fairvision.audits.settings import DEFAULT_SETTINGS, AuditSettings
from fairvision.stats.constants import METHODS as CORRECTIONS

_PARAM = inspect.Parameter

#: name -> (annotation, flags, help); defaults come from AuditSettings unless a command overrides them
SHARED_OPTIONS = {
    "correction": (str, ("--correction",),
                   f"Multiple-comparison correction: {', '.join(CORRECTIONS)} (holm is the default; bonferroni as FHIBE)."),
    "alpha": (float, ("--alpha",), "Significance level for the corrected p-values."),
    "n_boot": (int, ("--n-boot",), "Bootstrap resamples for confidence intervals (0 = none)."),
    "level": (float, ("--level",), "Confidence level of the intervals."),
    "seed": (int, ("--seed",), "Random seed (bootstrap and every other random step)."),
    "min_subjects": (int, ("--min-subjects",),
                     "Groups with fewer subjects are reported as too small to judge and not tested (FHIBE: 10)."),
    "engine": (str, ("--engine",),
               "Where per-image work runs: local (a process pool on this machine, default) or ray (Ray Data: a "
               "local Ray instance, or the cluster of --address / RAY_ADDRESS; needs the ray extra)."),
    "address": (Optional[str], ("--address",),
                "Ray cluster address for --engine ray (e.g. ray://head:10001 or auto); default: RAY_ADDRESS, "
                "else a local Ray instance with --workers CPUs."),
    "workers": (int, ("--workers", "-j"), "Worker processes for per-image work."),
}

#: library parameter -> command-line flag, for errors that name a parameter
FLAGS = {name: flags[0] for name, (_, flags, _) in SHARED_OPTIONS.items()}


def option(name: str, default=None):
    """The typer option of shared setting ``name`` (default: AuditSettings' own, unless given)."""
    _, flags, help_text = SHARED_OPTIONS[name]
    value = getattr(DEFAULT_SETTINGS, name) if default is None else default
    extra = {"metavar": "ADDR"} if name == "address" else {}
    return typer.Option(value, *flags, help=help_text, **extra)


def with_settings(*names: str, **defaults):
    """Decorate a command: add the shared options ``names`` (declared here once) and pass them to the command
    as one ``settings: AuditSettings`` (built, so validated, before the command runs). Options not named keep
    AuditSettings' defaults, or the ``defaults`` given."""
    unknown = set(names) - set(SHARED_OPTIONS) or set(defaults) - set(SHARED_OPTIONS)
    if unknown:
        raise TypeError(f"not shared options: {', '.join(sorted(unknown))}")

    def wrap(command):
        sig = inspect.signature(command, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "settings"]
        added = [_PARAM(n, _PARAM.KEYWORD_ONLY, default=option(n, defaults.get(n)), annotation=SHARED_OPTIONS[n][0])
                 for n in names]

        def settings_of(kwargs: dict) -> AuditSettings:
            """The command's settings from its parsed options (validated: a bad value names its flag)."""
            shared = {n: kwargs[n] for n in names}
            return AuditSettings(**{n: v for n, v in defaults.items() if n not in shared}, **shared)

        @functools.wraps(command)
        def run(*args, **kwargs):
            settings = settings_of(kwargs)
            for n in names:
                del kwargs[n]
            return command(*args, settings=settings, **kwargs)

        run.settings_of = settings_of  # the start-up checks validate the options before the input paths

        run.__signature__ = sig.replace(parameters=[p.replace(kind=_PARAM.KEYWORD_ONLY) for p in own] + added)
        run.__annotations__ = {**{p.name: p.annotation for p in own}, **{p.name: p.annotation for p in added}}
        return run

    return wrap


def flag_message(message: str, parameter: str) -> str:
    """An error message that starts with a library parameter's name, with the option's flag instead."""
    flag = FLAGS.get(parameter, "--" + parameter.replace("_", "-"))
    return flag + message[len(parameter):] if message.startswith(parameter) else message
