"""Benchmark: the Vendi score against the best existing implementation, and image-embedding throughput.

1. Vendi score (docs/METHODS.md §5.3, §13.2) of float32 embeddings of 1,280 dimensions (the EfficientNet-Lite0
   width), at 100,000 and 1,000 rows: fairvision's ``vendi_score`` against ``vendi_score.vendi.score_dual``
   (the ``vendi-score`` package's own d x d path: scikit-learn ``normalize``, ``X.T @ X``, ``scipy.linalg.eigvalsh``;
   extra ``bench``). BLAS and OpenMP pinned to 1 thread on both sides, runs interleaved (A, B, A, B, ...),
   medians of CPU and wall time, peak extra memory (tracemalloc) and the value of each against a float64
   reference (unit rows in float64, the d x d matrix summed in float64 with numpy).
2. At small n the definition itself, the eigenvalues of the n x n kernel ``K / n``: time and agreement.
3. float32 against float64 on sets built to be hard for float32 (rank-deficient, near-duplicate rows, row
   weights, a steep spectrum): relative difference of ``vendi_score`` to the float64 reference, and whether
   the float32 spectrum reached ``FLOAT32_FLOOR`` (then the matrix is recomputed in float64).
4. The arithmetic floor: how fast this core multiplies float32 matrices at all (numpy's ``X.T @ X``, which OpenBLAS
   runs as the half-size symmetric product ssyrk, and a general sgemm of the same shape), the n d (d + 1) flops
   every exact d x d method must do, and so the largest speed-up over ``score_dual`` that any method computing
   ``X^T X`` in float32 could reach on this machine.
5. EfficientNet-Lite0 embeddings (docs/METHODS.md §13.1) of the bundled portraits on 2 threads: batches of 32
   against one image at a time, in images per second (extra ``embed``; skipped without torch).

    python benchmarks/bench_vendi.py [--n 100000] [--d 1280] [--repeats 3] [--n-small 2000] [--n-accuracy 20000]
                                     [--images 62]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _timing import interleaved, load_note, peak_bytes, pinned

import fairvision.stats.diversity as diversity
from fairvision.stats.diversity import vendi_score


def clustered(n: int, d: int, rng) -> np.ndarray:
    """Embeddings with structure (200 clusters plus noise), float32 as models write them."""
    centres = rng.normal(size=(200, d))
    return (centres[rng.integers(0, 200, n)] + 0.8 * rng.normal(size=(n, d))).astype(np.float32)


def reference64(x: np.ndarray) -> float:
    """Float64 reference: unit rows in float64, X^T X / n summed over chunks with numpy, float64 eigenvalues."""
    acc = np.zeros((x.shape[1], x.shape[1]))
    for s in range(0, len(x), 4096):
        u = x[s:s + 4096].astype(np.float64)
        u /= np.linalg.norm(u, axis=1, keepdims=True)
        acc += u.T @ u
    lam = np.linalg.eigvalsh(acc / len(x))
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))


def vendi_nxn(x: np.ndarray) -> float:
    """The definition: eigenvalues of the n x n cosine kernel divided by n (float64)."""
    x = x.astype(np.float64)
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    lam = np.linalg.eigvalsh(x @ x.T / len(x))
    lam = lam[lam > 1e-12]
    return float(np.exp(-np.sum(lam * np.log(lam))))


def compare_with_score_dual(x: np.ndarray, repeats: int) -> None:
    from vendi_score import vendi

    n, d = x.shape
    ref = reference64(x)
    with pinned(1):
        vendi_score(x[:2000]), vendi.score_dual(x[:2000])  # warm-up: imports, BLAS buffers
        t = interleaved({"fairvision": lambda: vendi_score(x), "score_dual": lambda: float(vendi.score_dual(x))},
                        repeats)
        mem = {"fairvision": peak_bytes(lambda: vendi_score(x)), "score_dual": peak_bytes(lambda: vendi.score_dual(x))}
    ours, theirs = t["fairvision"], t["score_dual"]
    print(f"{n:,} x {d:,} float32 ({x.nbytes / 2**20:.0f} MiB), 1 thread, {repeats} interleaved runs:")
    for name, tm in t.items():
        print(f"  {name:10s}: {tm.line()}; peak extra memory {mem[name] / 2**20:6.0f} MiB; "
              f"VS = {tm.result:.6f}, relative difference to float64 {abs(tm.result - ref) / ref:.1e}")
    print(f"  ratio score_dual / fairvision: CPU {theirs.cpu_median / ours.cpu_median:.2f}x, "
          f"wall {theirs.wall_median / ours.wall_median:.2f}x")


def arithmetic_floor(x: np.ndarray, repeats: int) -> None:
    """The float32 matrix-product rate of this core, 1 thread, and the bound it puts on any exact d x d method."""
    from vendi_score import vendi

    n, d = x.shape
    import scipy.linalg

    other = np.ascontiguousarray(x[::-1])  # a different buffer: numpy cannot take the symmetric (syrk) path
    gram = (x.T @ x) / n
    with pinned(1):
        t = interleaved({"syrk": lambda: x.T @ x, "gemm": lambda: x.T @ other,
                         "eigvalsh": lambda: scipy.linalg.eigvalsh(gram),
                         "score_dual": lambda: float(vendi.score_dual(x))}, repeats)
    flops = n * d * (d + 1)  # the d (d + 1) / 2 distinct entries of X^T X, n multiply-adds each
    syrk, gemm = t["syrk"].cpu_median, t["gemm"].cpu_median
    rate = max(flops / syrk, 2 * n * d * d / gemm)  # gemm computes all d^2 entries: 2 n d^2 flops
    best = flops / rate + t["eigvalsh"].cpu_median  # and the cheapest eigenvalues (float32, as score_dual's)
    print(f"arithmetic floor, {n:,} x {d:,} float32, 1 thread, {repeats} interleaved runs: X^T X (ssyrk) "
          f"{syrk:.2f} s CPU = {flops / syrk / 1e9:.0f} GFLOP/s; general sgemm of the same shape {gemm:.2f} s = "
          f"{2 * n * d * d / gemm / 1e9:.0f} GFLOP/s")
    print(f"  score_dual {t['score_dual'].cpu_median:.2f} s, of which the product is {syrk / t['score_dual'].cpu_median:.0%}; "
          f"the float32 eigenvalues of the d x d matrix take {t['eigvalsh'].cpu_median:.2f} s; any exact method that forms "
          f"X^T X in float32 at this core's best rate and takes its eigenvalues needs >= {best:.2f} s: at most "
          f"{t['score_dual'].cpu_median / best:.2f}x score_dual")


def compare_with_definition(x: np.ndarray) -> None:
    with pinned(1):
        t = interleaved({"fairvision": lambda: vendi_score(x), "n x n": lambda: vendi_nxn(x)}, 3)
    ours, nxn = t["fairvision"], t["n x n"]
    print(f"n = {len(x):,} against the n x n definition, 1 thread: fairvision CPU {ours.cpu_median:.3f} s, "
          f"n x n eigen-decomposition CPU {nxn.cpu_median:.2f} s (ratio {nxn.cpu_median / ours.cpu_median:.0f}x); "
          f"scores {ours.result:.6f} vs {nxn.result:.6f} (relative difference "
          f"{abs(ours.result - nxn.result) / nxn.result:.1e})")


def float32_accuracy(n: int, d: int, rng) -> None:
    """Relative difference of vendi_score on float32 embeddings to the float64 reference, on hard sets."""
    base = rng.normal(size=(30, d))
    q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    sets = {
        "clustered": (clustered(n, d, rng), None),
        "rank 5": ((rng.normal(size=(n, 5)) @ rng.normal(size=(5, d))).astype(np.float32), None),
        "rank 200, weights": ((rng.normal(size=(n, 200)) @ rng.normal(size=(200, d))).astype(np.float32),
                              rng.integers(0, 5, n)),
        "near-duplicates": ((base[rng.integers(0, 30, n)] + 1e-4 * rng.normal(size=(n, d))).astype(np.float32), None),
        "spectrum k^-1.2": (((rng.normal(size=(n, d)) * np.arange(1, d + 1) ** -1.2) @ q).astype(np.float32), None),
    }
    print(f"float32 against float64, {n:,} x {d:,} (relative difference of the score; float64 recomputation "
          f"when an eigenvalue of the float32 matrix is below {diversity.FLOAT32_FLOOR:g} of the largest):")
    for name, (x, w) in sets.items():
        ref = vendi_score(x.astype(np.float64), weights=w)
        floor = diversity.FLOAT32_FLOOR
        try:
            diversity.FLOAT32_FLOOR = -np.inf  # float32 products only
            only32 = vendi_score(x, weights=w)
        finally:
            diversity.FLOAT32_FLOOR = floor
        got = vendi_score(x, weights=w)
        print(f"  {name:18s}: float32 products only {abs(only32 - ref) / ref:.1e}; vendi_score "
              f"{abs(got - ref) / ref:.1e} ({'recomputed in float64' if got != only32 else 'float32'})")


def embedder_throughput(n_images: int) -> None:
    if n_images <= 0:
        return
    try:
        import torch  # noqa: F401 (the embed extra is optional)

        from fairvision.vision.image_embedder import ImageEmbedder
    except ImportError as exc:
        print(f"image embeddings skipped ({exc})")
        return
    from fairvision.datasets.demo import load_portraits
    from fairvision.io.images import read_image

    paths = list(load_portraits()["image_path"])[:n_images]
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--d", type=int, default=1280)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-small", type=int, default=2000)
    ap.add_argument("--images", type=int, default=62)
    ap.add_argument("--n-accuracy", type=int, default=20_000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(load_note())

    x = clustered(args.n, args.d, rng)
    compare_with_score_dual(x, args.repeats)
    arithmetic_floor(x, args.repeats)
    compare_with_score_dual(x[:1000], max(args.repeats, 7))
    compare_with_definition(x[: args.n_small])
    float32_accuracy(args.n_accuracy, args.d, rng)
    embedder_throughput(args.images)


if __name__ == "__main__":
    main()
