"""Plain-JSON conversion of numpy and pandas values."""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any, Mapping

import numpy as np
import pandas as pd


def to_jsonable(obj: Any) -> Any:
    """Convert numpy/pandas values into plain JSON types (NaN and inf become null)."""
    if isinstance(obj, Mapping):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return [to_jsonable(v) for v in obj.tolist()]
    if isinstance(obj, (np.bool_, bool)):
        return bool(obj)
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (float, np.floating)):
        f = float(obj)
        return None if (math.isnan(f) or math.isinf(f)) else f
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, (pd.Timestamp, _dt.datetime, _dt.date)):
        return obj.isoformat()
    if obj is pd.NA or obj is pd.NaT:
        return None
    return str(obj)
