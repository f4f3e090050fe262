"""Skin colour categories (docs/METHODS.md §1.4).

- Thong et al. (after Ly et al.): tone light if L* >= 60 else dark; hue yellow
  if h* >= 55 deg else red (both thresholds configurable).
- ITA classes (Chardon; Del Bino), intervals closed on the right:
  dark (-inf, -30], brown (-30, 10], tan (10, 28], intermediate (28, 41],
  light (41, 55], very light (55, inf); Khaziev et al. name them ST1 (dark)
  ... ST6 (very light).
- Coarse Fitzpatrick proxy: ITA > 28 -> "I-III", else "IV-VI".
- Monk Skin Tone: the nearest of the 10 reference sRGB colours by CIEDE2000.

All categorical outputs are ordered pandas Categoricals with every category
declared, so empty classes still show in counts.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError
from fairvision.skin.colour import ciede2000, srgb_to_lab

__all__ = [
    "TONES", "HUES", "TONE_HUE", "ITA_CLASSES", "ST_CLASSES", "FITZPATRICK", "MONK_SRGB", "MONK_LABELS", "ITA_EDGES",
    "tone_hue_category", "ita_class", "st_class", "fitzpatrick_proxy", "monk_tone", "categorize", "add_categories",
]

TONES = ("light", "dark")
HUES = ("red", "yellow")
TONE_HUE = ("light-red", "light-yellow", "dark-red", "dark-yellow")
ITA_EDGES = (-np.inf, -30.0, 10.0, 28.0, 41.0, 55.0, np.inf)
ITA_CLASSES = ("dark", "brown", "tan", "intermediate", "light", "very light")  # ascending ITA
ST_CLASSES = ("ST1", "ST2", "ST3", "ST4", "ST5", "ST6")  # ST1 = darkest
FITZPATRICK = ("I-III", "IV-VI")
#: Monk Skin Tone scale reference colours (docs/METHODS.md §1.4).
MONK_SRGB = ("#f6ede4", "#f3e7db", "#f7ead0", "#eadaba", "#d7bd96", "#a07e56", "#825c43", "#604134", "#3a312a", "#292420")
MONK_LABELS = tuple(f"MST{i}" for i in range(1, 11))


def _cat(values, categories) -> pd.Categorical:
    return pd.Categorical(values, categories=list(categories), ordered=True)


def _float(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def tone_hue_category(L, hue, *, L_threshold: float = 60.0, hue_threshold: float = 55.0):
    """Thong et al. tone (light/dark) and hue (red/yellow) classes.

    Parameters
    ----------
    L, hue : array_like
        L* and hue angle h* in degrees ([0, 360); angles above 180 are read as
        negative, i.e. red).
    L_threshold, hue_threshold : float
        Light if L* >= ``L_threshold``; yellow if h* >= ``hue_threshold``.

    Returns
    -------
    tone, hue_class, combined : pandas.Categorical
        NaN inputs give missing categories.
    """
    L = _float(L)
    h = _float(hue)
    h = np.where(h > 180.0, h - 360.0, h)
    okL, okh = np.isfinite(L), np.isfinite(h)
    tone = np.where(okL, np.where(L >= L_threshold, "light", "dark"), None)
    hc = np.where(okh, np.where(h >= hue_threshold, "yellow", "red"), None)
    comb = np.where(okL & okh, np.char.add(np.char.add(tone.astype(str), "-"), hc.astype(str)), None)
    return _cat(tone, TONES), _cat(hc, HUES), _cat(comb, TONE_HUE)


def ita_class(ita_values) -> pd.Categorical:
    """The six ITA classes (dark ... very light), intervals closed on the right."""
    return pd.cut(_float(ita_values), bins=list(ITA_EDGES), labels=list(ITA_CLASSES), right=True, ordered=True)


def st_class(ita_values) -> pd.Categorical:
    """Khaziev et al.'s ST1 (darkest, ITA <= -30) ... ST6 (ITA > 55)."""
    return pd.cut(_float(ita_values), bins=list(ITA_EDGES), labels=list(ST_CLASSES), right=True, ordered=True)


def fitzpatrick_proxy(ita_values) -> pd.Categorical:
    """Coarse Fitzpatrick proxy: ITA > 28 -> "I-III", otherwise "IV-VI"."""
    x = _float(ita_values)
    return _cat(np.where(np.isfinite(x), np.where(x > 28.0, "I-III", "IV-VI"), None), FITZPATRICK)


def _monk_lab() -> np.ndarray:
    rgb = np.array([[int(h[i:i + 2], 16) for i in (1, 3, 5)] for h in MONK_SRGB], dtype=np.uint8)
    return srgb_to_lab(rgb, dtype=np.float64)


def monk_tone(lab) -> tuple[pd.Categorical, np.ndarray]:
    """Nearest Monk Skin Tone by CIEDE2000 in CIELAB.

    Parameters
    ----------
    lab : array_like, shape (N, 3) or (3,)

    Returns
    -------
    labels : pandas.Categorical of "MST1" ... "MST10"
    delta_e : (N,) float
        CIEDE2000 distance to the chosen reference (how well it fits).
    """
    lab = np.atleast_2d(_float(lab))
    d = ciede2000(lab[:, None, :], _monk_lab()[None, :, :])
    ok = np.isfinite(d).all(axis=1)
    idx = np.where(ok, np.nanargmin(np.where(np.isfinite(d), d, np.inf), axis=1), 0)
    labels = np.where(ok, np.array(MONK_LABELS, dtype=object)[idx], None)
    dist = np.where(ok, d[np.arange(len(d)), idx], np.nan)
    return _cat(labels, MONK_LABELS), dist


def categorize(m, *, L_threshold: float = 60.0, hue_threshold: float = 55.0) -> dict:
    """All categories of one :class:`~fairvision.skin.measurement.SkinMeasurement` as a dict of strings."""
    row = pd.DataFrame([{"L": m.L, "a": m.a, "b": m.b, "hue": m.hue, "ita": m.ita}])
    out = add_categories(row, L_threshold=L_threshold, hue_threshold=hue_threshold)
    return {c: (None if pd.isna(v) else (v if isinstance(v, str) else float(v))) for c, v in out.iloc[0].items() if c not in row}


def add_categories(df: pd.DataFrame, *, L: str = "L", a: str = "a", b: str = "b", hue: str = "hue", ita: str = "ita",
                   L_threshold: float = 60.0, hue_threshold: float = 55.0, monk: bool = True) -> pd.DataFrame:
    """Add skin colour categories as columns, so they can be crossed with other attributes.

    Adds ``skin_tone`` (light/dark), ``skin_hue`` (red/yellow), ``skin_colour``
    (the four combinations), ``ita_class``, ``st_class``, ``fitzpatrick_proxy``,
    and with ``monk`` ``monk_tone`` and ``monk_delta_e``. Rows whose measurement
    failed (NaN) get missing categories.

    Raises
    ------
    ColumnError
        A needed column is missing.
    """
    need = [L, hue, ita] + ([a, b] if monk else [])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ColumnError(f"skin categories need column(s) {', '.join(missing)}; the table has {', '.join(map(str, df.columns))}")
    out = df.copy()
    tone, hc, comb = tone_hue_category(out[L], out[hue], L_threshold=L_threshold, hue_threshold=hue_threshold)
    out["skin_tone"] = tone
    out["skin_hue"] = hc
    out["skin_colour"] = comb
    out["ita_class"] = ita_class(out[ita])
    out["st_class"] = st_class(out[ita])
    out["fitzpatrick_proxy"] = fitzpatrick_proxy(out[ita])
    if monk:
        labels, dist = monk_tone(out[[L, a, b]].to_numpy(dtype=np.float64))
        out["monk_tone"] = labels
        out["monk_delta_e"] = dist
    return out
