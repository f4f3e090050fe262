"""Benchmark of the image quality checks (docs/METHODS.md §13.7) and the derived face sets (§13.6).

1. Near-duplicate search among 100,000 random 64-bit perceptual hashes with 50 planted near-duplicate pairs
   (1-6 bits apart), threshold 6. Fast: :func:`fairvision.stats.hamming.near_duplicate_pairs` (multi-index
   hashing: 7 chunks, candidates by sorting, popcount verification). Baseline: all pairs in blocked numpy
   (XOR of a block of rows against every later hash, the same 16-bit-table popcount), run on the first
   20,000 hashes and extrapolated to 100,000 quadratically (x 25: all-pairs work is n^2 / 2); both answers on
   the 20,000 are asserted equal and every planted pair is asserted found.
2. Crop and align throughput (images/s) on the 62 bundled portraits with the built-in face models, and of the
   crop + align steps alone (landmarks given).

Run: ``.venv/bin/python benchmarks/bench_near_duplicates.py [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fairvision.stats.hamming import near_duplicate_pairs, popcount64

N, T, PLANTED, BASE_N = 100_000, 6, 50, 20_000


def all_pairs(h, t, block=256):
    out = []
    for s in range(0, len(h) - 1, block):
        rows = h[s:s + block]
        d = popcount64(rows[:, None] ^ h[None, s + 1:])  # row r vs hashes s+1.. (j > i where j - s - 1 >= r)
        r, c = np.nonzero(d <= t)
        j = c + s + 1
        i = r + s
        keep = j > i
        out.append(np.stack([i[keep], j[keep], d[r[keep], c[keep]]], axis=1))
    return np.concatenate(out) if out else np.zeros((0, 3), int)


def bench_hamming(quick: bool) -> None:
    rng = np.random.default_rng(0)
    h = rng.integers(0, 2**64 - 1, size=N, dtype=np.uint64, endpoint=True)
    src = rng.choice(N, PLANTED, replace=False)
    dst = rng.choice(np.setdiff1d(np.arange(N), src), PLANTED, replace=False)
    for a, b in zip(src, dst):
        bits = rng.choice(64, int(rng.integers(1, T + 1)), replace=False)
        h[b] = h[a] ^ np.bitwise_or.reduce(np.uint64(1) << bits.astype(np.uint64))
    t0 = time.perf_counter()
    fast = near_duplicate_pairs(h, T)
    t_fast = time.perf_counter() - t0
    found = set(zip(fast["i"], fast["j"]))
    assert all((min(a, b), max(a, b)) in found for a, b in zip(src, dst)), "a planted pair was missed"
    base_n = 5_000 if quick else BASE_N
    t0 = time.perf_counter()
    ref = all_pairs(h[:base_n], T)
    t_base = (time.perf_counter() - t0) * (N / base_n) ** 2
    sub = near_duplicate_pairs(h[:base_n], T)
    assert sorted(map(tuple, ref[:, :2].tolist())) == sorted(zip(sub["i"].tolist(), sub["j"].tolist()))
    print(f"near duplicates, {N:,} hashes, Hamming <= {T}: fast {t_fast:.2f} s ({len(fast)} pairs, all "
          f"{PLANTED} planted found); all-pairs {t_base:.1f} s (measured on {base_n:,}, x{(N / base_n) ** 2:.0f} "
          f"quadratic extrapolation); ratio {t_base / t_fast:.0f}x")


def bench_faces(quick: bool) -> None:
    from fairvision.datasets import load_portraits
    from fairvision.io.images import read_image
    from fairvision.vision.face_crops import align_face, crop_face, find_faces

    paths = list(load_portraits()["image_path"])[: 10 if quick else None]
    imgs = [read_image(p) for p in paths]
    t0 = time.perf_counter()
    faces = [find_faces(im) for im in imgs]
    t_models = time.perf_counter() - t0
    todo = [(im, f[0]) for im, f in zip(imgs, faces) if f]
    t0 = time.perf_counter()
    for im, f in todo:
        crop_face(im, f["box"], 2.0)
        align_face(im, f["left_eye"], f["right_eye"], f["left_mouth"], f["right_mouth"], size=512)
    t_warp = time.perf_counter() - t0
    print(f"faces, {len(imgs)} portraits (500 x 500), 1 process: landmarks {len(imgs) / t_models:.0f} images/s; "
          f"crop + align (512) {len(todo) / t_warp:.0f} faces/s; together {len(todo) / (t_models + t_warp):.0f} faces/s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    bench_hamming(args.quick)
    bench_faces(args.quick)
