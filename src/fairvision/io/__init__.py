"""Readers and writers: CSV, Parquet, JSON/JSONL, the FairFace layout and COCO."""

from fairvision.io.tables import read_raw_table, read_table, write_table, validate_sample_table
from fairvision.io.atomic import atomic_output_dir, atomic_write_bytes, atomic_write_text

__all__ = [
    "read_raw_table",
    "read_table",
    "write_table",
    "validate_sample_table",
    "atomic_output_dir",
    "atomic_write_bytes",
    "atomic_write_text",
]
