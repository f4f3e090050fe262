"""Readers and writers: CSV, Parquet, JSON/JSONL, the FairFace layout, COCO, the results store.

Public names are exported lazily (PEP 562): ``fairvision.io.atomic`` is imported by every command at
start-up and must not pull in pandas (about 0.3 s) through this package.
"""

from fairvision._lazy import lazy_exports

_EXPORTS = {
    "read_raw_table": "tables",
    "read_table": "tables",
    "write_table": "tables",
    "validate_sample_table": "tables",
    "atomic_output_dir": "atomic",
    "atomic_write_bytes": "atomic",
    "atomic_write_text": "atomic",
    "check_writable": "atomic",
}

__all__ = sorted(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
