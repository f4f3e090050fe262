"""Benchmark: the two engines (local process pool, Ray actors) at 1, 2, 4, 8 and 16 workers on the ``thong``
skin-colour estimator, against a plain loop in this process.

The items are real skin-pixel arrays: the CIELAB pixels (within-mask smoothed, float32) of the skin masks
that the face mesh finds in the 62 bundled portraits (``fairvision.skin.masks.skin_mask``; about 3k to 53k
pixels), repeated in turn to 3,200 and 800 items, so every item travels to a worker as the real arrays would
(``--synthetic`` uses random pixels of the same sizes instead, for a machine without the ``vision`` extra).
``fn`` is ``fairvision.skin.thong.thong``, so the workers import it and nothing else.

For each worker count (capped at the CPUs of this machine, which the output says), each item count and
each engine, the runs are interleaved (serial, local, ray[, ray before], serial, ...) and each prints

- throughput (items/s) and time to the first result of the first, cold call (Ray: the actors start), and
  the median of the later, warm calls of the same process (Ray: the actors are reused);
- speed-up (the plain loop's wall time over the engine's, warm medians) and efficiency (speed-up / workers).

``--before`` adds the Ray engine as it was before actors were kept per process (``_ray_data_engine.py``:
one Ray Data dataset and new actors per call), timed in the same run. Every engine's estimates are checked to
be bit-identical to the plain loop's. Targets (on 16 cores): efficiency >= 0.8 at 16 workers on 3,200 items
for both engines, Ray within 10% of the pool's throughput.

Run: ``.venv/bin/python benchmarks/bench_engines.py [--workers 1 2 4 8 16] [--sizes 3200 800] [--repeats 3]
[--before] [--synthetic]`` (needs the ``ray`` extra).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from _timing import load_note

from fairvision.engine import default_workers, imap
from fairvision.skin.thong import thong


def skin_arrays(synthetic: bool) -> list[np.ndarray]:
    """CIELAB skin pixels of every bundled portrait the face mesh finds a face in (or random ones, same sizes)."""
    from fairvision.datasets import load_portraits
    from fairvision.io.images import read_image
    from fairvision.skin import srgb_to_lab
    from fairvision.skin.measurement import smooth_skin_pixels

    out = []
    if synthetic:
        rng = np.random.default_rng(0)
        sizes = np.linspace(3_000, 53_000, 62).astype(int)
        return [np.c_[rng.uniform(20, 90, s), rng.uniform(0, 30, s), rng.uniform(0, 40, s)].astype(np.float32)
                for s in sizes]
    from fairvision.skin.masks import skin_mask

    for path in load_portraits().image_path:
        img = read_image(path)
        res = skin_mask(img)
        if res.mask is not None:
            out.append(srgb_to_lab(smooth_skin_pixels(img / 255.0, np.asarray(res.mask, dtype=bool))))
    return out


def key(result: dict) -> tuple:
    return tuple(np.asarray([v for v in result.values() if isinstance(v, (int, float))], dtype=np.float64).tolist())


def timed(run) -> tuple[float, float, list]:
    """Wall seconds of the whole call, seconds to its first outcome, and the outcomes in input order."""
    start = time.perf_counter()
    first = None
    out = []
    for o in run():
        if first is None:
            first = time.perf_counter() - start
        out.append(o)
    wall = time.perf_counter() - start
    out.sort(key=lambda o: o.index)
    return wall, first, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    ap.add_argument("--sizes", type=int, nargs="+", default=[3200, 800])
    ap.add_argument("--repeats", type=int, default=3, help="calls per engine and setting (the first is cold)")
    ap.add_argument("--before", action="store_true", help="also time the Ray engine as it was before")
    ap.add_argument("--synthetic", action="store_true", help="random pixels of the portraits' mask sizes")
    args = ap.parse_args()

    from fairvision.engine import ray_engine

    cpus = default_workers()
    counts = sorted({min(w, cpus) for w in args.workers})
    if max(args.workers) > cpus:
        print(f"this machine has {cpus} CPUs: worker counts above {cpus} are not run "
              f"({', '.join(str(w) for w in args.workers if w > cpus)} asked for)")
    arrays = skin_arrays(args.synthetic)
    sizes = [len(a) for a in arrays]
    print(f"{len(arrays)} skin-pixel arrays ({'synthetic' if args.synthetic else 'bundled portraits, face-mesh masks'}; "
          f"{min(sizes):,} to {max(sizes):,} pixels, median {int(np.median(sizes)):,}); fn = fairvision.skin.thong.thong")
    start = time.perf_counter()
    # with --before, room for the kept actors and the old engine's at once (idle actors use no CPU time)
    ray_engine.ensure_ray(None, max(counts) * (2 if args.before else 1))
    print(f"Ray started in {time.perf_counter() - start:.1f} s (not counted below); {load_note()}")
    print("the machine is shared with other work: absolute times vary, compare the interleaved columns")

    engines = {"local": lambda fn, items, w: imap(fn, items, workers=w, ordered=False),
               "ray": lambda fn, items, w: imap(fn, items, workers=w, ordered=False, engine="ray")}
    if args.before:
        import _ray_data_engine

        engines["ray before"] = lambda fn, items, w: _ray_data_engine.imap(fn, items, workers=w, ordered=False)

    print(f"{'workers':>7s} {'items':>6s} {'engine':>10s} | {'cold items/s':>12s} {'1st result':>10s} | "
          f"{'warm items/s':>12s} {'1st result':>10s} | {'speed-up':>8s} {'efficiency':>10s}")
    for w in counts:
        for n in args.sizes:
            items = [arrays[i % len(arrays)] for i in range(n)]
            ray_engine.close_pools()  # every setting starts cold once
            serial, walls, firsts = [], {e: [] for e in engines}, {e: [] for e in engines}
            reference = None
            for _ in range(args.repeats):
                t = time.perf_counter()
                ref = [key(thong(x)) for x in items]
                serial.append(time.perf_counter() - t)
                reference = reference or ref
                for name, run in engines.items():
                    wall, first, out = timed(lambda: run(thong, items, w))
                    walls[name].append(wall)
                    firsts[name].append(first)
                    got = [key(o.value) if o.ok else str(o.failure) for o in out]
                    assert got == reference, f"{name} at {w} workers differs from the plain loop"
            base = statistics.median(serial)
            print(f"{w:7d} {n:6d} {'plain loop':>10s} | {'':>12s} {'':>10s} | {n / base:12.0f} {'':>10s} |")
            for name in engines:
                warm = statistics.median(walls[name][1:] or walls[name])
                warm_first = statistics.median(firsts[name][1:] or firsts[name])
                speedup = base / warm
                print(f"{w:7d} {n:6d} {name:>10s} | {n / walls[name][0]:12.0f} {firsts[name][0]:9.2f}s | "
                      f"{n / warm:12.0f} {warm_first:9.2f}s | {speedup:7.2f}x {speedup / w:10.2f}")
    print("results bit-identical to the plain loop on every engine and worker count")
    print(load_note())
    ray_engine.close_pools()


if __name__ == "__main__":
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    main()
