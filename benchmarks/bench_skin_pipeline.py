"""Benchmark: ``fairvision skin measure`` end to end, against the peer tool stone and against its own results store.

Whole command lines, Python start-up and imports included, timed from outside: wall clock, and CPU (user + system
of the command and every process it waited for, from ``getrusage(RUSAGE_CHILDREN)``). The contenders run in turn,
A B A B ... (the order flips every round), and each ratio is the median of the per-round ratios, so a machine
whose speed drifts (a shared one) moves both sides of a pair alike. Native thread pools are pinned to one
thread on both sides (``OMP_NUM_THREADS`` and friends).

Three ratios:

1. the 540 bundled FairFace photos: ``fairvision skin measure <folder> -j 2 --no-store`` vs
   ``stone -i <folder> -t color --n_workers 2`` (target >= 3x, with >= 530 photos measured);
2. the 62 bundled portraits, the same two commands (target > 1x: start-up must not dominate small runs);
3. the results store at 540 photos: a second run with the same inputs and options vs a cold run into an empty
   store (target >= 20x): the second run's table comes from the store's whole-run memo
   (:mod:`fairvision.io.run_memo`), without importing numpy, pandas, pyarrow or DuckDB. Also timed, in the same
   rounds: a second run after one of the 540 images was replaced (a new trailer after the JPEG's end, so new
   bytes every round and the same pixels): the per-image store path, 539 rows read and one measured. And the
   store's ratio inside one process (``measure_images`` alone, without the interpreter's start-up and imports).

stone (PyPI ``skin-tone-classifier``, OpenCV Haar faces) runs from its own virtualenv ``$FAIRVISION_STONE_VENV``
(default ``/tmp/stone-venv``): ``python3 -m venv /tmp/stone-venv && /tmp/stone-venv/bin/pip install
skin-tone-classifier "opencv-python<5"`` (OpenCV 5 dropped the ``CascadeClassifier`` stone uses). Without it
the store ratio is still measured.

``--stages`` adds where a worker's time goes per image (decode, face mesh + mask, colour estimate) in one
process. Not a test.

Usage: ``python benchmarks/bench_skin_pipeline.py [--rounds 5] [--workers 2] [--only store] [--stages]``
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "datasets" / "data"
#: native thread pools pinned alike for both tools
THREADS = {v: "1" for v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OPENCV_FOR_THREADS_NUM")}
TARGETS = {"fairface": 3.0, "portraits": 1.0, "store": 20.0}


def timed(cmd: list[str], env: dict) -> tuple[float, float, str]:
    """Run ``cmd``; (wall s, CPU s of it and its waited-for descendants, stdout). A failed run is an error."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.stdout


def fairvision_cmd(folder: Path, out: Path, workers: int, store: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", "fairvision", "skin", "measure", str(folder), "-o", str(out), "-j", str(workers),
           "--no-progress"]
    return cmd + (["--store", str(store)] if store is not None else ["--no-store"])


def measured(stdout: str) -> tuple[int, int, int]:
    """(images, measured, from the store) from the command's summary line."""
    m = re.search(r"([\d,]+) images: ([\d,]+) measured", stdout)
    s = re.search(r"\(([\d,]+) from the store\)", stdout)
    num = lambda x: int(x.replace(",", ""))  # noqa: E731
    return num(m.group(1)), num(m.group(2)), num(s.group(1)) if s else 0


def stone_faces(outdir: Path) -> int:
    """Images in which stone found a face (its result.csv: one row per face, face id NA when none)."""
    with open(outdir / "result.csv", newline="") as fh:
        return len({row["file"] for row in csv.DictReader(fh) if row.get("face id") not in (None, "", "NA")})


def paired(rounds: int, a, b) -> dict:
    """Run ``a()`` and ``b()`` in turn (order flipped every round); each returns (wall, cpu, info)."""
    runs = {"a": [], "b": []}
    for r in range(rounds):
        for side in ("a", "b") if r % 2 == 0 else ("b", "a"):
            runs[side].append((a if side == "a" else b)())
    ratio = lambda k: statistics.median(y[k] / x[k] for x, y in zip(runs["a"], runs["b"]))  # noqa: E731
    med = lambda side, k: statistics.median(x[k] for x in runs[side])  # noqa: E731
    return {"a_wall": med("a", 0), "a_cpu": med("a", 1), "b_wall": med("b", 0), "b_cpu": med("b", 1),
            "wall": ratio(0), "cpu": ratio(1), "a_info": runs["a"][-1][2], "b_info": runs["b"][-1][2]}


def report(name: str, res: dict, a: str, b: str, target: float) -> None:
    ok = lambda x: "met" if x >= target else "NOT met"  # noqa: E731
    print(f"  {name}: {a} {res['a_wall']:.2f} s wall / {res['a_cpu']:.2f} s CPU; {b} {res['b_wall']:.2f} s wall / "
          f"{res['b_cpu']:.2f} s CPU")
    print(f"    ratio {b} / {a} (median of pairs): wall {res['wall']:.2f}x ({ok(res['wall'])}), "
          f"CPU {res['cpu']:.2f}x ({ok(res['cpu'])}) [target {'>=' if target > 1 else '>'} {target:g}x]")


def versus_stone(folder: Path, rounds: int, workers: int, env: dict, tmp: Path) -> dict | None:
    stone = Path(os.environ.get("FAIRVISION_STONE_VENV", "/tmp/stone-venv")) / "bin" / "stone"
    if not stone.is_file():
        print(f"  {folder.name}: stone UNAVAILABLE (no {stone}; set FAIRVISION_STONE_VENV)")
        return None

    def ours():
        wall, cpu, out = timed(fairvision_cmd(folder, tmp / "fv.parquet", workers, None), env)
        n, m, _ = measured(out)
        return wall, cpu, f"{m}/{n} measured"

    def theirs():
        shutil.rmtree(tmp / "stone", ignore_errors=True)
        wall, cpu, _ = timed([str(stone), "-i", str(folder), "-t", "color", "-o", str(tmp / "stone"),
                              "--n_workers", str(workers)], env)
        return wall, cpu, f"a face in {stone_faces(tmp / 'stone')} images"

    ours(), theirs()  # warm-up (file cache, bytecode), not counted
    return paired(rounds, ours, theirs)


def interleaved(rounds: int, sides: dict) -> dict:
    """Run every side once per round, in an order that rotates each round; each side returns (wall, cpu, info).
    Per side: median wall and CPU, and the median per-round ratio of the first side's times to its own."""
    runs = {k: [] for k in sides}
    names = list(sides)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:
            runs[k].append(sides[k]())
    base = runs[names[0]]
    return {k: {"wall": statistics.median(x[0] for x in v), "cpu": statistics.median(x[1] for x in v),
                "wall_ratio": statistics.median(b[0] / x[0] for b, x in zip(base, v)),
                "cpu_ratio": statistics.median(b[1] / x[1] for b, x in zip(base, v)), "info": v[-1][2]}
            for k, v in runs.items()}


def store_runs(folder: Path, rounds: int, workers: int, env: dict, tmp: Path) -> dict:
    """Whole commands at 540 photos: a cold run into an empty store, a second run (inputs unchanged: the memo), and
    a second run after one image was replaced (the per-image store path)."""
    images, warm_store, cold_store = tmp / "images", tmp / "store-warm", tmp / "store-cold"
    shutil.copytree(folder, images)
    victim = sorted(images.glob("*.jpg"))[0]
    original = victim.read_bytes()
    timed(fairvision_cmd(images, tmp / "w.parquet", workers, warm_store), env)  # fills the store and the memo
    count = iter(range(1, 1 << 30))

    def cold():
        shutil.rmtree(cold_store, ignore_errors=True)
        wall, cpu, out = timed(fairvision_cmd(images, tmp / "c.parquet", workers, cold_store), env)
        return wall, cpu, "{1}/{0} measured".format(*measured(out))

    def second():
        wall, cpu, out = timed(fairvision_cmd(images, tmp / "w.parquet", workers, warm_store), env)
        n, _, hits = measured(out)
        memo = "the memo" if "inputs unchanged" in out else "NOT the memo"
        return wall, cpu, f"{hits}/{n} from the store, table from {memo}"

    def one_replaced():
        victim.write_bytes(original + b"\0fairvision-bench-%d" % next(count))  # new bytes, the same pixels
        wall, cpu, out = timed(fairvision_cmd(images, tmp / "w.parquet", workers, warm_store), env)
        n, _, hits = measured(out)
        return wall, cpu, f"{hits}/{n} from the store, {n - hits} measured"

    second()  # warm-up (file cache), not counted
    return interleaved(rounds, {"cold": cold, "second": second, "one_replaced": one_replaced})


IN_PROCESS = r"""
import json, sys, time
from fairvision.audits.settings import AuditSettings
from fairvision.skin.batch import measure_images
folder, store, workers = sys.argv[1], sys.argv[2], int(sys.argv[3])
out = []
for _ in range(2):
    t = time.perf_counter()
    measure_images(folder, settings=AuditSettings(workers=workers), store=store, progress=False)
    out.append(time.perf_counter() - t)
print(json.dumps(out))
"""


def store_in_process(folder: Path, workers: int, env: dict, tmp: Path, rounds: int) -> tuple[float, float, float]:
    """(cold s, second run s, median ratio) of ``measure_images`` alone, a fresh store per round."""
    pairs = []
    for r in range(rounds):
        store = tmp / f"store-inproc-{r}"
        _, _, out = timed([sys.executable, "-c", IN_PROCESS, str(folder), str(store), str(workers)], env)
        pairs.append(json.loads(out.strip().splitlines()[-1]))
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[0] / p[1] for p in pairs))


STAGES = r"""
import json, os, sys, time
from fairvision.engine.pool import limit_threads
limit_threads(1)
from fairvision.io.images import read_image
from fairvision.skin.masks import skin_mask
from fairvision.skin import measure
from fairvision.vision.facemesh import face_landmarks
folder = sys.argv[1]
paths = sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.lower().endswith((".jpg", ".jpeg", ".png")))
skin_mask(read_image(paths[0]), faces="largest")  # models built outside the clock
t0 = time.process_time(); imgs = [read_image(p) for p in paths]
t1 = time.process_time(); [face_landmarks(i) for i in imgs]
t2 = time.process_time(); masks = [skin_mask(i, faces="largest", detector_fallback=False) for i in imgs]
t3 = time.process_time(); [measure(i, mask=m.mask) for i, m in zip(imgs, masks) if m.ok]
t4 = time.process_time()
n, k = len(paths), sum(m.ok for m in masks)
print(json.dumps({"decode": (t1 - t0) / n, "mesh": (t2 - t1) / n, "mask": (t3 - t2 - (t2 - t1)) / n,
                  "measure": (t4 - t3) / max(k, 1)}))
"""


def stages(folder: Path, env: dict) -> None:
    _, _, out = timed([sys.executable, "-c", STAGES, str(folder)], env)
    s = json.loads(out.strip().splitlines()[-1])
    print(f"  {folder.name}, CPU per image in one process: decode {s['decode'] * 1e3:.1f} ms, face mesh "
          f"{s['mesh'] * 1e3:.1f} ms, mask from the landmarks {s['mask'] * 1e3:.1f} ms, colour estimate (thong) "
          f"{s['measure'] * 1e3:.1f} ms")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5, help="counted pairs of runs per ratio (after one warm-up)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", choices=("fairface", "portraits", "store"), action="append",
                    help="measure only this ratio (repeatable)")
    ap.add_argument("--stages", action="store_true", help="also print the per-image CPU of each stage")
    args = ap.parse_args()
    only = set(args.only or ("fairface", "portraits", "store"))
    env = {**os.environ, **THREADS}
    fairface, portraits = DATA / "fairface", DATA / "portraits"
    print(f"skin measure, whole command lines, {args.workers} workers, {args.rounds} interleaved pairs; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start (a shared machine moves both "
          f"sides of a pair alike: quote the ratios)")
    with tempfile.TemporaryDirectory(prefix="fairvision-bench-skin-") as tmp:
        tmp = Path(tmp)
        for name, folder in (("fairface", fairface), ("portraits", portraits)):
            if name in only:
                res = versus_stone(folder, args.rounds, args.workers, env, tmp)
                if res is not None:
                    report(f"{name} ({res['a_info']}; stone: {res['b_info']})", res, "fairvision", "stone",
                           TARGETS[name])
        if "store" in only:
            res = store_runs(fairface, args.rounds, args.workers, env, tmp)
            print(f"  results store, fairface, whole commands (cold: {res['cold']['info']}):")
            for k, what in (("cold", "cold run"), ("second", "second run"), ("one_replaced", "one image replaced")):
                r = res[k]
                line = f"    {what}: {r['wall']:.2f} s wall / {r['cpu']:.2f} s CPU"
                if k != "cold":
                    met = lambda x: "met" if x >= TARGETS["store"] else "NOT met"  # noqa: E731
                    line += (f" ({r['info']}); cold / this (median of rounds): wall {r['wall_ratio']:.1f}x, CPU "
                             f"{r['cpu_ratio']:.1f}x" + (f" [{met(r['wall_ratio'])} on wall, {met(r['cpu_ratio'])} "
                                                         f"on CPU: target >= {TARGETS['store']:g}x]"
                                                         if k == "second" else ""))
                print(line)
            cold, second, ratio = store_in_process(fairface, args.workers, env, tmp, args.rounds)
            print(f"    inside one process (measure_images alone): cold {cold:.2f} s, second run {second:.3f} s, "
                  f"{ratio:.1f}x")
        if args.stages:
            for folder in (fairface, portraits):
                stages(folder, env)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
