"""The bundled demo data: a balanced FairFace sample and CC0 portraits."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pandas as pd

from fairvision.errors import InputFileError
from fairvision.io.suffixes import IMAGE_SUFFIXES, folder_images
from fairvision.io.tables import IMAGE_PATH, SAMPLE_ID, read_table
from fairvision.schema import Schema, fairface_schema


def demo_path(name: str = "") -> Path:
    """Path of the bundled data folder (``fairface``, ``portraits``) or a file in it."""
    root = Path(str(resources.files("fairvision.datasets") / "data"))
    return root / name if name else root


def load_demo(*, with_schema: bool = False) -> pd.DataFrame | tuple[pd.DataFrame, Schema]:
    """The FairFace demo sample: 540 images, 9 age groups x 2 genders, 30 each.

    Returns
    -------
    pandas.DataFrame
        Columns ``sample_id``, ``image_path`` (absolute), ``age`` (ordered
        categorical, FairFace's 9 groups) and ``gender``. With
        ``with_schema=True`` also the :class:`~fairvision.schema.Schema`
        declaring those categories.

    Notes
    -----
    Labels come from FairFace's annotators (CC BY 4.0, Karkkainen and Joo,
    WACV 2021). FairFace photos are one per person, so ``sample_id`` is also
    the subject.
    """
    df = read_table(demo_path("fairface") / "ground_truth.json")
    schema = fairface_schema()
    for attr in schema:
        df[attr.name] = pd.Categorical(df[attr.name], categories=list(attr.categories), ordered=attr.ordered)
    return (df, schema) if with_schema else df


def load_portraits() -> pd.DataFrame:
    """The 62 CC0 portraits (500 x 500, no labels) as a sample table."""
    return from_folder(demo_path("portraits"))


def from_folder(folder: str | Path, *, recursive: bool = False) -> pd.DataFrame:
    """A sample table of every image in ``folder`` (``sample_id`` = relative path without suffix)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputFileError(f"{folder}: no such folder")
    files = folder_images(folder, recursive=recursive)
    if not files:
        raise InputFileError(f"{folder}: no images ({', '.join(IMAGE_SUFFIXES)}) found")
    ids = [str(p.relative_to(folder).with_suffix("")) for p in files]
    first: dict[str, Path] = {}
    for sid, p in zip(ids, files):
        if sid in first:
            raise InputFileError(f"{folder}: {first[sid].name} and {p.name} have the same name without suffix "
                                 f"({sid!r}, the sample_id); rename one, or list the images in a table with a "
                                 f"sample_id column")
        first[sid] = p
    return pd.DataFrame({SAMPLE_ID: ids, IMAGE_PATH: [str(p) for p in files]})
