"""Benchmark: the Vendi score of 100,000 x 1,280 embeddings, and image-embedding throughput.

1. Vendi score (docs/METHODS.md §5.3, §13.2) of 100,000 float32 embeddings of 1,280 dimensions through the
   d x d matrix ``X^T X / n`` (target: under 3 s on 2 cores), against the definition, the eigenvalues of the
   n x n kernel ``K / n``, at a size it can do (n = 4,000); both paths are also timed at that size and checked to
   agree, and the n x n time is extrapolated to 100,000 as O(n^3) (stated as such).
2. EfficientNet-Lite0 embeddings (docs/METHODS.md §13.1) of the bundled 500 x 500 portraits on 2 threads:
   batches of 32 against one image at a time, in images per second (decode and pre-processing included).

    python benchmarks/bench_vendi.py [--n 100000] [--d 1280] [--n-small 4000] [--images 62]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from fairvision.stats.diversity import vendi_score


def vendi_nxn(x: np.ndarray) -> float:
    """The definition: eigenvalues of the n x n cosine kernel divided by n."""
    x = x.astype(np.float64)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    lam = np.linalg.eigvalsh(x @ x.T / len(x))
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))


def clustered(n: int, d: int, rng) -> np.ndarray:
    """Embeddings with structure (200 clusters plus noise), float32 as models write them."""
    centres = rng.normal(size=(200, d))
    return (centres[rng.integers(0, 200, n)] + 0.8 * rng.normal(size=(n, d))).astype(np.float32)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=1280)
    ap.add_argument("--n-small", type=int, default=4000)
    ap.add_argument("--images", type=int, default=62)
    args = ap.parse_args()
    rng = np.random.default_rng(0)

    x = clustered(args.n, args.d, rng)
    t = time.perf_counter()
    vs = vendi_score(x)
    t_fast = time.perf_counter() - t
    print(f"Vendi, {args.n:,} x {args.d:,} float32 (d x d path): {t_fast:.2f} s  VS = {vs:.2f}  "
          f"[target < 3 s: {'ok' if t_fast < 3 else 'MISSED'}]")

    xs = x[: args.n_small]
    t = time.perf_counter()
    vs_fast = vendi_score(xs)
    t_fast_small = time.perf_counter() - t
    t = time.perf_counter()
    vs_naive = vendi_nxn(xs)
    t_naive = time.perf_counter() - t
    extrap = t_naive * (args.n / args.n_small) ** 3
    print(f"n = {args.n_small:,}: d x d path {t_fast_small:.3f} s, n x n eigen-decomposition {t_naive:.2f} s "
          f"(ratio {t_naive / t_fast_small:.0f}x); scores {vs_fast:.6f} vs {vs_naive:.6f} "
          f"(relative difference {abs(vs_fast - vs_naive) / vs_naive:.1e})")
    print(f"n x n at {args.n:,} (extrapolated as n^3, and {args.n ** 2 * 8 / 2**30:.0f} GiB for K): ~{extrap:,.0f} s; "
          f"ratio to the d x d path ~{extrap / t_fast:,.0f}x")

    # image embeddings on 2 threads
    from fairvision.datasets.demo import load_portraits
    from fairvision.io.images import read_image
    from fairvision.vision.image_embedder import ImageEmbedder

    paths = list(load_portraits()["image_path"])[: args.images]
    emb = ImageEmbedder(batch_size=32, threads=2)
    emb.embed([read_image(paths[0])])  # load the weights, warm up
    t = time.perf_counter()
    batched = emb.embed([read_image(p) for p in paths])
    t_batch = time.perf_counter() - t
    single = ImageEmbedder(batch_size=1, threads=2)
    single.embed([read_image(paths[0])])  # its own copy of the weights, loaded before timing
    t = time.perf_counter()
    one = np.vstack([single.embed([read_image(p)]) for p in paths])
    t_one = time.perf_counter() - t
    print(f"EfficientNet-Lite0 embeddings, {len(paths)} portraits 500 x 500, 2 threads: batches of 32 "
          f"{len(paths) / t_batch:.1f} images/s, one at a time {len(paths) / t_one:.1f} images/s "
          f"(ratio {t_one / t_batch:.2f}x; max difference {np.abs(batched - one).max():.1e})")


if __name__ == "__main__":
    main()
