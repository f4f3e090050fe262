"""Scale-out benchmark: images/s of the skin measurement on the local and the ray engine.

Workload: synthetic faces rendered from the 62 bundled portraits, every image different (seeded random
crop, scale, rotation and colour shift), written as JPEG to a temporary folder. For each size (default
1k / 5k / 20k, capped at --n) it measures, each in a fresh process so that peak memory is that run's own:

- local engine, 1 worker (the baseline) and 2 workers;
- ray engine, 2 CPUs (a local Ray instance; its start-up is timed apart and left out of images/s);
- at the largest size, when the results store exists (``fairvision.io.store``): a first run that fills a
  store and a second run over the same images that reads everything from it.

Then it prints the ratios the issue asks for: 2 workers vs 1 (>= 1.7x), ray vs local 2 workers (within
25%), images/s across sizes (linear throughput means flat images/s), peak driver RSS across sizes (flat),
and second run vs first (>= 50x).

    .venv/bin/python benchmarks/bench_scale.py --n 1000
    .venv/bin/python benchmarks/bench_scale.py            # 20,000 images: about an hour on 2 cores
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

PORTRAITS = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "datasets" / "data" / "portraits"


# --------------------------------------------------------------------------- workload


def render(task: tuple[int, str, str, int]) -> str:
    """One synthetic face: a portrait with a random crop, scale, rotation and colour shift (seeded)."""
    i, src, out, seed = task
    rng = np.random.default_rng([seed, i])
    with Image.open(src) as im:
        im = im.convert("RGB")
    w, h = im.size
    angle = float(rng.uniform(-12, 12))
    im = im.rotate(angle, resample=Image.BILINEAR, expand=False, fillcolor=tuple(int(v) for v in rng.integers(0, 256, 3)))
    frac = float(rng.uniform(0.78, 1.0))
    cw, ch = int(w * frac), int(h * frac)
    x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
    im = im.crop((x0, y0, x0 + cw, y0 + ch))
    side = int(rng.integers(180, 360))
    im = im.resize((side, int(round(side * ch / cw))), Image.BILINEAR)
    gains = rng.uniform(0.88, 1.12, 3)
    arr = np.asarray(im, dtype=np.float32) * gains[None, None, :]
    im = Image.fromarray(np.clip(arr, 0, 255).astype(np.uint8))
    im = ImageEnhance.Brightness(im).enhance(float(rng.uniform(0.85, 1.15)))
    im = ImageEnhance.Contrast(im).enhance(float(rng.uniform(0.85, 1.15)))
    im.save(out, "JPEG", quality=90)
    return out


def make_workload(folder: Path, n: int, seed: int, workers: int) -> list[str]:
    from fairvision.engine import imap

    sources = sorted(str(p) for p in PORTRAITS.iterdir() if p.suffix.lower() in (".jpg", ".jpeg", ".png"))
    folder.mkdir(parents=True, exist_ok=True)
    tasks = [(i, sources[i % len(sources)], str(folder / f"face_{i:06d}.jpg"), seed) for i in range(n)]
    paths = []
    for o in imap(render, tasks, workers=workers):
        if not o.ok:
            raise RuntimeError(f"rendering image {o.index}: {o.failure}")
        paths.append(o.value)
    return paths


# --------------------------------------------------------------------------- one run (in a child process)


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_one(args) -> dict:
    """Measure the first ``size`` images of the listing once; print a JSON line."""
    from fairvision.audits.settings import AuditSettings
    from fairvision.skin.batch import measure_images

    paths = Path(args.listing).read_text().split("\n")[: args.size]
    startup = 0.0
    if args.engine == "ray":
        from fairvision.engine.ray_engine import ensure_ray

        t = time.perf_counter()
        ensure_ray(None, args.workers)
        startup = time.perf_counter() - t
    kw = {}
    if args.store:
        kw["store"] = args.store
    t = time.perf_counter()
    df = measure_images(paths, settings=AuditSettings(workers=args.workers, engine=args.engine), progress=False, **kw)
    wall = time.perf_counter() - t
    s = df.attrs["summary"]
    return {"engine": args.engine, "workers": args.workers, "size": len(paths), "seconds": wall,
            "images_per_s": len(paths) / wall, "startup_s": startup, "peak_rss_mib": peak_rss_mib(),
            "measured": s["measured"], "failed": s["images"] - s["measured"], "from_store": s.get("from_cache", 0)}


def child(listing: Path, size: int, engine: str, workers: int, store: str | None = None) -> dict:
    cmd = [sys.executable, __file__, "--_run", "--listing", str(listing), "--size", str(size), "--engine", engine,
           "--workers", str(workers)]
    if store:
        cmd += ["--store", store]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def store_available() -> bool:
    if importlib.util.find_spec("fairvision.io.store") is None:
        return False
    import inspect

    from fairvision.skin.batch import measure_images

    return "store" in inspect.signature(measure_images).parameters


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20000, help="images in the workload (default 20000)")
    ap.add_argument("--sizes", default="1000,5000,20000", help="run sizes, comma-separated (capped at --n)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-ray", action="store_true", help="skip the ray engine")
    ap.add_argument("--_run", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--listing", help=argparse.SUPPRESS)
    ap.add_argument("--size", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="local", help=argparse.SUPPRESS)
    ap.add_argument("--workers", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._run:
        print(json.dumps(run_one(args)))
        return

    sizes = sorted({min(int(s), args.n) for s in args.sizes.split(",") if s.strip()})
    have_ray = importlib.util.find_spec("ray") is not None and not args.no_ray
    with tempfile.TemporaryDirectory(prefix="fairvision-bench-scale-") as tmp:
        tmp = Path(tmp)
        t = time.perf_counter()
        paths = make_workload(tmp / "faces", args.n, args.seed, workers=2)
        print(f"workload: {len(paths):,} synthetic faces from the bundled portraits "
              f"in {time.perf_counter() - t:.0f} s ({os.cpu_count()} CPUs on this machine)", flush=True)
        listing = tmp / "listing.txt"
        listing.write_text("\n".join(paths))

        rows = []
        configs = [("local", 1), ("local", 2)] + ([("ray", 2)] if have_ray else [])
        for size in sizes:
            for engine, workers in configs:
                r = child(listing, size, engine, workers)
                rows.append(r)
                extra = f", ray start-up {r['startup_s']:.1f} s (excluded)" if engine == "ray" else ""
                print(f"  {size:>6,} images  {engine:<5} {workers} worker(s): {r['images_per_s']:7.1f} images/s "
                      f"({r['seconds']:.1f} s; measured {r['measured']:,}, not measured {r['failed']:,}; "
                      f"peak driver RSS {r['peak_rss_mib']:.0f} MiB{extra})", flush=True)

        def ips(engine, workers, size):
            return next(r["images_per_s"] for r in rows if (r["engine"], r["workers"], r["size"]) == (engine, workers, size))

        print("\nratios (targets in brackets):")
        for size in sizes:
            line = f"  {size:>6,} images: 2 workers / 1 worker = {ips('local', 2, size) / ips('local', 1, size):.2f}x [>= 1.7x]"
            if have_ray:
                line += f"; ray / local (2 CPUs) = {ips('ray', 2, size) / ips('local', 2, size):.2f} [>= 0.75]"
            print(line)
        if len(sizes) > 1:
            for engine, workers in configs:
                seq = [ips(engine, workers, s) for s in sizes]
                rss = [next(r["peak_rss_mib"] for r in rows if (r["engine"], r["workers"], r["size"]) == (engine, workers, s))
                       for s in sizes]
                print(f"  {engine} {workers} worker(s): images/s " + " / ".join(f"{v:.1f}" for v in seq)
                      + f" (largest/smallest {seq[-1] / seq[0]:.2f}, linear = 1.00); peak driver RSS "
                      + " / ".join(f"{v:.0f}" for v in rss) + " MiB")

        if store_available():
            size = sizes[-1]
            store = str(tmp / "store")
            first = child(listing, size, "local", 2, store)
            second = child(listing, size, "local", 2, store)
            print(f"\nresults store, {size:,} images, local 2 workers: first run {first['seconds']:.1f} s "
                  f"({first['images_per_s']:.1f} images/s), second run {second['seconds']:.2f} s "
                  f"({second['from_store']:,} from the store): {first['seconds'] / second['seconds']:.0f}x [>= 50x]")
        else:
            print("\nresults store: fairvision.io.store is not available yet; second-run speed-up not measured")


if __name__ == "__main__":
    main()
