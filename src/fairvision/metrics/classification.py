"""Classification metrics per sample and per class."""

from __future__ import annotations

import numpy as np
import pandas as pd

from fairvision.errors import FairvisionError


def correct(y_true, y_pred) -> np.ndarray:
    """1.0 where the prediction equals the truth, else 0.0: a per-sample accuracy score.

    Parameters
    ----------
    y_true, y_pred : array_like, same shape
        True and predicted labels (compared with ``==``).

    Returns
    -------
    numpy.ndarray of float
    """
    t = np.asarray(y_true, dtype=object)
    p = np.asarray(y_pred, dtype=object)
    if t.shape != p.shape:
        raise FairvisionError(f"correct: {t.size} true labels but {p.size} predictions")
    return (t == p).astype(float)


def accuracy(y_true, y_pred) -> float:
    """Share of correct predictions.

    Parameters
    ----------
    y_true, y_pred : array_like, same shape
        True and predicted labels.

    Returns
    -------
    float
        NaN when there are no samples.
    """
    c = correct(y_true, y_pred)
    return float(c.mean()) if c.size else float("nan")


def per_class_recall(y_true, y_pred) -> pd.Series:
    """Recall of every true class: correct predictions of c / samples of class c.

    Parameters
    ----------
    y_true, y_pred : array_like, same shape
        True and predicted labels.

    Returns
    -------
    pandas.Series
        Named ``recall``, indexed by class (``class``, sorted).
    """
    t = pd.Series(np.asarray(y_true, dtype=object))
    c = correct(y_true, y_pred)
    out = pd.Series(c).groupby(t.to_numpy()).mean()
    out.index.name = "class"
    out.name = "recall"
    return out
