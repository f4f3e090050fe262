"""Benchmark of the collection-guideline checks and known-content matching (docs/METHODS.md §13.8, §13.9).

1. Policy checks over a synthetic metadata table (no decoding): sizes, EXIF flags, capture times, subjects
   (about 8 images each, some over the limit of 10), two self-reported columns, person and face boxes and 33
   keypoints per image as JSON cells, the FHIBE policy. Fast: :func:`fairvision.audits.curation.policy.audit_policy`
   (JSON cells parsed once per column, numpy). Baseline: a plain per-row Python loop (``json.loads`` per cell,
   dicts per subject) implementing the same rules; the pass / fail / not-checked status of every image and
   check is asserted equal.
2. Known-content search: N image hashes against K known hashes (some planted within 6 bits), threshold 6.
   Fast: :func:`fairvision.stats.hamming.query_matches` (multi-index hashing). Baseline: brute force in
   blocked numpy (XOR of a block of queries against every known hash, the same popcount); the matches are
   asserted equal.

Both sides run in this process with BLAS/OpenMP/OpenCV pinned to the same thread count, interleaved, median of
the runs. Default: 20,000 images (2,000 known hashes), under a minute; ``--full``: 100,000 images and 10,000
known hashes.

Run: ``.venv/bin/python benchmarks/bench_policy_checks.py [--full] [--repeats 3]``.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime

import numpy as np
import pandas as pd

from _timing import interleaved, load_note, pinned
from fairvision.audits.curation.policy import audit_policy, load_policy
from fairvision.stats.hamming import popcount64, query_matches

N_KEYPOINTS = 33


def synthetic(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    subj = rng.integers(0, max(1, n // 8), n)
    w = rng.choice([3000, 4000, 4032, 2000, 6000], n)
    h = np.where(rng.random(n) < 0.9, (w * 0.75).astype(int), (w * 0.4).astype(int))
    t0 = np.datetime64("2024-01-01T00:00:00")
    times = (t0 + rng.integers(0, 365 * 24 * 3600, n).astype("timedelta64[s]")).astype(str).astype(object)
    times[rng.random(n) < 0.05] = None
    x0, y0 = rng.uniform(0, 500, n), rng.uniform(0, 500, n)
    x1, y1 = x0 + rng.uniform(200, 1500, n), y0 + rng.uniform(400, 2500, n)
    person = [f"[{a:.1f}, {b:.1f}, {c:.1f}, {d:.1f}]" for a, b, c, d in zip(x0, y0, x1, y1)]
    fx = x0 + rng.uniform(-20, 150, n)
    fy = y0 + rng.uniform(0, 100, n)
    face = [f"[{a:.1f}, {b:.1f}, {a + 120:.1f}, {b + 150:.1f}]" for a, b in zip(fx, fy)]
    kx = x0[:, None] + rng.uniform(-0.02, 1.02, (n, N_KEYPOINTS)) * (x1 - x0)[:, None]
    ky = y0[:, None] + rng.uniform(0, 1, (n, N_KEYPOINTS)) * (y1 - y0)[:, None]
    kv = rng.integers(0, 3, (n, N_KEYPOINTS))
    kps = [json.dumps([[round(a, 1), round(b, 1), int(c)] for a, b, c in zip(kx[i], ky[i], kv[i])]) for i in range(n)]
    df = pd.DataFrame({"sample_id": [f"s{i}" for i in range(n)], "subject_id": [f"p{s}" for s in subj],
                       "readable": True, "width": w, "height": h, "has_exif": rng.random(n) < 0.95,
                       "datetime_original": times, "person_box": person, "face_box": face, "keypoints": kps,
                       "ancestry": [f"a{s % 5}" for s in subj], "natural_hair_colour": rng.choice(["x", "y"], n,
                                                                                                   p=[0.99, 0.01])})
    df.loc[rng.random(n) < 0.01, "face_box"] = None
    return df


def naive(df: pd.DataFrame, p) -> dict[str, list[str]]:
    """The same rules, one row at a time."""
    n = len(df)
    recs = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in df.to_dict("records")]
    out = {k: [] for k in ("resolution", "exif", "aspect_ratio", "images_per_subject", "time_apart",
                           "subject_consistency", "annotations", "keypoints_in_box", "face_in_person_box")}
    by_subject: dict = {}
    for i, r in enumerate(recs):
        by_subject.setdefault(r["subject_id"], []).append(i)
    nearest = [None] * n
    for rows in by_subject.values():
        dated = [(datetime.fromisoformat(recs[i]["datetime_original"]), i) for i in rows
                 if recs[i]["datetime_original"]]
        dated.sort()
        for k, (t, i) in enumerate(dated):
            gaps = [abs((t - dated[j][0]).total_seconds()) / 3600 for j in (k - 1, k + 1) if 0 <= j < len(dated)]
            nearest[i] = min(gaps) if gaps else None
    values = {c: {} for c in p.consistent_columns}
    for c in p.consistent_columns:
        for s, rows in by_subject.items():
            values[c][s] = len({recs[i][c] for i in rows})
    tol = p.tolerance_px
    for i, r in enumerate(recs):
        mp = r["width"] * r["height"] / 1e6
        out["resolution"].append("fail" if mp < p.min_megapixels else "pass")
        out["exif"].append("pass" if r["has_exif"] else "fail")
        out["aspect_ratio"].append("fail" if max(r["width"], r["height"]) / min(r["width"], r["height"])
                                   > p.max_aspect_ratio + 1e-9 else "pass")
        cnt = len(by_subject[r["subject_id"]])
        out["images_per_subject"].append("fail" if cnt > p.max_images or cnt < p.min_images else "pass")
        if r["datetime_original"] is None:
            out["time_apart"].append("not checked")
        elif nearest[i] is None:
            out["time_apart"].append("pass" if cnt == 1 else "not checked")
        else:
            out["time_apart"].append("fail" if nearest[i] < p.min_hours_apart else "pass")
        bad = any(values[c][r["subject_id"]] > 1 for c in p.consistent_columns)
        out["subject_consistency"].append("fail" if bad else "pass")
        missing = [c for c in p.required if r[c] is None]
        out["annotations"].append("fail" if missing else "pass")
        box = json.loads(r["person_box"])
        vis = [(x, y) for x, y, v in json.loads(r["keypoints"]) if v > 0]
        outside = sum(1 for x, y in vis if x < box[0] - tol or x > box[2] + tol or y < box[1] - tol or y > box[3] + tol)
        out["keypoints_in_box"].append(("fail" if outside else "pass") if vis else "not checked")
        if r["face_box"] is None:
            out["face_in_person_box"].append("not checked")
        else:
            f = json.loads(r["face_box"])
            over = max(box[0] - f[0], box[1] - f[1], f[2] - box[2], f[3] - box[3], 0)
            out["face_in_person_box"].append("fail" if over > tol else "pass")
    return out


def brute_known(q: np.ndarray, r: np.ndarray, t: int, block: int = 512) -> np.ndarray:
    out = []
    for s in range(0, len(q), block):
        d = popcount64(q[s:s + block, None] ^ r[None, :])
        i, j = np.nonzero(d <= t)
        out.append(np.stack([i + s, j, d[i, j]], axis=1))
    return np.concatenate(out) if out else np.zeros((0, 3), int)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--full", action="store_true", help="100,000 images and 10,000 known hashes")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    n, k = (100_000, 10_000) if args.full else (20_000, 2_000)
    print(load_note())
    df = synthetic(n)
    policy = load_policy()
    with pinned(args.threads):
        res = interleaved({"vectorised": lambda: audit_policy(df, policy), "naive loop": lambda: naive(df, policy)},
                          args.repeats)
    fast, slow = res["vectorised"], res["naive loop"]
    checks = fast.result.checks
    for check, expect in slow.result.items():
        got = checks.loc[checks["check"] == check, "status"].tolist()
        assert got == expect, f"{check}: the vectorised and the naive statuses differ"
    print(f"policy checks, {n:,} images ({len(slow.result)} checks, {N_KEYPOINTS} keypoints each), "
          f"{args.threads} thread(s):")
    print(f"  vectorised: {fast.line()}")
    print(f"  naive loop: {slow.line()}")
    print(f"  ratio (naive / vectorised): CPU {slow.cpu_median / fast.cpu_median:.1f}x, "
          f"wall {slow.wall_median / fast.wall_median:.1f}x; statuses equal")

    rng = np.random.default_rng(1)
    known = rng.integers(0, 2**64 - 1, size=k, dtype=np.uint64, endpoint=True)
    q = rng.integers(0, 2**64 - 1, size=n, dtype=np.uint64, endpoint=True)
    planted = rng.choice(n, 100, replace=False)
    for i in planted:
        bits = rng.choice(64, int(rng.integers(0, 7)), replace=False).astype(np.uint64)
        q[i] = known[rng.integers(0, k)] ^ (np.bitwise_or.reduce(np.uint64(1) << bits) if len(bits) else np.uint64(0))
    with pinned(args.threads):
        res = interleaved({"multi-index": lambda: query_matches(q, known, 6),
                           "brute force": lambda: brute_known(q, known, 6)}, args.repeats)
    mi, bf = res["multi-index"], res["brute force"]
    got = sorted(zip(mi.result["query"], mi.result["reference"], mi.result["distance"]))
    assert got == sorted(map(tuple, bf.result.tolist())) and set(planted) <= set(mi.result["query"])
    print(f"known-content search, {n:,} images vs {k:,} known hashes, Hamming <= 6 ({len(got)} matches, all "
          f"100 planted found), {args.threads} thread(s):")
    print(f"  multi-index: {mi.line()}")
    print(f"  brute force: {bf.line()}")
    print(f"  ratio (brute / multi-index): CPU {bf.cpu_median / mi.cpu_median:.1f}x, "
          f"wall {bf.wall_median / mi.wall_median:.1f}x; matches equal")


if __name__ == "__main__":
    main()
