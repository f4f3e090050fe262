"""Check that a restructuring leaves every output the same, bit for bit.

Run the test suite (serially, so temporary folders get the same names) and a fixed set of commands on the
bundled data, then digest every Parquet table and every ``report.json`` (its ``findings`` and the rest of it
apart from ``meta``, ``created`` and ``generator``) under the folders they wrote (results-store parts are left out). Digest two commits the same way and compare:

    git worktree add /tmp/snap <commit>          # the same folder for both commits: paths appear in tables
    cd /tmp/snap && python scripts/output_snapshot.py run --root /tmp/snap-out -o before.json
    git -C /tmp/snap checkout <other commit>
    cd /tmp/snap && python scripts/output_snapshot.py run --root /tmp/snap-out -o after.json
    python scripts/output_snapshot.py compare before.json after.json

Run it with ``PYTHONPATH=src`` so the checkout's own code is imported. A table is digested as its Arrow IPC
stream (schema with its pandas metadata, and every value), so a change of dtype, order, index or value shows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: a results-store part: its name holds a time and a process id, its keys hash the code (which a restructuring
#: changes), so stores are left out; the tables measured from them are compared
STORE_PART = re.compile(r"part-\d+-\d+-[0-9a-f]+\.parquet")
#: report.json keys that differ between any two runs: the run's settings and inputs, its time, the version
VARYING = ("meta", "created", "generator")

COMMANDS = (
    ("demo", ["demo", "-o", "{out}/demo", "--n-boot", "200"]),
    ("transfer-demo", ["transfer", "demo", "-o", "{out}/transfer-demo", "--n-boot", "200"]),
)


def table_digest(path: Path) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return hashlib.sha256(sink.getvalue().to_pybytes()).hexdigest()


def json_digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def digest_tree(root: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        key = str(path.relative_to(root))
        if path.suffix == ".parquet" and not STORE_PART.match(path.name):
            try:
                out[key] = table_digest(path)
            except Exception as exc:  # a deliberately broken file written by a test
                out[key] = f"unreadable: {type(exc).__name__}"
        elif path.name == "report.json":
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                out[key] = "unreadable"
                continue
            if isinstance(doc, dict):
                out[key + "#findings"] = json_digest(doc.get("findings"))
                out[key + "#body"] = json_digest({k: v for k, v in doc.items() if k not in VARYING})
    return out


def run(root: Path, output: Path, pytest_args: list[str]) -> None:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    env = dict(os.environ, PYTHONPATH=str(Path("src").resolve()), FAIRVISION_STORE=str(root / "store"))
    tests = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                            f"--basetemp={root / 'tests'}", *pytest_args], env=env)
    for name, argv in COMMANDS:
        cmd = [sys.executable, "-m", "fairvision", *(a.format(out=root / "commands") for a in argv)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"command {name} failed ({done.returncode}): {done.stderr[-2000:]}", file=sys.stderr)
    digests = digest_tree(root)
    output.write_text(json.dumps({"tests_returncode": tests.returncode, "digests": digests}, indent=1))
    print(f"{len(digests)} digests written to {output} (tests exit {tests.returncode})")


def compare(before: Path, after: Path) -> int:
    a = json.loads(before.read_text())["digests"]
    b = json.loads(after.read_text())["digests"]
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    changed = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    for label, keys in (("only before", only_a), ("only after", only_b), ("changed", changed)):
        for k in keys:
            print(f"{label}: {k}")
    n_tables = sum(k.endswith(".parquet") for k in set(a) & set(b))
    n_reports = sum(k.endswith("#findings") for k in set(a) & set(b))
    print(f"compared {n_tables} Parquet tables and {n_reports} report.json files: {len(changed)} differ, "
          f"{len(only_a)} only before, {len(only_b)} only after")
    return 1 if changed or only_a or only_b else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="run the tests and commands, then digest their outputs")
    r.add_argument("--root", type=Path, required=True, help="folder for every output (emptied first)")
    r.add_argument("-o", "--output", type=Path, required=True, help="digest file to write")
    r.add_argument("pytest_args", nargs="*", help="extra pytest arguments (e.g. a subset of test files)")
    c = sub.add_parser("compare", help="compare two digest files")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args()
    if args.verb == "run":
        run(args.root, args.output, args.pytest_args)
        return 0
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
