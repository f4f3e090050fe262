"""Accuracy of the generative audit's default age/gender assessor on the bundled FairFace sample.

A biased assessor biases the audit (docs/METHODS.md §10.5): this prints gender accuracy, age-group
accuracy (predicted age binned into FairFace's groups), mean absolute error to the group's centre and the
no-face share per age x gender group (labels: FairFace annotators, ground_truth.json). Also times the
assessor against the naive baseline of loading the models for every image. Not a test.

    .venv/bin/python benchmarks/bench_generative_assessor.py
"""

from __future__ import annotations

import time

import numpy as np
import pandas as pd

from fairvision.vision.age_gender import AgeGenderPredictor
from fairvision.datasets import load_demo
from fairvision.io.images import read_image

EDGES = [0, 3, 10, 20, 30, 40, 50, 60, 70, 200]
CENTRES = [1.5, 6.5, 15, 25, 35, 45, 55, 65, 75]


def main() -> None:
    df = load_demo()
    labels = [str(c) for c in df["age"].cat.categories]  # FairFace's 9 groups, youngest first
    p = AgeGenderPredictor()
    t0 = time.perf_counter()
    preds = [p.predict(read_image(x)) for x in df["image_path"]]
    dt = time.perf_counter() - t0
    t1 = time.perf_counter()
    for x in df["image_path"].head(20):  # naive: a fresh predictor (model load) per image
        AgeGenderPredictor().predict(read_image(x))
    naive = (time.perf_counter() - t1) / 20
    d = df.assign(pred_age=[r["age"] for r in preds], pred_gender=[r["gender"] for r in preds])
    d["face"] = d["pred_gender"].notna()
    d["gender_ok"] = d["pred_gender"] == d["gender"].astype(str).str.lower()
    d["pred_group"] = pd.cut(d["pred_age"], EDGES, right=False, labels=labels)
    d["age_ok"] = d["pred_group"].astype(str) == d["age"].astype(str)
    d["abs_err"] = (d["pred_age"] - d["age"].astype(str).map(dict(zip(labels, CENTRES)))).abs()
    f = d[d["face"]]
    g = f.groupby(["age", "gender"], observed=True).agg(n=("face", "size"), gender_acc=("gender_ok", "mean"),
                                                       age_group_acc=("age_ok", "mean"), age_mae=("abs_err", "mean"))
    g["no_face"] = d.groupby(["age", "gender"], observed=True)["face"].apply(lambda s: 1 - s.mean())
    pd.set_option("display.width", 160)
    print(g.round(3).to_string())
    print(f"\noverall (faces found {d['face'].mean():.1%}): gender accuracy {f['gender_ok'].mean():.3f}, "
          f"age-group accuracy {f['age_ok'].mean():.3f}, age MAE to group centre {f['abs_err'].mean():.1f} years")
    per = dt / len(df)
    print(f"\n{1 / per:.1f} images/s with one predictor (models loaded once); naive reload per image "
          f"{1 / naive:.1f} images/s; ratio {naive / per:.1f}x")


if __name__ == "__main__":
    main()
