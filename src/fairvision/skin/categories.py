"""Skin colour categories (docs/METHODS.md §1.4).

- Thong et al. (after Ly et al.): tone light if L* >= 60 else dark; hue yellow
  if h* >= 55 deg else red (both thresholds configurable).
- ITA classes (Chardon; Del Bino), intervals closed on the right:
  dark (-inf, -30], brown (-30, 10], tan (10, 28], intermediate (28, 41],
  light (41, 55], very light (55, inf); Khaziev et al. name them ST1 (dark)
  ... ST6 (very light). Other boundaries by name (``paper``: Khaziev's Table 3,
  the same edges closed on the left) or as five numbers (:func:`parse_ita_boundaries`).
- Coarse Fitzpatrick proxy: ITA > 28 -> "I-III", else "IV-VI".
- Monk Skin Tone: the nearest of the 10 reference sRGB colours by CIEDE2000.

All categorical outputs are ordered pandas Categoricals with every category
declared, so empty classes still show in counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from fairvision.errors import ColumnError, ParameterError
from fairvision.skin.colour import ciede2000, srgb_to_lab

__all__ = [
    "TONES", "HUES", "TONE_HUE", "ITA_CLASSES", "ST_CLASSES", "FITZPATRICK", "MONK_SRGB", "MONK_LABELS", "ITA_EDGES",
    "L_THRESHOLD", "HUE_THRESHOLD", "ITA_BOUNDARY_SETS", "ItaBoundaries", "parse_ita_boundaries", "check_thresholds",
    "category_options_meta", "achromatic_rows", "tone_hue_category", "ita_class", "st_class", "fitzpatrick_proxy", "monk_tone", "categorize", "add_categories",
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
#: Thong et al.'s thresholds (after Ly et al.): light if L* >= 60, yellow if h* >= 55 deg
L_THRESHOLD = 60.0
HUE_THRESHOLD = 55.0
#: named ITA boundary sets: the five inner edges and which side of each interval is closed
ITA_BOUNDARY_SETS = {
    "chardon": ((-30.0, 10.0, 28.0, 41.0, 55.0), "right"),  # Chardon et al. / Del Bino et al.; the default
    "paper": ((-30.0, 10.0, 28.0, 41.0, 55.0), "left"),  # Khaziev et al. Table 3: -30 <= ITA < 10 is ST2
}


@dataclass(frozen=True)
class ItaBoundaries:
    """The five inner ITA edges of the six classes (ascending) and the closed side of every interval.

    ``name`` is a key of :data:`ITA_BOUNDARY_SETS` or ``"custom"`` (docs/METHODS.md §1.4).
    """

    name: str
    edges: tuple
    closed: str = "right"

    @property
    def bins(self) -> list:
        return [-np.inf, *self.edges, np.inf]

    @property
    def is_default(self) -> bool:
        return self.edges == ITA_BOUNDARY_SETS["chardon"][0] and self.closed == "right"

    def describe(self) -> str:
        """``"paper (-30, 10, 28, 41, 55; closed on the left)"``."""
        return f"{self.name} ({', '.join(f'{e:g}' for e in self.edges)}; closed on the {self.closed})"

    def ranges(self, labels=ST_CLASSES) -> list[str]:
        """Each class's interval in words, e.g. ``"(-30, 10]"`` or ``"[-30, 10)"``."""
        b = [f"{e:g}" for e in self.edges]
        lo = ["-inf", *b]
        hi = [*b, "inf"]
        if self.closed == "right":
            return [f"({x}, {y}{')' if y == 'inf' else ']'}" for x, y in zip(lo, hi)][:len(labels)]
        return [f"{'(' if x == '-inf' else '['}{x}, {y})" for x, y in zip(lo, hi)][:len(labels)]


def parse_ita_boundaries(spec=None) -> ItaBoundaries:
    """ITA class boundaries from a name (``chardon``, the default; ``paper``: Khaziev et al.'s Table 3, closed
    on the left), five increasing numbers (a sequence or ``"a,b,c,d,e"``, intervals closed on the right), or an
    :class:`ItaBoundaries` (docs/METHODS.md §1.4).

    Raises
    ------
    ParameterError
        An unknown name, not five numbers, a number that is not finite, or edges that do not increase.
    """
    if spec is None:
        spec = "chardon"
    if isinstance(spec, ItaBoundaries):
        return spec
    if isinstance(spec, str):
        key = spec.strip().lower()
        if key in ITA_BOUNDARY_SETS:
            edges, closed = ITA_BOUNDARY_SETS[key]
            return ItaBoundaries(key, edges, closed)
        parts = [x.strip() for x in key.split(",")]
        if len(parts) == 1:
            raise ParameterError("ita_boundaries", f"must be {' or '.join(ITA_BOUNDARY_SETS)} or five comma-separated "
                                                   f"numbers, not {spec!r}")
        try:
            values = [float(x) for x in parts]
        except ValueError:
            raise ParameterError("ita_boundaries", f"must be five comma-separated numbers, not {spec!r}") from None
    else:
        try:
            values = [float(x) for x in spec]
        except (TypeError, ValueError):
            raise ParameterError("ita_boundaries", f"must be a name or five numbers, not {spec!r}") from None
    if len(values) != 5:
        raise ParameterError("ita_boundaries", f"needs five edges (six classes ST1-ST6), got {len(values)}")
    if not all(math.isfinite(v) for v in values):
        raise ParameterError("ita_boundaries", f"edges must be finite numbers, not {spec!r}")
    if any(b <= a for a, b in zip(values, values[1:])):
        raise ParameterError("ita_boundaries", f"edges must increase (darkest class first), not {spec!r}")
    if any(abs(v) > 90.0 for v in values):
        raise ParameterError("ita_boundaries", f"edges must lie within -90..90 degrees (ITA is an angle), not {spec!r}")
    return ItaBoundaries("custom", tuple(values), "right")


def check_thresholds(L_threshold: float, hue_threshold: float) -> tuple[float, float]:
    """The Thong thresholds as floats, checked: L* within 0..100, h* within -180..180 degrees (docs/METHODS.md §1.4).

    Raises
    ------
    ParameterError
        A threshold that is not a finite number or lies outside its range.
    """
    out = []
    for name, value, lo, hi in (("L_threshold", L_threshold, 0.0, 100.0), ("hue_threshold", hue_threshold, -180.0, 180.0)):
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise ParameterError(name, f"must be a number, not {value!r}") from None
        if not math.isfinite(v) or not lo <= v <= hi:
            raise ParameterError(name, f"must lie within {lo:g}..{hi:g}, not {value!r}")
        out.append(v)
    return out[0], out[1]


def category_options_meta(L_threshold: float, hue_threshold: float, boundaries: ItaBoundaries) -> dict:
    """The category options as report meta: ``L_threshold``, ``hue_threshold``, ``ita_boundaries`` (its description)."""
    return {"L_threshold": float(L_threshold), "hue_threshold": float(hue_threshold),
            "ita_boundaries": boundaries.describe()}


def _cat(values, categories) -> pd.Categorical:
    return pd.Categorical(values, categories=list(categories), ordered=True)


def _float(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def tone_hue_category(L, hue, *, L_threshold: float = L_THRESHOLD, hue_threshold: float = HUE_THRESHOLD):
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


def ita_class(ita_values, boundaries=None) -> pd.Categorical:
    """The six ITA classes (dark ... very light); default boundaries closed on the right (:func:`parse_ita_boundaries`)."""
    bd = parse_ita_boundaries(boundaries)
    return pd.cut(_float(ita_values), bins=bd.bins, labels=list(ITA_CLASSES), right=bd.closed == "right", ordered=True)


def st_class(ita_values, boundaries=None) -> pd.Categorical:
    """Khaziev et al.'s ST1 (darkest, ITA <= -30) ... ST6 (ITA > 55); other boundaries: :func:`parse_ita_boundaries`."""
    bd = parse_ita_boundaries(boundaries)
    return pd.cut(_float(ita_values), bins=bd.bins, labels=list(ST_CLASSES), right=bd.closed == "right", ordered=True)


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


def categorize(m, *, L_threshold: float = L_THRESHOLD, hue_threshold: float = HUE_THRESHOLD,
               ita_boundaries=None) -> dict:
    """All categories of one :class:`~fairvision.skin.measurement.SkinMeasurement` as a dict of strings."""
    row = pd.DataFrame([{"L": m.L, "a": m.a, "b": m.b, "hue": m.hue, "ita": m.ita, "flags": ";".join(m.flags)}])
    out = add_categories(row, L_threshold=L_threshold, hue_threshold=hue_threshold, ita_boundaries=ita_boundaries)
    return {c: (None if pd.isna(v) else (v if isinstance(v, str) else float(v))) for c, v in out.iloc[0].items() if c not in row}


def achromatic_rows(data: pd.DataFrame, flags: str = "flags") -> np.ndarray:
    """Rows whose measurement carries the ``achromatic`` quality flag (median C* of the skin pixels below 3:
    a greyscale or washed-out image, docs/METHODS.md §2.2); False everywhere without the ``flags`` column."""
    if flags not in data.columns:
        return np.zeros(len(data), dtype=bool)
    text = data[flags].astype("string").fillna("")
    return text.str.contains(r"(?:^|;)\s*achromatic\s*(?:;|$)", regex=True).to_numpy(dtype=bool)


def add_categories(df: pd.DataFrame, *, L: str = "L", a: str = "a", b: str = "b", hue: str = "hue", ita: str = "ita",
                   L_threshold: float = L_THRESHOLD, hue_threshold: float = HUE_THRESHOLD, monk: bool = True,
                   ita_boundaries=None, flags: str = "flags") -> pd.DataFrame:
    """Add skin colour categories as columns, so they can be crossed with other attributes.

    Adds ``skin_tone`` (light/dark), ``skin_hue`` (red/yellow), ``skin_colour``
    (the four combinations), ``ita_class``, ``st_class``, ``fitzpatrick_proxy``,
    and with ``monk`` ``monk_tone`` and ``monk_delta_e``. Rows whose measurement
    failed (NaN) get missing categories. ``ita_boundaries`` (a name, five numbers or an
    :class:`ItaBoundaries`; default ``chardon``) sets the edges of ``ita_class`` and ``st_class``
    (docs/METHODS.md §1.4). Columns already there are replaced in place. Rows flagged ``achromatic`` in the
    ``flags`` column (a greyscale or washed-out image: its h* and ITA are noise, :func:`achromatic_rows`) keep
    ``skin_tone`` but get missing ``skin_hue``, ``skin_colour``, ``ita_class``, ``st_class`` and
    ``fitzpatrick_proxy``: a grey photo's ITA is near +/-90 degrees, which would call it "very light".

    Raises
    ------
    ColumnError
        A needed column is missing.
    """
    need = [L, hue, ita] + ([a, b] if monk else [])
    missing = [c for c in need if c not in df.columns]
    if missing:
        raise ColumnError(f"skin categories need column(s) {', '.join(missing)}; the table has {', '.join(map(str, df.columns))}")
    bd = parse_ita_boundaries(ita_boundaries)
    out = df.copy()
    tone, hc, comb = tone_hue_category(out[L], out[hue], L_threshold=L_threshold, hue_threshold=hue_threshold)
    out["skin_tone"] = tone
    out["skin_hue"] = hc
    out["skin_colour"] = comb
    out["ita_class"] = ita_class(out[ita], bd)
    out["st_class"] = st_class(out[ita], bd)
    out["fitzpatrick_proxy"] = fitzpatrick_proxy(out[ita])
    grey = achromatic_rows(out, flags)
    if grey.any():
        for col in ("skin_hue", "skin_colour", "ita_class", "st_class", "fitzpatrick_proxy"):
            out[col] = out[col].mask(grey)
    if monk:
        labels, dist = monk_tone(out[[L, a, b]].to_numpy(dtype=np.float64))
        out["monk_tone"] = labels
        out["monk_delta_e"] = dist
    return out
