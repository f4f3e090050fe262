"""Benchmark of the skin colour stability pieces (docs/METHODS.md §2.6, §2.7), each next to a naive baseline.

1. Per-subject spread: SD and range of L*, h* (circular) and ITA and the light/dark flips of every subject of a
   measurement table (100,000 rows, 4 images a subject with ``--full``; 10,000 by default):
   - fast: ``fairvision.stats.spread.subject_spread`` / ``category_flips`` (``numpy.bincount`` and one sort,
     no loop over subjects);
   - naive: a pandas ``groupby(subject).apply`` of a Python function computing the same numbers per subject
     (the circular hue by its mean direction and wrapped deviations), the loop most scripts write.
   Check: both give the same numbers (to 1e-9).
2. Relighting: every lighting edit of the default steps (5 exposures, 5 white balances, 5 gammas) plus the RMS
   contrast of each copy, for the bundled portraits (500 x 500; 4 by default, all 62 with ``--full``):
   - fast: ``fairvision.skin.relight.apply_edit`` (one 256-entry table per channel) and ``rms_contrast``
     (a 256-entry table of linear values);
   - naive: per image and step, the whole image in float64 through colour-science's sRGB decoding and
     encoding, and scikit-image's ``rgb2lab`` for the contrast.
   Check: the edited pixels differ by at most 1 (rounding ties) and the contrasts by < 1e-3.

Both sides run single-threaded (``_timing.pinned(1)``), interleaved, median of the runs; CPU and wall time.
Run: ``.venv/bin/python benchmarks/bench_skin_relight.py`` (under a minute on 2 cores); ``--full`` for the sizes
above.
"""

from __future__ import annotations

import sys

import numpy as np
import pandas as pd

sys.path.insert(0, "src")
sys.path.insert(0, "benchmarks")
FULL = "--full" in sys.argv
N_ROWS = 100_000 if FULL else 10_000
N_IMAGES = 62 if FULL else 4
REPEATS = 3

import colour  # noqa: E402
from _timing import interleaved, load_note, pinned, subjects  # noqa: E402
from skimage.color import rgb2lab  # noqa: E402

from fairvision.datasets import load_portraits  # noqa: E402
from fairvision.io.images import read_image  # noqa: E402
from fairvision.skin.relight import EDITS, apply_edit, edit_steps, rms_contrast, white_balance_gains  # noqa: E402
from fairvision.stats.spread import category_flips, subject_spread  # noqa: E402


def make_table(n: int, seed: int = 0) -> pd.DataFrame:
    rng, people, subj = subjects(n, 4, seed)
    L = rng.normal(60, 8, people)[subj] + rng.normal(0, 2, n)
    hue = (rng.normal(30, 25, people)[subj] + rng.normal(0, 4, n)) % 360  # some subjects straddle 0 degrees
    return pd.DataFrame({"subject": subj, "L": L, "hue": hue, "ita": (L - 50) * 1.2})


def spread_fast(df: pd.DataFrame) -> pd.DataFrame:
    s = df["subject"].to_numpy()
    out = {}
    for col, circ in (("L", False), ("hue", True), ("ita", False)):
        sp = subject_spread(df[col].to_numpy(), s, circular=circ)
        out[f"sd_{col}"], out[f"range_{col}"] = sp["sd"].to_numpy(), sp["range"].to_numpy()
    out["flip"] = category_flips((df["L"] >= 60).to_numpy().astype(int), s)["flips"].to_numpy()
    return pd.DataFrame(out)


def _one(g: pd.DataFrame) -> pd.Series:
    rad = np.radians(g["hue"].to_numpy())
    mean = np.degrees(np.arctan2(np.sin(rad).sum(), np.cos(rad).sum()))
    dev = (g["hue"].to_numpy() - mean + 180) % 360 - 180
    return pd.Series({"sd_L": g["L"].std(ddof=1), "range_L": np.ptp(g["L"]), "sd_hue": np.std(dev, ddof=1),
                      "range_hue": np.ptp(dev), "sd_ita": g["ita"].std(ddof=1), "range_ita": np.ptp(g["ita"]),
                      "flip": (g["L"] >= 60).nunique() > 1})


def spread_naive(df: pd.DataFrame) -> pd.DataFrame:
    return df.groupby("subject").apply(_one, include_groups=False).reset_index(drop=True)


def steps() -> list[tuple[str, float]]:
    return [(e, float(s)) for e in EDITS for s in edit_steps(e, 5)]


def relight_fast(images) -> list:
    out = []
    for img in images:
        for e, s in steps():
            copy = apply_edit(img, e, s)
            out.append((copy, rms_contrast(copy)[0]))
    return out


def _naive_edit(img: np.ndarray, edit: str, s: float) -> np.ndarray:
    v = img / 255.0
    if edit == "gamma":
        out = v ** s
    else:
        gains = white_balance_gains(s) if edit == "white-balance" else np.full(3, 2.0 ** s)
        lin = colour.cctf_decoding(v, function="sRGB") * gains
        out = colour.cctf_encoding(np.clip(lin, 0, 1), function="sRGB")
    return np.rint(np.clip(out, 0, 1) * 255).astype(np.uint8)


def relight_naive(images) -> list:
    out = []
    for img in images:
        for e, s in steps():
            copy = _naive_edit(img, e, s)
            out.append((copy, float((rgb2lab(copy)[..., 0] / 100.0).std())))
    return out


def main() -> None:
    print(load_note())
    df = make_table(N_ROWS)
    with pinned(1):
        t = interleaved({"fast": lambda: spread_fast(df), "naive": lambda: spread_naive(df)}, REPEATS)
    a, b = t["fast"].result, t["naive"].result
    for col in b.columns:
        np.testing.assert_allclose(a[col].to_numpy(dtype=float), b[col].to_numpy(dtype=float), atol=1e-9)
    print(f"per-subject spread, {N_ROWS:,} rows ({N_ROWS // 4:,} subjects): same numbers")
    print(f"  fast  (bincount):             {t['fast'].line()}")
    print(f"  naive (groupby-apply):        {t['naive'].line()}")
    print(f"  ratio naive / fast: CPU {t['naive'].cpu_median / t['fast'].cpu_median:.0f}x, "
          f"wall {t['naive'].wall_median / t['fast'].wall_median:.0f}x")

    images = [read_image(p) for p in load_portraits()["image_path"].head(N_IMAGES)]
    with pinned(1):
        t = interleaved({"fast": lambda: relight_fast(images), "naive": lambda: relight_naive(images)}, REPEATS)
    worst_px = max(int(np.abs(x[0].astype(int) - y[0].astype(int)).max()) for x, y in
                   zip(t["fast"].result, t["naive"].result))
    worst_c = max(abs(x[1] - y[1]) for x, y in zip(t["fast"].result, t["naive"].result))
    assert worst_px <= 1 and worst_c < 1e-3, (worst_px, worst_c)
    print(f"relighting, {N_IMAGES} portraits x {len(steps())} copies + RMS contrast: pixels within {worst_px}, "
          f"contrast within {worst_c:.1e}")
    print(f"  fast  (lookup tables):        {t['fast'].line()}")
    print(f"  naive (float64 per image):    {t['naive'].line()}")
    print(f"  ratio naive / fast: CPU {t['naive'].cpu_median / t['fast'].cpu_median:.1f}x, "
          f"wall {t['naive'].wall_median / t['fast'].wall_median:.1f}x")


if __name__ == "__main__":
    main()
