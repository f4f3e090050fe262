"""Benchmark of building face-verification pairs from a sample table (docs/METHODS.md §6.1), next to a naive baseline.

20,000 images of 5,000 people (4 each), two pronouns, six skin tone levels; every genuine pair plus FHIBE's hard
impostors (same pronoun, tone within one level), capped at 1,000,000 impostors drawn uniformly with a seed:

- fast: ``fairvision.audits.verification_pairs.build_pairs``: genuine pairs by index arithmetic per identity size,
  impostors by numbering the candidate pairs of every (pronoun, tone) block with itself and with the next tone,
  drawing positions without replacement and decoding them to sample indices (no pair loop, memory grows with the
  cap, not with the about 40 million candidates);
- naive: the double loop most scripts write (every pair of images, test the rule, keep the hard impostors, then
  ``random.sample`` the cap). It runs on ``NAIVE_N`` images and its time is scaled to 20,000 by the number of pairs
  (it is quadratic in the images).

Checks: on a 300-image table both sides give the same genuine pairs and the same set of all hard impostors.

Run: ``.venv/bin/python benchmarks/bench_verification_pairs.py`` (about 20 s); ``--quick``: 5,000 images.
"""

from __future__ import annotations

import random
import sys
import time

import numpy as np
import pandas as pd

sys.path.insert(0, "src")
sys.path.insert(0, "benchmarks")
QUICK = "--quick" in sys.argv
N = 5_000 if QUICK else 20_000
NAIVE_N = 1_000 if QUICK else 2_000
CAP = 1_000_000

from _timing import load_note, pinned, subjects  # noqa: E402

from fairvision.audits.verification_pairs import PairRule, build_pairs  # noqa: E402


def table(n: int, seed: int = 0) -> pd.DataFrame:
    rng, people, subj = subjects(n, 4, seed)
    return pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "subject_id": subj.astype(str),
                         "pronoun": rng.choice(["he/him", "she/her"], people)[subj],
                         "skin_tone": rng.integers(1, 7, people)[subj]})


def naive(data: pd.DataFrame, cap: int | None, seed: int = 0):
    ids, person = data.sample_id.tolist(), data.subject_id.tolist()
    pron, tone = data.pronoun.tolist(), data.skin_tone.tolist()
    gen, imp = [], []
    for a in range(len(ids)):
        for b in range(a + 1, len(ids)):
            if person[a] == person[b]:
                gen.append((ids[a], ids[b]))
            elif pron[a] == pron[b] and abs(tone[a] - tone[b]) <= 1:
                imp.append((ids[a], ids[b]))
    if cap is not None and len(imp) > cap:
        imp = random.Random(seed).sample(imp, cap)
    return gen, imp


def main() -> None:
    small = table(300, seed=1)
    fast = build_pairs(small, "subject_id", PairRule(max_impostors=None))
    gen, imp = naive(small, None)
    key = lambda a, b: tuple(sorted((a, b)))  # noqa: E731
    fg = {key(a, b) for a, b, s in zip(fast.sample_a, fast.sample_b, fast.same_subject) if s}
    fi = {key(a, b) for a, b, s in zip(fast.sample_a, fast.sample_b, fast.same_subject) if not s}
    assert fg == {key(*p) for p in gen} and fi == {key(*p) for p in imp}, "fast and naive pairs differ"
    print(f"check: 300 images, {len(fg):,} genuine and {len(fi):,} hard impostor pairs, same on both sides")

    data = table(N)
    print(f"{N:,} images, impostor cap {CAP:,}; {load_note()}")
    with pinned(1):
        t0, c0 = time.perf_counter(), time.process_time()
        pairs = build_pairs(data, "subject_id", PairRule(max_impostors=CAP), seed=0)
        fast_wall, fast_cpu = time.perf_counter() - t0, time.process_time() - c0
        sub = data.iloc[:NAIVE_N]
        t0, c0 = time.perf_counter(), time.process_time()
        naive(sub, CAP)
        nw, nc = time.perf_counter() - t0, time.process_time() - c0
    scale = (N * (N - 1)) / (NAIVE_N * (NAIVE_N - 1))
    print(f"fast : {fast_wall:8.2f} s wall {fast_cpu:8.2f} s CPU  ({int(pairs.same_subject.sum()):,} genuine, "
          f"{int((~pairs.same_subject).sum()):,} impostors)")
    print(f"naive: {nw * scale:8.2f} s wall {nc * scale:8.2f} s CPU  (measured on {NAIVE_N:,} images: {nw:.2f} s, "
          f"x{scale:.0f} pairs)")
    print(f"ratio: {nc * scale / max(fast_cpu, 1e-9):.0f}x less CPU")


if __name__ == "__main__":
    main()
