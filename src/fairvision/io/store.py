"""The embedded results store: per-image results of every stage, kept across runs.

Layout: one folder per stage under the store's root, holding immutable Parquet part files::

    <root>/<stage>/part-<time_ns>-<pid>-<random>.parquet
    <root>/.lock           (fcntl.flock: shared for reads and appends, exclusive for vacuum / forget)
    <root>/.journal.json   (only while a vacuum or forget commits)
    <root>/run-memo/       (whole-run memo entries, :mod:`fairvision.io.run_memo`: not a stage; forget clears it)

Every row has the same columns (:data:`SCHEMA`): ``key`` (what the row is a result *of*: a SHA-256 of the input's
content hash and the stage's ``params_hash``), ``stage``, ``content_hash`` (SHA-256 of the image bytes, see
:func:`file_sha256`), ``params_hash`` (a hash of the stage's code and parameters, made by the caller with
:func:`fairvision.engine.cache.content_key`), ``sample_id``, ``subject_id`` (when known: consent withdrawal
removes by it), ``image_path``, ``created`` (UTC) and ``payload`` (the result as a JSON object). A changed image
or parameter is a different key, so nothing ever needs invalidating.

Writes are batched appends: :meth:`ResultsStore.put` buffers rows and :meth:`ResultsStore.flush` writes them as a
new part file, first under a temporary (dot-prefixed) name, then ``os.replace``-d into place, so a reader never
sees half a part and a killed run loses at most its unflushed batch. Part names are unique (time, pid, random), so
two runs can append at once.

Vacuum (compaction, dropping superseded duplicates) and forget (removing a subject) rewrite parts under the
exclusive lock and commit through a journal (:mod:`fairvision.io.durable`, the commit consent withdrawal uses
too): the new parts are written and synced under temporary names, then the journal (renames and deletions) is
written atomically and synced, then applied. A run killed before the journal exists leaves the store as it was;
one killed after it is finished by the next process that takes the lock. Readers take the shared lock, so they
never see a commit half-applied.

Queries (:meth:`ResultsStore.query`) run DuckDB over one view per stage, named after the stage, with the payload's
fields as columns. They are read-only: one SELECT statement (checked with DuckDB's own parser), run on a
connection that may open no file but the store's own parts, load no extension and change no setting. The store
reads only its own parts: a file in a stage folder whose name is not one the store gives
(:data:`PART_NAME`), that is not readable Parquet, or whose columns are not :data:`SCHEMA` is ignored by every
read, left alone by vacuum and forget, and reported (:meth:`ResultsStore.foreign_parts`,
:class:`ForeignPartsWarning`).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import io as _io
import json
import os
import re
import time
import uuid
import warnings
from pathlib import Path
from typing import Iterable, Iterator

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from fairvision.errors import FairvisionError
from fairvision.io.atomic import atomic_write_bytes
from fairvision.io.durable import Journal, write_synced
from fairvision.io.jsonable import to_jsonable
from fairvision.io.run_memo import clear_memos
from fairvision.io.store_files import (  # noqa: F401 - PART_NAME, STORE_ENV: public names of this module too
    JOURNAL_NAME, LOCK_NAME, PART_NAME, STORE_ENV, default_store_root, local_file_sha256, store_lock,
)
from fairvision.io.webdataset import is_member_ref, member_sha256

#: Parquet schema of every part file
SCHEMA = pa.schema(
    [(c, pa.string()) for c in ("key", "stage", "content_hash", "params_hash", "sample_id", "subject_id", "image_path")]
    + [("created", pa.timestamp("us")),  # UTC (naive: DuckDB returns tz-aware values only with pytz)
       ("payload", pa.string())])
META_COLUMNS = tuple(SCHEMA.names)
#: rows that are the same result for the same sample: vacuum keeps the newest of each
IDENTITY = ("key", "sample_id", "subject_id")
#: crash point of a vacuum / forget commit, counted by renames (:func:`fairvision.io.durable.crash_point`)
CRASH_AFTER_RENAMES = "store.after_renames"
_STAGE_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")

_PART_PROBLEMS: dict[tuple, str | None] = {}  # why a file is not a part of the store's (None: it is), by the same
_WARNED: set[tuple] = set()  # foreign files already warned about in this process, by store folder


class ForeignPartsWarning(UserWarning):  # a stage folder holds files the store did not write; they are ignored
    pass


def open_store(root: str | os.PathLike | None = None, *, enabled: bool = True) -> "ResultsStore | None":
    """The store at ``root`` (default :func:`default_store_root`), or None when ``enabled`` is False."""
    if not enabled:
        if root is not None:
            raise FairvisionError("give either a store folder or no store (enabled=False), not both")
        return None
    return ResultsStore(default_store_root() if root is None else root)


def file_sha256(path: str | os.PathLike) -> str | None:
    """SHA-256 of a file's bytes (None when it cannot be read), remembered for this process
    (:func:`fairvision.io.store_files.local_file_sha256`), so a folder is hashed once per run however often it is
    asked for. A WebDataset member reference (``tar://...``) hashes the member's bytes, so every command that keys
    results by image content reads shards too."""
    if is_member_ref(path):
        return member_sha256(path)
    return local_file_sha256(path)


def sha256_hex(data: bytes) -> str:
    """SHA-256 of bytes already in memory, hex (the digest :func:`file_sha256` gives for a file of them)."""
    return hashlib.sha256(data).hexdigest()


def row_key(content_hash: str, params_hash: str, *extra) -> str:
    """The key of a result: SHA-256 of the input's content hash, the stage's code-and-parameters hash
    and any other per-item input (e.g. the hash of a supplied mask)."""
    blob = json.dumps([content_hash, params_hash, *extra], default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def check_stage(stage: str) -> str:
    if not isinstance(stage, str) or not _STAGE_RE.match(stage):
        raise FairvisionError(f"bad stage name {stage!r}: use lower-case letters, digits and '_', starting with a letter")
    return stage


def _sql_str(s: str | os.PathLike) -> str:
    return "'" + str(s).replace("'", "''") + "'"


def _sql_list(paths: Iterable[str | os.PathLike]) -> str:
    return "[" + ", ".join(_sql_str(p) for p in paths) + "]"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip() or type(exc).__name__).splitlines()[0]


def part_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` is not one of the store's own parts, or None when it is: a name the store never gives
    (:data:`PART_NAME`), a file that is not readable Parquet, or columns that are not :data:`SCHEMA` (only the
    file's footer is read, once per process: parts never change)."""
    path = Path(path)
    if not PART_NAME.match(path.name):
        return "not a name the store gives its parts"
    try:
        st = path.stat()
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    sig = (os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)
    if sig not in _PART_PROBLEMS:
        try:
            schema = pq.read_schema(path)
        except (pa.ArrowException, OSError, ValueError):
            problem = "not a readable Parquet file"
        else:
            names = ", ".join(schema.names[:4]) + (", ..." if len(schema.names) > 4 else "")
            problem = None if schema.equals(SCHEMA, check_metadata=False) else f"columns ({names}) not the store's"
        _PART_PROBLEMS[sig] = problem
    return _PART_PROBLEMS[sig]


def check_select(sql: str) -> str:
    """``sql`` when it is exactly one SELECT statement (``WITH ... SELECT``, ``FROM ...``, ``VALUES`` and
    ``DESCRIBE`` / ``SUMMARIZE`` are SELECTs too, by DuckDB's parser); a :class:`FairvisionError` otherwise."""
    try:
        statements = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise FairvisionError(f"query failed: {_first_line(exc)}") from None
    if len(statements) != 1:
        raise FairvisionError(f"a store query is one SELECT statement; this text holds {len(statements)} statements"
                              if statements else "empty query")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        name = {"LOAD": "INSTALL or LOAD", "VARIABLE_SET": "SET"}.get(kind.name, kind.name)
        raise FairvisionError(f"a store query is read-only: one SELECT statement over the stages' views, not {name}")
    return sql


class ResultsStore:
    """Per-image results of every stage in Parquet parts under ``root`` (see the module docstring).

    Parameters
    ----------
    root : path
        Store folder (created on the first write).
    batch_rows : int
        Buffered rows that trigger a flush (a new part file).
    flush_seconds : float
        A :meth:`put` this long after the last flush flushes too, so a slow run keeps its results.
    """

    def __init__(self, root: str | os.PathLike, *, batch_rows: int = 256, flush_seconds: float = 2.0):
        self.root = Path(root).expanduser()
        if self.root.exists() and not self.root.is_dir():
            raise FairvisionError(f"{self.root}: the results store must be a folder")
        self.batch_rows = max(1, int(batch_rows))
        self.flush_seconds = float(flush_seconds)
        self._buffer: list[dict] = []
        self._last_flush = time.monotonic()
        self.written = 0  # rows flushed by this object

    def __repr__(self) -> str:
        return f"ResultsStore({str(self.root)!r})"

    def __enter__(self) -> "ResultsStore":
        return self

    def __exit__(self, *exc) -> None:
        self.flush()

    # ------------------------------------------------------------------ locking

    def _lock(self, exclusive: bool = False, *, create: bool = True, blocking: bool = True):
        """Hold the store's lock (shared or exclusive; :func:`fairvision.io.store_files.store_lock`)."""
        return store_lock(self.root, exclusive, create=create, blocking=blocking)

    def _journal(self) -> Journal:
        return Journal(self.root / JOURNAL_NAME, base=self.root)

    def _commit(self, renames: list[tuple[Path, Path]], deletions: list[Path]) -> None:
        """Under the exclusive lock: apply renames (temporary -> final) and deletions all or nothing."""
        rel = lambda p: str(Path(p).relative_to(self.root))  # noqa: E731
        journal = self._journal()
        record = {"rename": [[rel(a), rel(b)] for a, b in renames], "delete": [rel(p) for p in deletions]}
        journal.write(record)  # the commit point
        journal.roll_forward(record, crash=CRASH_AFTER_RENAMES)
        journal.remove()

    # ------------------------------------------------------------------ layout

    def _stage_dirs(self) -> list[Path]:
        is_stage = lambda p: p.is_dir() and _STAGE_RE.match(p.name)  # noqa: E731
        return sorted(filter(is_stage, self.root.iterdir())) if self.root.is_dir() else []

    def _scan(self, stage_dir: Path) -> tuple[list[Path], list[tuple[Path, str]]]:
        """The store's own parts in a stage folder, and its other files with why (dot-files: temporaries)."""
        own, foreign = [], []
        with contextlib.suppress(OSError):
            for p in sorted(stage_dir.iterdir()):
                if p.name.startswith("."):
                    continue
                problem = "a folder" if p.is_dir() else part_problem(p)
                (foreign.append((p, problem)) if problem else own.append(p))
        return own, foreign

    def stages(self) -> list[str]:
        """Stages that have at least one part of the store's own."""
        return [d.name for d in self._stage_dirs() if self._scan(d)[0]]

    def parts(self, stage: str) -> list[Path]:
        """The store's own parts of ``stage`` (other files in its folder are ignored: :meth:`foreign_parts`)."""
        return self._scan(self.root / check_stage(stage))[0]

    def foreign_parts(self, stage: str | None = None) -> list[tuple[Path, str]]:
        """Files in the stage folders (or ``stage``'s) not written by the store, with why: ignored by every read."""
        dirs = [self.root / check_stage(stage)] if stage is not None else self._stage_dirs()
        return [f for d in dirs for f in self._scan(d)[1]]

    def foreign_message(self, foreign: list[tuple[Path, str]]) -> str:
        """One line naming (up to three of) ``foreign`` files and why each is not the store's."""
        named = "; ".join(f"{p.relative_to(self.root)} ({why})" for p, why in foreign[:3])
        return (f"{self.root}: {len(foreign)} file(s) in the results store not written by it, ignored: {named}"
                + (f"; and {len(foreign) - 3} more" if len(foreign) > 3 else ""))

    def _warn_foreign(self, stage: str | None = None) -> None:
        foreign = self.foreign_parts(stage)
        if foreign and (sig := (os.path.abspath(self.root), *(str(p) for p, _ in foreign))) not in _WARNED:
            _WARNED.add(sig)
            warnings.warn(self.foreign_message(foreign), ForeignPartsWarning, stacklevel=3)

    def _source(self, stage: str, *, filename: bool = False) -> tuple[str, list[str]]:
        """``read_parquet`` of the stage's own parts (absolute paths), and those paths."""
        files = [os.path.abspath(p) for p in self.parts(stage)]
        return f"read_parquet({_sql_list(files)}{', filename=true' if filename else ''})", files

    def _new_part_name(self, stage: str) -> Path:
        return self.root / stage / f"part-{time.time_ns():020d}-{os.getpid()}-{uuid.uuid4().hex[:12]}.parquet"

    @staticmethod
    def _parquet_bytes(table: pa.Table) -> bytes:
        buf = _io.BytesIO()
        pq.write_table(table, buf, compression="zstd")
        return buf.getvalue()

    # ------------------------------------------------------------------ writes

    def put(self, stage: str, key: str, payload: dict, *, content_hash: str | None = None,
            params_hash: str | None = None, sample_id=None, subject_id=None, image_path=None) -> None:
        """Buffer one result (flushed in batches; :meth:`flush` writes what is left)."""
        self._buffer.append({
            "key": key, "stage": check_stage(stage), "content_hash": content_hash, "params_hash": params_hash,
            "sample_id": None if sample_id is None else str(sample_id),
            "subject_id": None if subject_id is None or pd.isna(subject_id) else str(subject_id),
            "image_path": None if image_path is None else str(image_path),
            "created": dt.datetime.now(dt.timezone.utc).replace(tzinfo=None),
            "payload": json.dumps(to_jsonable(payload), allow_nan=False),
        })
        if len(self._buffer) >= self.batch_rows or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> int:
        """Write the buffered rows as one new part per stage; returns the number of rows written."""
        rows, self._buffer = self._buffer, []
        self._last_flush = time.monotonic()
        if not rows:
            return 0
        by_stage: dict[str, list[dict]] = {}
        for r in rows:
            by_stage.setdefault(r["stage"], []).append(r)
        try:
            with self._lock():
                for stage, batch in by_stage.items():
                    table = pa.Table.from_pylist(batch, schema=SCHEMA)
                    atomic_write_bytes(self._new_part_name(stage), self._parquet_bytes(table))
        except BaseException:
            self._buffer = rows + self._buffer  # not written: a later flush may try again
            raise
        self.written += len(rows)
        return len(rows)

    # ------------------------------------------------------------------ reads

    def get_many(self, stage: str, keys: Iterable[str]) -> dict[str, dict]:
        """The newest stored payload of each key found in ``stage``, with ``"_subjects"``: the set of
        subject ids stored for it (so a caller can record a subject that is not yet attributed)."""
        wanted = pd.DataFrame({"key": pd.Series(list(dict.fromkeys(k for k in keys if k)), dtype=object)})
        if not len(wanted) or not (self.root / check_stage(stage)).is_dir():
            return {}
        with self._lock(create=False):
            self._warn_foreign(stage)
            src, files = self._source(stage)
            if not files:
                return {}
            con = duckdb.connect()
            try:
                con.register("wanted", wanted)
                rows = con.execute(
                    f"SELECT s.key, s.payload, s.subject_id FROM {src} s "
                    "JOIN wanted w ON s.key = w.key ORDER BY s.created"
                ).fetchall()
            finally:
                con.close()
        out: dict[str, dict] = {}
        subjects: dict[str, set] = {}
        for key, payload, subject in rows:  # oldest first: the newest payload wins
            out[key] = json.loads(payload)
            subjects.setdefault(key, set()).add(subject)
        for key, rec in out.items():
            rec["_subjects"] = subjects[key]
        return out

    def _views(self, con) -> list[str]:
        """One view per stage, named after it: the newest row of each (key, sample_id, subject_id), with the
        payload's fields as columns (fields named like a column of the store stay in ``payload``), over the
        stage's own parts. Returns the part files read."""
        files = []
        for stage in self.stages():
            src, parts = self._source(stage)
            files += parts
            structure = con.execute(f"SELECT json_group_structure(payload::JSON) FROM {src}").fetchone()[0]
            fields = json.loads(structure) if structure else {}
            if not isinstance(fields, dict):
                fields = {}
            taken = {c.lower() for c in META_COLUMNS}
            fields = {k: ("VARCHAR" if v == "NULL" else v) for k, v in fields.items() if k.lower() not in taken}
            dedup = (f"SELECT * FROM {src} QUALIFY row_number() OVER "
                     f"(PARTITION BY {', '.join(IDENTITY)} ORDER BY created DESC) = 1")
            if fields:
                body = (f"SELECT * EXCLUDE (_fields), unnest(_fields) FROM (SELECT *, json_transform(payload, "
                        f"{_sql_str(json.dumps(fields))}) AS _fields FROM ({dedup}))")
            else:
                body = dedup
            con.execute(f'CREATE OR REPLACE VIEW "{stage}" AS {body}')
        return files

    @staticmethod
    def _lock_down(con, files: list[str] | None) -> None:
        """After the views exist: the connection may read no file but ``files`` (the store's own parts), install
        or load no extension, and change no setting. A DuckDB without ``allowed_paths`` (or ``files=None``) gets
        the views copied into memory first, then no file access at all."""
        try:
            con.execute(f"SET allowed_paths = {_sql_list(files)}")  # files=None: an error, as in an old DuckDB
        except (duckdb.Error, TypeError):
            for (v,) in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall():
                con.execute(f'CREATE TABLE "_{v}" AS FROM "{v}"; DROP VIEW "{v}"; ALTER TABLE "_{v}" RENAME TO "{v}"')
        for setting in ("enable_external_access", "autoinstall_known_extensions", "autoload_known_extensions",
                        "allow_community_extensions"):
            con.execute(f"SET {setting} = false")
        con.execute("SET lock_configuration = true")

    def query(self, sql: str) -> pd.DataFrame:
        """Run one read-only SELECT statement over the stages (one view per stage, named after it) and return
        the result. Any other statement (a second one, COPY, ATTACH, INSTALL, SET, CREATE, ...) is refused, and
        the query runs on a DuckDB connection that can open no file but the store's own parts, load no
        extension and change no setting (:meth:`_lock_down`)."""
        check_select(sql)
        if not self.root.is_dir():
            raise FairvisionError(f"{self.root}: no results store here (nothing has been stored yet)")
        with self._lock(create=False):
            self._warn_foreign()
            con = duckdb.connect()
            try:
                self._lock_down(con, self._views(con))
                try:
                    return con.execute(sql).df()
                except duckdb.Error as exc:
                    raise FairvisionError(f"query failed: {_first_line(exc)}") from None
            finally:
                con.close()

    def info(self) -> pd.DataFrame:
        """One row per stage: ``parts``, ``rows``, ``unique_rows`` (distinct key, sample and subject), ``keys``,
        ``subjects``, ``params`` (distinct parameter hashes), ``bytes``, ``first`` and ``last`` (created) of the
        store's own parts, and ``foreign``: other files in the folder, ignored (:meth:`foreign_parts`)."""
        cols = "stage parts rows unique_rows keys subjects params bytes first last foreign".split()
        out = []
        if self.root.is_dir():
            with self._lock(create=False):
                con = duckdb.connect()
                try:
                    for stage_dir in self._stage_dirs():
                        parts, foreign = self._scan(stage_dir)
                        if not parts:  # a folder with foreign files only: a row without parts
                            out += [[stage_dir.name, 0, 0, 0, 0, 0, 0, 0, None, None, len(foreign)]] if foreign else []
                            continue
                        row = con.execute(
                            f"SELECT count(*), count(DISTINCT ({', '.join(IDENTITY)})), count(DISTINCT key), "
                            f"count(DISTINCT subject_id), count(DISTINCT params_hash), min(created), max(created) "
                            f"FROM {self._source(stage_dir.name)[0]}").fetchone()
                        out.append([stage_dir.name, len(parts), row[0], row[1], row[2], row[3], row[4],
                                    sum(p.stat().st_size for p in parts), row[5], row[6], len(foreign)])
                finally:
                    con.close()
        return pd.DataFrame(out, columns=cols)

    # ------------------------------------------------------------------ maintenance

    def _clean_temporaries(self, stage_dir: Path) -> None:
        """Under the exclusive lock no append is in flight: dot-files in a stage folder are leftovers."""
        for p in stage_dir.glob(".*"):
            with contextlib.suppress(OSError):
                p.unlink()

    def vacuum(self, *, max_parts: int | None = None, blocking: bool = True) -> dict:
        """Compact each stage's parts into one, keeping the newest row of each (key, sample_id,
        subject_id); remove leftovers of killed writes. With ``max_parts``, only stages with more parts
        than that. Files that are not the store's own parts are never read: they stay, listed in ``"foreign"``
        (``[(path, reason)]``). Returns ``{"stages", "parts_before", "parts_after", "rows_before", "rows_after",
        "foreign"}`` (``{"skipped": True}`` when ``blocking=False`` and another process holds the lock)."""
        stats = {"stages": 0, "parts_before": 0, "parts_after": 0, "rows_before": 0, "rows_after": 0, "foreign": []}
        if not self.root.is_dir():
            return stats
        with self._lock(exclusive=True, blocking=blocking) as got:
            if not got:
                return {**stats, "skipped": True}
            renames, deletions = [], []
            for stage_dir in self._stage_dirs():
                self._clean_temporaries(stage_dir)
                parts, foreign = self._scan(stage_dir)
                stats["foreign"] += foreign
                stats["parts_before"] += len(parts)
                if not parts or (max_parts is not None and len(parts) <= max_parts):
                    stats["parts_after"] += len(parts)
                    continue
                table = pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts])
                kept = self._dedup(table)
                stats["stages"] += 1
                stats["rows_before"] += table.num_rows
                stats["rows_after"] += kept.num_rows
                if len(parts) == 1 and kept.num_rows == table.num_rows:
                    stats["parts_after"] += 1
                    continue
                if kept.num_rows:
                    final = self._new_part_name(stage_dir.name)
                    tmp = stage_dir / f".compact-{final.name}"
                    write_synced(tmp, self._parquet_bytes(kept))
                    renames.append((tmp, final))
                    stats["parts_after"] += 1
                deletions += parts
            if renames or deletions:
                self._commit(renames, deletions)
        return stats

    @staticmethod
    def _dedup(table: pa.Table) -> pa.Table:
        """The newest row of each (key, sample_id, subject_id), oldest first."""
        df = table.to_pandas().sort_values("created", kind="stable").drop_duplicates(list(IDENTITY), keep="last")
        return pa.Table.from_pandas(df, schema=SCHEMA, preserve_index=False)

    def forget(self, subject_id=None, *, content_hashes: Iterable[str] = (), dry_run: bool = False) -> dict[str, int]:
        """Remove rows from every stage, all stages in one commit, and return the rows removed (or, with
        ``dry_run``, that would be) by stage.

        With ``subject_id``: the rows recorded for that subject and any row of the same image content (the same
        bytes stored under another sample or without a subject). ``content_hashes`` adds (or, with no
        ``subject_id``, gives alone) the SHA-256 of images whose rows go: a dataset's own images, so that rows
        another dataset stored under the same short subject id stay."""
        if subject_id is None and not content_hashes:
            raise FairvisionError("forget needs a subject id or content hashes")
        subject_id = None if subject_id is None else str(subject_id)
        counts: dict[str, int] = {}
        if not self.root.is_dir():
            return counts
        with self._lock(exclusive=not dry_run, create=not dry_run):
            if not dry_run:  # whole-run memo entries hold rows of people: all go, before the rows themselves
                clear_memos(self.root)
            con = duckdb.connect()
            try:
                stages = self.stages()
                hashes: set[str] = {str(h) for h in content_hashes}
                for stage in stages if subject_id is not None else []:
                    hashes |= {h for (h,) in con.execute(
                        f"SELECT DISTINCT content_hash FROM {self._source(stage)[0]} "
                        "WHERE subject_id = ? AND content_hash IS NOT NULL", [subject_id]).fetchall()}
                con.register("gone", pd.DataFrame({"h": pd.Series(sorted(hashes), dtype=object)}))
                if subject_id is not None:
                    match, args = "(subject_id = ? OR content_hash IN (SELECT h FROM gone))", [subject_id]
                else:
                    match, args = "content_hash IN (SELECT h FROM gone)", []
                renames, deletions = [], []
                for stage in stages:
                    hit = con.execute(
                        f"SELECT filename, count(*) FROM {self._source(stage, filename=True)[0]} "
                        f"WHERE {match} GROUP BY filename", args).fetchall()
                    for fname, n in hit:
                        counts[stage] = counts.get(stage, 0) + int(n)
                        if dry_run:
                            continue
                        part = Path(fname)
                        table = pq.read_table(part, schema=SCHEMA)
                        drop = pc.is_in(table["content_hash"], pa.array(sorted(hashes), pa.string()))
                        if subject_id is not None:
                            drop = pc.or_kleene(pc.equal(table["subject_id"], subject_id), drop)
                        drop = pc.fill_null(drop, False)
                        left = table.filter(pc.invert(drop))
                        if left.num_rows:
                            final = self._new_part_name(stage)
                            tmp = part.parent / f".forget-{final.name}"
                            write_synced(tmp, self._parquet_bytes(left))
                            renames.append((tmp, final))
                        deletions.append(part)
            finally:
                con.close()
            if renames or deletions:
                self._commit(renames, deletions)
        return counts
