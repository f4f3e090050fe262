"""Prompt sets of the zero-shot probe and the text embeddings made from them (docs/METHODS.md §12.1).

The default prompt sets (``datasets/data/vlm/prompts.toml``) are text only: the user embeds them with the text
encoder of the model that embedded the images (or with ``audit vlm embed``), and the probe reads those
embeddings back with their labels.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, FairvisionError, InputFileError, ParameterError
from fairvision.io.embeddings import npz_array, open_npz, read_embeddings
from fairvision.io.tables import read_raw_table
from fairvision.io.toml import read_toml

EMBED_HINT = ("no CLIP weights ship with fairvision: embed the prompts of the prompt set with the text encoder of "
              "the model that embedded the images")


def default_prompts_path() -> Path:
    """Path of the bundled prompt sets (``datasets/data/vlm/prompts.toml``)."""
    return Path(str(resources.files("fairvision.datasets") / "data" / "vlm" / "prompts.toml"))


def load_prompt_sets(path: str | Path | None = None) -> dict[str, dict[str, list[str]]]:
    """Prompt sets from a TOML file: ``{probe: {label: [prompt, ...]}}`` (docs/METHODS.md §12.1).

    Parameters
    ----------
    path : path-like, optional
        TOML file with one table per probe holding a ``labels`` table of prompt lists; default the bundled
        prompt sets.

    Returns
    -------
    dict
        Probe name -> label -> prompts, in file order.
    """
    path = Path(path) if path is not None else default_prompts_path()
    doc = read_toml(path)
    out: dict[str, dict[str, list[str]]] = {}
    for name, body in doc.items():
        labels = body.get("labels") if isinstance(body, dict) else None
        if not isinstance(labels, dict) or len(labels) < 2:
            raise InputFileError(f"{path}: [{name}] needs a [{name}.labels] table with at least two labels")
        for lab, prompts in labels.items():
            if not isinstance(prompts, list) or not prompts or not all(isinstance(p, str) and p.strip() for p in prompts):
                raise InputFileError(f"{path}: [{name}.labels] {lab}: expected a non-empty list of prompts")
        out[name] = {str(k): list(v) for k, v in labels.items()}
    return out


def read_text_embeddings(source, probe: str | None = None) -> tuple[np.ndarray, list[str], list[str]]:
    """Prompt embeddings with their labels.

    Parameters
    ----------
    source : path-like or DataFrame
        A table (Parquet, CSV, ...) with a ``label`` column, an optional ``prompt`` column, an optional
        ``probe`` column (the combined file of ``audit vlm embed``) and the embedding (one list-valued
        ``embedding`` column or one numeric column per dimension), or an ``.npz`` with arrays ``embeddings``,
        ``labels`` and optionally ``prompts`` (string arrays: save them with ``.astype(str)``).
    probe : str, optional
        With a ``probe`` column, keep only the rows of this prompt set. Without it, a table holding a single
        probe is used whole and one holding several is an error asking for the probe.

    Returns
    -------
    embeddings : numpy.ndarray, shape (n_prompts, d)
    labels, prompts : list of str
    """
    if source is None:
        raise ParameterError("text_embeddings", f"are required: {EMBED_HINT} (prompts: {default_prompts_path()})")
    label = "text embeddings" if isinstance(source, pd.DataFrame) else str(source)
    if not isinstance(source, pd.DataFrame) and Path(source).suffix.lower() == ".npz":
        path = Path(source)
        if not path.is_file():
            raise InputFileError(f"{path}: no such file")
        z = open_npz(path)
        if "labels" not in z.files:
            raise InputFileError(f"{path}: no array named 'labels' (one label per prompt embedding)")
        labels = [str(v) for v in npz_array(z, "labels", path)]
        prompts = [str(v) for v in npz_array(z, "prompts", path)] if "prompts" in z.files else [""] * len(labels)
        x, _ = read_embeddings(path)
    else:
        df = source.copy() if isinstance(source, pd.DataFrame) else read_raw_table(Path(source))
        df.columns = [str(c) for c in df.columns]
        if "label" not in df.columns:
            raise ColumnError(f"{label}: no 'label' column; columns are {', '.join(df.columns)}")
        if "probe" in df.columns:
            have = list(dict.fromkeys(df["probe"].astype(str)))
            if probe is None and len(have) > 1:
                raise ParameterError("probe", f"is needed: {label} holds the prompt embeddings of several probes "
                                              f"({', '.join(have)})")
            if probe is not None:
                if probe not in have:
                    raise InputFileError(f"{label}: no prompt embeddings of probe {probe!r} (probes: {', '.join(have)})")
                df = df.loc[(df["probe"].astype(str) == probe).to_numpy()].reset_index(drop=True)
        if df["label"].isna().any():
            raise ColumnError(f"{label}: row {int(np.flatnonzero(df['label'].isna().to_numpy())[0]) + 1}: empty label")
        labels = df["label"].astype(str).tolist()
        prompts = df["prompt"].astype(str).tolist() if "prompt" in df.columns else [""] * len(df)
        rest = df.drop(columns=[c for c in ("label", "prompt", "probe") if c in df.columns])
        rest.insert(0, "_row", [str(i) for i in range(len(rest))])
        try:
            x, _ = read_embeddings(rest, id_col="_row")
        except FairvisionError as exc:
            raise InputFileError(f"{label}: {str(exc).removeprefix('embeddings: ')}") from None
    if len(labels) != len(x):
        raise InputFileError(f"{label}: {len(labels)} labels for {len(x)} embeddings")
    return x, labels, prompts


def pick_probe(text_labels: list[str], prompt_sets: dict[str, dict[str, list[str]]], probe: str | None, *,
               source: str) -> str | None:
    """The prompt set the text embeddings belong to, checking every label of it has an embedding.

    With ``probe`` None, the set sharing the most labels with the embeddings (None when none shares any:
    the labels of the embeddings are then used as they are)."""
    have = set(text_labels)
    if probe is None:
        overlap = {name: len(have & set(labels)) for name, labels in prompt_sets.items()}
        best = max(overlap, key=overlap.get) if overlap else None
        if best is None or overlap[best] == 0:
            return None
        probe = best
    if probe not in prompt_sets:
        raise ParameterError("probe", f"{probe!r} is not a prompt set of the prompt file ({', '.join(prompt_sets)})")
    missing = [lab for lab in prompt_sets[probe] if lab not in have]
    if missing:
        raise InputFileError(f"{source}: no text embedding for label {missing[0]!r} of prompt set {probe!r}"
                             + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                             + f"; {EMBED_HINT}")
    extra = sorted(have - set(prompt_sets[probe]))
    if extra:
        raise InputFileError(f"{source}: label {extra[0]!r} is not in prompt set {probe!r} "
                             f"(labels: {', '.join(prompt_sets[probe])})")
    return probe
