"""Read WebDataset tar shards: a sample table of the shards and lazy reads of one member's bytes.

A WebDataset is one or more POSIX tar files (shards) in which a sample is the
set of members sharing a key: the member name up to the first dot of its base
name (``train/abc123.jpg``, ``train/abc123.json`` and ``train/abc123.cls`` make
the sample ``train/abc123``). :func:`list_samples` reads the tar headers of every
shard once (no member is extracted to disk) and returns one row per sample:
``sample_id`` (the key), ``image_path`` (a member reference, below), ``shard``,
``member``, the ``.json`` member's fields flattened to columns (nested objects
joined with ``.``) and the text of ``.cls`` / ``.txt`` members.

The image of a sample is the member whose extension is an image extension:
the whole extension (``abc.jpg``) first, in the order of
:data:`IMAGE_EXTENSIONS`, then compound extensions whose last dot-component is
one (``abc.left.png``, ``abc.0.jpg``; by that component's order, then by name).
Hard-linked members are read as their target's bytes; a symbolic link is
followed when its target is a regular member of the same shard, otherwise it
is skipped and counted in a warning (``df.attrs["skipped_links"]``).

An image is named by a short, picklable reference string,
``tar://<shard>#<offset>:<size>/<member name>``, where ``offset`` is the
member's data offset in the shard (``TarInfo.offset_data``): :func:`read_member`
seeks there and reads ``size`` bytes, O(1) whatever the shard's size, so
worker processes read their images straight from the shards. ``#`` and ``%``
in the shard path are written ``%23`` and ``%25`` (the first ``#`` ends the
shard). Before returning the bytes, :func:`read_member` checks the member's
own 512-byte tar header just before ``offset`` (valid checksum, regular file,
same size and, for names that fit a ustar header, same name), so a shard
rewritten since it was listed is an error, not other pixels.
:func:`fairvision.io.images.read_image` accepts these references (and checks a
member's pixel count from its header before decoding, as for a file), and
:func:`member_sha256` is the content hash of the member's bytes (the same as of
the image extracted to a file), so the results store keys a tar member as it
keys the same image in a folder.

Shards are given as a file, a folder (its ``*.tar`` files), a glob
(``shards/*.tar``) or brace notation (``shard-{000000..000009}.tar``,
``{train,val}.tar``); an existing file is taken as named even when its name
holds glob or brace characters. Only uncompressed tar is read (a compressed
member cannot be read at an offset), and sparse members (``tar --sparse``) are
refused (their data is not stored contiguously). Errors are one line naming
the shard and member: a corrupt or truncated tar, a sparse member, a sample
without an image, a key in two shards, a ``.json`` member that is not a JSON
object, a shard changed since it was listed.
"""

from __future__ import annotations

import glob
import hashlib
import itertools
import json
import os
import posixpath
import re
import tarfile
import threading
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fairvision.errors import InputFileError

#: Prefix of a tar member reference (``tar://<shard>#<offset>:<size>/<member>``).
TAR_SCHEME = "tar://"
#: Shard file suffixes.
SHARD_SUFFIXES = (".tar",)
#: Image extensions of a sample, in order of preference when a sample has several (a member is an image when
#: the last dot-component of its extension is one of these; whole extensions are preferred to compound ones).
IMAGE_EXTENSIONS = ("jpg", "jpeg", "png", "webp", "bmp", "tif", "tiff")
#: Text members read into columns named by their extension.
TEXT_EXTENSIONS = ("cls", "txt")
#: Columns set by the reader; ``.json`` fields of these names are ignored.
RESERVED_COLUMNS = ("sample_id", "image_path", "shard", "member")

#: Most member hashes remembered per process (least recently used dropped first).
HASH_CACHE_SIZE = 100_000

# the shard path holds no "#" ("#" and "%" are percent-encoded in it): the first "#" ends it
_REF_RE = re.compile(r"^tar://([^#]*)#(\d+):(\d+)/(.*)$", re.S)
_PCT_RE = re.compile(r"%(23|25)")
_SPARSE_MSG = "sparse tar members are not supported; recreate the shard without --sparse"
_CHANGED_MSG = "shard changed since it was listed; list the shards again"
_MAX_LINK_HOPS = 8
_BRACE_RE = re.compile(r"\{([^{}]*)\}")
_RANGE_RE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")
_TEXT_LIMIT = 1 << 16  # .cls / .txt members larger than this are not read into the table
# SHA-256 of members already hashed in this process, by (shard, size, mtime_ns, inode, offset, length);
# bounded to HASH_CACHE_SIZE entries, least recently used first out
_MEMBER_HASHES: OrderedDict[tuple, str] = OrderedDict()
_HASH_LOCK = threading.Lock()


def _encode_shard(shard: str) -> str:
    return shard.replace("%", "%25").replace("#", "%23")


def _decode_shard(text: str) -> str:
    return _PCT_RE.sub(lambda m: "#" if m.group(1) == "23" else "%", text)


@dataclass(frozen=True)
class MemberRef:
    """Where one member's bytes lie in a shard: ``shard`` path, data ``offset``, ``size``, member ``name``."""

    shard: str
    offset: int
    size: int
    name: str

    def __str__(self) -> str:
        return f"{TAR_SCHEME}{_encode_shard(self.shard)}#{self.offset}:{self.size}/{self.name}"

    @property
    def label(self) -> str:
        """``<shard>: member <name>``, for messages."""
        return f"{self.shard}: member {self.name}"


def is_member_ref(path) -> bool:
    """Whether ``path`` is a tar member reference (``tar://...``)."""
    return isinstance(path, (str, MemberRef)) and (isinstance(path, MemberRef) or path.startswith(TAR_SCHEME))


def parse_ref(ref: str | MemberRef) -> MemberRef:
    """The :class:`MemberRef` of a ``tar://<shard>#<offset>:<size>/<member>`` string.

    The shard path ends at the first ``#``; ``%23`` and ``%25`` in it stand for ``#`` and ``%``
    (as :class:`MemberRef` writes them), so a shard path may hold any character.
    """
    if isinstance(ref, MemberRef):
        return ref
    m = _REF_RE.match(str(ref))
    if m is None:
        raise InputFileError(f"{ref}: not a tar member reference (tar://<shard>#<offset>:<size>/<member>)")
    return MemberRef(_decode_shard(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4))


def _fits_ustar_name(name: str) -> bool:
    """Whether a member name is stored whole in its own ustar header (not only in a GNU/pax extended header)."""
    return name.isascii() and len(name) <= 100


def _check_header(r: MemberRef, block: bytes) -> None:
    """Raise unless ``block`` (the 512 bytes before the data) is the header of a regular member ``r``."""
    try:
        info = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
    except tarfile.HeaderError:
        raise InputFileError(f"{r.label}: {_CHANGED_MSG} (no valid tar header before offset {r.offset})") from None
    if info.type == tarfile.GNUTYPE_SPARSE:
        raise InputFileError(f"{r.label}: {_SPARSE_MSG}")
    if not info.isreg() or info.size != r.size:
        raise InputFileError(f"{r.label}: {_CHANGED_MSG} (the header at offset {r.offset} is of "
                             f"{info.name!r}, {info.size} bytes, not {r.size})")
    # a long or non-ASCII name lives in a GNU longname / pax header before this one: this header holds it cut
    if _fits_ustar_name(r.name) and info.name != r.name:
        raise InputFileError(f"{r.label}: {_CHANGED_MSG} (the header at offset {r.offset} is of {info.name!r})")


def read_member(ref: str | MemberRef) -> bytes:
    """The bytes of one tar member, read at its offset (nothing is extracted).

    The member's own 512-byte tar header, just before ``offset``, is read with
    the data and checked (valid checksum, a regular file, the reference's size
    and, for names that fit a ustar header, its name): a shard rewritten since
    it was listed raises instead of returning other bytes.

    Raises
    ------
    InputFileError
        The shard is missing or unreadable, ends before the member does, holds
        no matching header before ``offset`` (changed since it was listed), or
        the member is sparse; the message names both.
    """
    r = parse_ref(ref)
    if r.offset < tarfile.BLOCKSIZE or r.offset % tarfile.BLOCKSIZE:
        raise InputFileError(f"{r.label}: {_CHANGED_MSG} (offset {r.offset} is not after a 512-byte tar header)")
    try:
        with open(r.shard, "rb") as fh:
            fh.seek(r.offset - tarfile.BLOCKSIZE)
            block = fh.read(tarfile.BLOCKSIZE)
            data = fh.read(r.size)
    except FileNotFoundError:
        raise InputFileError(f"{r.shard}: no such tar shard (member {r.name})") from None
    except OSError as exc:
        raise InputFileError(f"{r.label}: cannot read: {exc.strerror or exc}") from None
    if len(block) != tarfile.BLOCKSIZE or len(data) != r.size:
        raise InputFileError(f"{r.label}: the shard ends inside the member (truncated tar)")
    _check_header(r, block)
    return data


def member_sha256(ref: str | MemberRef) -> str | None:
    """SHA-256 of one member's bytes (None when it cannot be read), remembered for this process."""
    r = parse_ref(ref)
    try:
        st = os.stat(r.shard)
    except OSError:
        return None
    sig = (os.path.abspath(r.shard), st.st_size, st.st_mtime_ns, st.st_ino, r.offset, r.size)
    with _HASH_LOCK:
        hit = _MEMBER_HASHES.get(sig)
        if hit is not None:
            _MEMBER_HASHES.move_to_end(sig)
            return hit
    try:
        hit = hashlib.sha256(read_member(r)).hexdigest()
    except InputFileError:
        return None
    with _HASH_LOCK:
        _MEMBER_HASHES[sig] = hit
        while len(_MEMBER_HASHES) > HASH_CACHE_SIZE:
            _MEMBER_HASHES.popitem(last=False)
    return hit


# --------------------------------------------------------------------------- shards


def expand_braces(pattern: str) -> list[str]:
    """Expand brace notation: ``{000..009}`` (numeric range, zero padding kept) and ``{a,b,c}``, any number of groups."""
    m = _BRACE_RE.search(pattern)
    if m is None:
        return [pattern]
    body = m.group(1)
    rng = _RANGE_RE.match(body)
    if rng is not None:
        lo, hi = rng.group(1), rng.group(2)
        a, b = int(lo), int(hi)
        width = len(lo) if (lo.lstrip("-").startswith("0") and len(lo.lstrip("-")) > 1) or len(lo) == len(hi) else 0
        step = 1 if b >= a else -1
        alts = [str(v).zfill(width) for v in range(a, b + step, step)]
    elif "," in body:
        alts = body.split(",")
    else:
        raise InputFileError(f"{pattern}: cannot expand {{{body}}} (use {{000..009}} or {{a,b}})")
    head, tail = pattern[: m.start()], pattern[m.end():]
    return list(itertools.chain.from_iterable(expand_braces(head + alt + tail) for alt in alts))


def is_shard_pattern(source) -> bool:
    """Whether ``source`` names tar shards: a ``.tar`` file, a glob or brace pattern ending in ``.tar``,
    or a folder holding ``*.tar`` files and no images."""
    s = str(source)
    if s.lower().endswith(SHARD_SUFFIXES):
        return True
    p = Path(s)
    if p.is_dir():
        with os.scandir(p) as it:
            names = [e.name.lower() for e in it if e.is_file()]
        has_tar = any(n.endswith(SHARD_SUFFIXES) for n in names)
        return has_tar and not any(n.rsplit(".", 1)[-1] in IMAGE_EXTENSIONS for n in names if "." in n)
    return False


def expand_shards(source: str | os.PathLike) -> list[str]:
    """The shard files of ``source`` (a file, a folder, a glob or a brace pattern), absolute, in order.

    A folder gives its ``*.tar`` files sorted by name; a glob its matches sorted;
    a brace pattern its expansions in order (each may be a glob). An existing
    file is taken as named, whatever characters its name holds (``[ab].tar``,
    ``{x}.tar``). Raises :class:`InputFileError` when nothing matches or a
    named shard is missing.
    """
    s = str(source)
    p = Path(s)
    if p.is_file():
        return [os.path.abspath(s)]
    if p.is_dir():
        found = sorted(str(q) for q in p.iterdir() if q.suffix.lower() in SHARD_SUFFIXES and q.is_file())
        if not found:
            raise InputFileError(f"{s}: no tar shards (*.tar) in this folder")
        return [os.path.abspath(f) for f in found]
    shards: list[str] = []
    for pat in expand_braces(s):
        if os.path.isfile(pat):
            shards.append(pat)
        elif glob.has_magic(pat):
            matches = sorted(glob.glob(pat))
            if not matches:
                raise InputFileError(f"{pat}: no tar shard matches")
            shards.extend(matches)
        else:
            raise InputFileError(f"{pat}: no such tar shard")
    return list(dict.fromkeys(os.path.abspath(x) for x in shards))


def split_key(name: str) -> tuple[str, str]:
    """``(key, extension)`` of a member name: WebDataset's rule, the key ends at the first dot of the base name."""
    head, _, base = name.rpartition("/")
    stem, dot, ext = base.partition(".")
    return (f"{head}/{stem}" if head else stem), (ext.lower() if dot else "")


def _flatten(obj: dict, prefix: str = "") -> dict:
    out: dict = {}
    for k, v in obj.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = v
    return out


def image_extension(extensions) -> str | None:
    """The image member's extension among a sample's ``extensions`` (lower case), None when there is none.

    A member is an image when the last dot-component of its extension is in
    :data:`IMAGE_EXTENSIONS` (``jpg``, ``left.png``, ``seg.png``, ``0.jpg``).
    Whole extensions come first, in the order of :data:`IMAGE_EXTENSIONS`;
    then compound ones, by their last component's order, then by name.
    """
    ranked = []
    for ext in extensions:
        last = ext.rpartition(".")[2]
        if last in IMAGE_EXTENSIONS:
            ranked.append((ext != last, IMAGE_EXTENSIONS.index(last), ext))
    return min(ranked)[2] if ranked else None


def _link_target(m: tarfile.TarInfo, by_name: dict[str, tarfile.TarInfo]) -> tarfile.TarInfo | None:
    """The regular member a hard or symbolic link ``m`` resolves to in the same shard (None when none)."""
    seen = 0
    while not m.isfile():
        if seen == _MAX_LINK_HOPS or not (m.islnk() or m.issym()):
            return None
        if m.islnk():  # a hard link names an archive member
            name = m.linkname
        elif posixpath.isabs(m.linkname):
            return None
        else:  # a symbolic link is relative to its own folder
            name = posixpath.normpath(posixpath.join(posixpath.dirname(m.name), m.linkname))
        nxt = by_name.get(name) or by_name.get(posixpath.normpath(name))
        if nxt is None or nxt is m:
            return None
        m, seen = nxt, seen + 1
    return m


def _shard_samples(shard: str) -> tuple[list[dict], list[str]]:
    """One record per sample of one shard (members grouped by key, image chosen, metadata read), and the
    skipped links (``<member> -> <target>``)."""
    size = os.path.getsize(shard)
    skipped: list[str] = []
    try:
        with tarfile.open(shard, mode="r:") as tf:
            by_name: dict[str, tarfile.TarInfo] = {}
            keyed: list[tarfile.TarInfo] = []
            for m in tf:
                if not (m.isfile() or m.islnk() or m.issym()):
                    continue
                by_name[m.name] = m
                key, ext = split_key(m.name)
                if not ext or key.rpartition("/")[2] == "":
                    continue  # no extension, or a hidden file (".name"): not part of a sample
                keyed.append(m)
            # links are resolved once every member is known (a symbolic link may point forward)
            groups: dict[str, dict[str, tuple[str, tarfile.TarInfo]]] = {}
            for m in keyed:
                data = _link_target(m, by_name)
                if data is None:
                    skipped.append(f"{m.name} -> {m.linkname}")
                    continue
                if data.issparse():
                    raise InputFileError(f"{shard}: member {m.name}: {_SPARSE_MSG}")
                if data.offset_data + data.size > size:
                    raise InputFileError(f"{shard}: member {m.name}: the shard ends inside the member (truncated tar)")
                key, ext = split_key(m.name)
                sample = groups.setdefault(key, {})
                if ext in sample:
                    raise InputFileError(f"{shard}: member {m.name}: a second {ext!r} member for sample {key!r}")
                sample[ext] = (m.name, data)
            records = []
            for key, members in groups.items():
                img_ext = image_extension(members)
                if img_ext is None:
                    raise InputFileError(f"{shard}: sample {key!r} has no image member "
                                         f"({', '.join(sorted(n for n, _ in members.values()))}); an image member's "
                                         f"last extension is one of {', '.join(IMAGE_EXTENSIONS)}")
                name, im = members[img_ext]
                # a link's reference names the member holding the bytes (its header precedes them)
                rec: dict = {"sample_id": key, "image_path": str(MemberRef(shard, im.offset_data, im.size, im.name)),
                             "shard": shard, "member": name}
                if "json" in members:
                    jname, jm = members["json"]
                    try:
                        meta = json.loads(tf.extractfile(jm).read().decode("utf-8"))
                    except (ValueError, UnicodeDecodeError) as exc:
                        raise InputFileError(f"{shard}: member {jname}: not valid JSON ({exc})") from None
                    if not isinstance(meta, dict):
                        raise InputFileError(f"{shard}: member {jname}: not a JSON object")
                    rec.update({k: v for k, v in _flatten(meta).items() if k not in RESERVED_COLUMNS})
                for ext in TEXT_EXTENSIONS:
                    if ext in members and members[ext][1].size <= _TEXT_LIMIT:
                        text = tf.extractfile(members[ext][1]).read().decode("utf-8", "replace").strip()
                        rec[ext] = int(text) if ext == "cls" and re.fullmatch(r"-?\d+", text) else text
                records.append(rec)
    except tarfile.TarError as exc:
        raise InputFileError(f"{shard}: not a readable tar shard ({exc})") from None
    except (OSError, EOFError) as exc:
        raise InputFileError(f"{shard}: cannot read the tar shard ({exc})") from None
    return records, skipped


def list_samples(source: str | os.PathLike) -> pd.DataFrame:
    """The sample table of WebDataset shards, one row per sample, without extracting anything.

    Parameters
    ----------
    source : path or str
        A ``.tar`` shard, a folder of shards, a glob (``shards/*.tar``) or a
        brace pattern (``shard-{000000..000009}.tar``).

    Returns
    -------
    pandas.DataFrame
        ``sample_id`` (the key), ``image_path`` (``tar://`` member reference,
        readable with :func:`fairvision.io.images.read_image`), ``shard``,
        ``member`` (the image member's name), then the ``.json`` fields
        (nested objects flattened with ``.``, e.g. ``attributes.age``) and the
        ``cls`` / ``txt`` text, in shard order then member order.
        ``df.attrs["source"]`` is ``source``; ``df.attrs["skipped_links"]`` the
        number of symbolic (or dangling hard) links skipped, also warned about.
        A hard-linked member (or a symbolic link to a regular member of the
        same shard) is read from its target: ``member`` is the link's name,
        ``image_path`` names the target's bytes.

    Raises
    ------
    InputFileError
        No shard matches; a shard is not a readable (uncompressed) tar or is
        truncated; a member is sparse; a sample has no image member; a key
        occurs in two shards; a ``.json`` member is not a JSON object. One
        line naming the shard and member.
    """
    records: list[dict] = []
    seen: dict[str, str] = {}
    skipped: list[str] = []
    for shard in expand_shards(source):
        recs, links = _shard_samples(shard)
        skipped.extend(f"{shard}: member {x}" for x in links)
        for rec in recs:
            first = seen.setdefault(rec["sample_id"], shard)
            if first != shard:
                raise InputFileError(f"{shard}: sample key {rec['sample_id']!r} is also in {first} "
                                     f"(member {rec['member']}); keys must be unique across shards")
            records.append(rec)
    if skipped:
        warnings.warn(f"{source}: skipped {len(skipped)} link member(s) whose target is not a regular member of "
                      f"the same shard (first: {skipped[0]})", stacklevel=2)
    if not records:
        raise InputFileError(f"{source}: the shards hold no samples")
    df = pd.DataFrame.from_records(records)
    df.attrs["source"] = str(source)
    df.attrs["skipped_links"] = len(skipped)
    return df
