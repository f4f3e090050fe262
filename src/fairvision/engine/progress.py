"""Progress of a map for its caller: a rich bar on a terminal, or calls of a function of the caller's."""

from __future__ import annotations


def progress_reporter(progress, total: int, label: str):
    """``(callback(outcome), close())`` of a map's progress: ``progress`` True (a rich bar on stderr, named
    ``label``, on a terminal only), False (none) or a callable ``progress(done, total)``."""
    if callable(progress):
        state = {"done": 0}

        def cb(_):
            state["done"] += 1
            progress(state["done"], total)

        return cb, lambda: None
    if not progress:
        return None, lambda: None
    from rich.console import Console  # lazy: rich.progress is 20-50 ms to import (measured), for a bar only
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    console = Console(stderr=True)
    if not console.is_terminal:  # off a terminal a bar only leaves a blank line in the log
        return None, lambda: None
    bar = Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
        console=console, transient=True,
    )
    try:
        bar.start()
    except Exception:  # rich.errors.LiveError: another live display (a status spinner) is active
        return None, lambda: None
    task = bar.add_task("skin", total=total)
    return (lambda _: bar.advance(task)), bar.stop
