"""Benchmark: the automatic skin pipeline (decode, mask, measure) on the 62 CC0 portraits.

Runs side by side in one process:

1. fairvision's pipeline, ``measure_images(folder, workers=2)`` (wall time
   including the worker pool's start-up and model construction);
2. the naive baseline: one fresh process, PIL decoding (+ EXIF transpose), then
   the same mask and estimator image after image; the results must equal (1);
3. the peer tool stone (PyPI ``skin-tone-classifier``, OpenCV Haar faces) in its
   own virtualenv, single worker, through a subprocess, if that venv exists:
   ``$FAIRVISION_STONE_VENV`` (default ``/tmp/stone-venv``); set it up with
   ``python3 -m venv /tmp/stone-venv && /tmp/stone-venv/bin/pip install
   skin-tone-classifier "opencv-python<5"`` (OpenCV 5 dropped the
   ``CascadeClassifier`` stone uses). Its import time is excluded.

Prints images/s, faces found and the ratios, plus a per-stage breakdown
(single process) showing where the time goes. Not a test.

Usage: ``python benchmarks/bench_skin_pipeline.py [--workers 2] [--method thong] [--repeat 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

STONE_SCRIPT = r"""
import json, sys, time
import stone
files = json.loads(sys.argv[1])
stone.process(files[0], image_type="color")  # warm-up (lazy loads), not timed
t = time.perf_counter()
found = 0
for f in files:
    r = stone.process(f, image_type="color")
    faces = [x for x in r.get("faces", []) if x.get("face_id") not in (None, "NA")]
    found += bool(faces)
dt = time.perf_counter() - t
print(json.dumps({"seconds": dt, "found": found, "n": len(files)}))
"""


def run_stone(files: list[str]) -> dict | None:
    venv = Path(os.environ.get("FAIRVISION_STONE_VENV", "/tmp/stone-venv"))
    py = venv / "bin" / "python"
    if not py.is_file():
        print(f"stone: unavailable (no virtualenv at {venv}; set FAIRVISION_STONE_VENV)")
        return None
    proc = subprocess.run([str(py), "-c", STONE_SCRIPT, json.dumps(files)], capture_output=True, text=True)
    if proc.returncode != 0:
        print(f"stone: unavailable (its run failed: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode})")
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def naive(paths: list[str], method: str) -> list:
    """The baseline: PIL decoding and a plain loop in one process."""
    from PIL import Image, ImageOps

    from fairvision.skin.masks import skin_mask
    from fairvision.skin.measure import measure

    out = []
    for p in paths:
        with Image.open(p) as im:
            img = np.asarray(ImageOps.exif_transpose(im).convert("RGB"))
        m = skin_mask(img)
        out.append(measure(img, mask=m.mask, method=method) if m.ok else None)
    return out


def run_naive(paths: list[str], method: str) -> dict:
    """The naive loop in a fresh interpreter (models built inside the timing, imports outside),
    so that this process never builds a model and its worker pool can fork."""
    proc = subprocess.run(
        [sys.executable, __file__, "--naive-child", method], input=json.dumps(paths), capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"naive baseline failed:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _naive_child(method: str) -> None:
    paths = json.loads(sys.stdin.read())
    from fairvision.audits.skin_batch import _preload

    _preload({"mask_method": "mediapipe"})  # imports only, as for the fast run
    t = time.perf_counter()
    res = naive(paths, method)
    dt = time.perf_counter() - t
    rows = [[r.L, r.hue, r.ita] if r is not None and r.ok else None for r in res]
    print(json.dumps({"seconds": dt, "rows": rows}))


def stages(paths: list[str], method: str) -> dict:
    from fairvision.io.images import read_image
    from fairvision.skin.masks import skin_mask
    from fairvision.skin.measure import measure

    t0 = time.perf_counter()
    imgs = [read_image(p) for p in paths]
    t1 = time.perf_counter()
    masks = [skin_mask(i) for i in imgs]
    t2 = time.perf_counter()
    for i, m in zip(imgs, masks):
        if m.ok:
            measure(i, mask=m.mask, method=method)
    t3 = time.perf_counter()
    n = len(paths)
    return {"decode_ms": (t1 - t0) / n * 1e3, "mask_ms": (t2 - t1) / n * 1e3, "measure_ms": (t3 - t2) / n * 1e3}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--folder", default=None, help="image folder (default: the bundled portraits)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--method", default="thong")
    ap.add_argument("--repeat", type=int, default=2, help="runs of each contender; the fastest counts")
    ap.add_argument("--naive-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.naive_child:
        _naive_child(args.naive_child)
        return 0

    from fairvision.audits.skin_batch import _preload, measure_images
    from fairvision.datasets import demo_path, from_folder

    folder = Path(args.folder) if args.folder else demo_path("portraits")
    table = from_folder(folder)
    paths = list(table.image_path)
    n = len(paths)
    _preload({"mask_method": "mediapipe"})  # imports only, as the CLI would have done

    fast_t, steady, fast = [], [], None
    for _ in range(args.repeat):
        stamps = []
        t = time.perf_counter()
        fast = measure_images(table, method=args.method, workers=args.workers, categories=False,
                              progress=lambda done, total: stamps.append(time.perf_counter()))
        fast_t.append(time.perf_counter() - t)
        k = min(2 * args.workers, n - 2)  # skip pool start-up and model construction
        steady.append((n - 1 - k) / (stamps[-1] - stamps[k]))
    naive_runs = [run_naive(paths, args.method) for _ in range(args.repeat)]
    tn = min(r["seconds"] for r in naive_runs)
    rows = naive_runs[0]["rows"]

    # the two must agree: same faces found, same numbers
    ok_base = np.array([r is not None for r in rows])
    assert np.array_equal(ok_base, fast.ok.to_numpy()), "fast and naive pipelines found different faces"
    for j, col in enumerate(("L", "hue", "ita")):
        b = np.array([r[j] if r is not None else np.nan for r in rows], dtype=float)
        f = fast[col].to_numpy(float)
        assert np.allclose(b, f, atol=1e-3, equal_nan=True), f"fast and naive pipelines differ in {col}"

    # the same pipeline without the per-image bootstrap stability (estimates unchanged)
    nb_t = []
    for _ in range(args.repeat):
        t = time.perf_counter()
        nb = measure_images(table, method=args.method, workers=args.workers, progress=False, categories=False,
                            measure_options={"n_boot": 0})
        nb_t.append(time.perf_counter() - t)
    assert np.allclose(nb.L.to_numpy(float), fast.L.to_numpy(float), atol=1e-9, equal_nan=True)

    st = stages(paths, args.method)
    load = os.getloadavg()[0]
    stone = run_stone(paths)

    tf = min(fast_t)
    found = int(fast.ok.sum())
    print(f"skin pipeline on {n} images of {folder} (estimator {args.method}); "
          f"load average {load:.1f} on {os.cpu_count()} CPUs")
    print(f"  fairvision, {args.workers} workers : {n / tf:7.1f} images/s ({tf:.2f} s incl. pool start), faces found in {found}/{n}")
    print(f"    steady state          : {max(steady):7.1f} images/s (after the first {2 * args.workers} images)")
    print(f"  naive loop, 1 process   : {n / tn:7.1f} images/s ({tn:.2f} s incl. model construction), faces found in {int(ok_base.sum())}/{n}  (results equal)")
    print(f"  speed-up vs naive       : {tn / tf:7.2f}x")
    if stone is not None:
        ts = stone["seconds"]
        print(f"  stone, 1 worker         : {n / ts:7.1f} images/s ({ts:.2f} s), faces found in {stone['found']}/{n}")
        print(f"  fairvision / stone      : {ts / tf:7.2f}x images/s, {found - stone['found']:+d} faces")
    tb = min(nb_t)
    print(f"  same, no bootstrap stability (n_boot=0): {n / tb:7.1f} images/s (same estimates)")
    print(
        f"  per image, 1 process    : decode {st['decode_ms']:.1f} ms, mask {st['mask_ms']:.1f} ms, "
        f"measure ({args.method}) {st['measure_ms']:.1f} ms"
    )
    print(f"  target >= 40 images/s   : {'met' if n / tf >= 40 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
