"""A runnable bias-transfer study on the bundled FairFace sample (docs/METHODS.md §11.4).

dlib face descriptors of the 540 photos (the vision extra; computed once per
run through :func:`fairvision.vision.face_descriptor_batch.embed_face_images`), the FairFace
age groups folded into three bands (0-19, 20-49, 50+), subsets designed by
:func:`~fairvision.audits.transfer.design.design_subsets`, one scikit-learn
logistic regression per subset, and :func:`~fairvision.audits.transfer.study.audit_transfer`
on the common test set. By default the models predict gender and the
demographic attribute is the age band: a model trained on adults only is
expected to recognise children's gender worse, which the study should show.
It is a demonstration of the method, not a finding.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pandas as pd
from sklearn.linear_model import LogisticRegression

from fairvision.audits.coverage import audit_coverage
from fairvision.audits.settings import AuditSettings
from fairvision.audits.transfer.design import SubsetDesign, design_subsets
from fairvision.audits.transfer.study import PRED_COL, TransferStudyResult, audit_transfer
from fairvision.datasets import load_demo
from fairvision.errors import FairvisionError, ParameterError
from fairvision.schema import Attribute, Schema
from fairvision.vision.face_descriptor_batch import embed_face_images

AGE_BANDS = {"0-2": "0-19", "3-9": "0-19", "10-19": "0-19", "20-29": "20-49", "30-39": "20-49", "40-49": "20-49",
             "50-59": "50+", "60-69": "50+", "70+": "50+"}
LABELS = {"gender": "age_band", "age_band": "gender"}
#: settings of :func:`run_demo` when given none: two processes describe the faces, and every test group with a
#: subject enters OD (as :data:`fairvision.audits.transfer.study.DEFAULTS`)
DEFAULTS = AuditSettings(workers=2, min_subjects=1)


@dataclass
class DemoStudy:
    """The demo's design, predictions and study result."""

    design: SubsetDesign
    predictions: dict[str, pd.DataFrame]
    result: TransferStudyResult
    meta: dict = field(default_factory=dict)

    def files(self) -> dict[str, bytes]:
        """The subsets, the test set and the predictions as CSV files, for the report folder (so a user sees the
        inputs ``fairvision audit transfer`` takes, and can run it again)."""
        out = {"subsets/test.csv": self.design.test.drop(columns=["image_path"], errors="ignore").to_csv(index=False).encode()}
        for name, sub in self.design.subsets.items():
            out[f"subsets/subsets/{name}.csv"] = sub.drop(columns=["image_path"], errors="ignore").to_csv(index=False).encode()
        out["subsets/design.json"] = json.dumps(self.design.manifest("csv"), indent=1).encode()
        for name, p in self.predictions.items():
            out[f"predictions/{name}.csv"] = p.to_csv(index=False).encode()
        return out


def _pick(df: pd.DataFrame, limit: int | None, seed: int) -> pd.DataFrame:
    """At most ``limit`` photos, the same share of every gender x age band cell."""
    if limit is None or limit >= len(df):
        return df
    rng = np.random.default_rng(seed)
    pri = pd.Series(rng.random(len(df)), index=df.index)
    share = limit / len(df)
    parts = [g.loc[pri.loc[g.index].sort_values().index[: max(1, int(round(share * len(g))))]]
             for _, g in df.groupby(["gender", "age_band"], observed=True)]
    return pd.concat(parts).sort_index()


def run_demo(*, label: str = "gender", limit: int | None = None, settings: AuditSettings | None = None,
             progress: Callable[[str], None] | None = None, store=None) -> DemoStudy:
    """Describe the faces, design the subsets, train one logistic regression per subset and audit them.

    Parameters
    ----------
    label : {"gender", "age_band"}
        What the models predict; the other one is the demographic attribute.
    limit : int, optional
        Use only this many photos (a quick run; stratified by gender and age band).
    settings : AuditSettings, optional
        ``workers`` (with ``engine`` and ``address``) for the face descriptors, ``seed`` of the photo choice, the
        subsets and the bootstrap, and the study's options (:func:`~fairvision.audits.transfer.study.audit_transfer`).
        Default :data:`DEFAULTS` (two workers, ``min_subjects`` 1).
    progress : callable, optional
        ``progress(message)`` at every step.
    store : fairvision.io.store.ResultsStore, optional
        Keeps the face descriptors, so a second run describes no face again.
    """
    settings = settings or DEFAULTS
    seed = settings.seed
    if label not in LABELS:
        raise ParameterError("label", f"must be one of {', '.join(LABELS)}, not {label!r}")
    settings.require_bootstrap("the study needs bootstrap replicates")  # before the faces are described
    say = progress or (lambda msg: None)
    attr = LABELS[label]
    df = load_demo()
    df["age_band"] = df["age"].astype(str).map(AGE_BANDS)
    df["gender"] = df["gender"].astype(str)
    df = _pick(df, limit, seed).reset_index(drop=True)
    say(f"describing {len(df)} faces")
    emb = embed_face_images(df["image_path"], df["sample_id"], settings=settings, store=store)
    if len(emb.ids) < 30:
        raise FairvisionError(f"only {len(emb.ids)} of {len(df)} photos have a detectable face; too few for the demo")
    vectors = pd.DataFrame(emb.embeddings, index=pd.Index(emb.ids, name="sample_id"))
    data = df[df["sample_id"].isin(vectors.index)].reset_index(drop=True)
    data = data[["sample_id", "image_path", "gender", "age_band", "age"]].assign(age=lambda x: x["age"].astype(str))
    data.attrs["source"] = "FairFace demo sample"
    schema = Schema().add(Attribute("age_band", categories=("0-19", "20-49", "50+"), ordered=True)).add(
        Attribute("gender", categories=("Female", "Male")))
    say("designing subsets")
    design = design_subsets(data, label, [attr], schema=schema, test_fraction=0.3, settings=settings)
    x_test = vectors.loc[design.test["sample_id"]].to_numpy()
    predictions, skipped = {}, {}
    for name, sub in design.subsets.items():
        say(f"training on {name}")
        y = sub[label].astype(str).to_numpy()
        if len(np.unique(y)) < 2:
            skipped[name] = f"one {label} class in the training subset"
            continue
        model = LogisticRegression(max_iter=2000, C=1.0)
        model.fit(vectors.loc[sub["sample_id"]].to_numpy(), y)
        predictions[name] = pd.DataFrame({"sample_id": design.test["sample_id"].to_numpy(),
                                          PRED_COL: model.predict(x_test)})
    say("auditing")
    result = audit_transfer(design, predictions, settings=settings, skipped=skipped)
    failed = emb.failed
    meta = {"faces": len(emb.ids), "photos": len(df), "no_face": int(len(failed)), "label": label, "attribute": attr}
    if len(failed):
        result.notes.append(f"{len(failed)} of {len(df)} photos have no detectable face and are left out")
    # photos without a face, by gender and age band: a describer that misses one group biases every subset
    status = emb.status.set_index("item_id")
    ok = df["sample_id"].astype(str).isin(emb.ids).to_numpy()
    why = status["reason"].reindex(df["sample_id"].astype(str)).to_numpy(dtype=object)
    df.attrs["source"] = "FairFace demo sample"
    result.coverage.insert(0, audit_coverage(df, ok, ["gender", "age_band"], schema=schema, step="face description",
                                             settings=settings, reasons=np.where(ok, None, why), unit="images"))
    return DemoStudy(design, predictions, result, meta)

