"""Collection-guideline checks by group (docs/METHODS.md §13.8): images without a subject id count one person
each, checks that ran for no image get no group rows, and an untested check says why; counted by hand.
Also: --policy with --no-policy is refused (exit 2)."""

from __future__ import annotations

import dataclasses

import pandas as pd

from fairvision.audits.curation.policy import audit_policy, load_policy
from fairvision.audits.settings import AuditSettings
from fairvision.cli import main


def _table() -> pd.DataFrame:
    # 8 images of 2 MP (all fail the 8 MP floor) and 2 of 10 MP; group a: subjects s1, s1, and 3 images without a
    # subject id; group b: s2, s2, s3, s4, s5
    mp2, mp10 = (2000, 1000), (4000, 2500)
    sizes = [mp2, mp2, mp2, mp10, mp2] + [mp2, mp2, mp2, mp10, mp2]
    return pd.DataFrame({"sample_id": [f"i{j}" for j in range(10)],
                         "subject_id": ["s1", "s1", None, None, None, "s2", "s2", "s3", "s4", "s5"],
                         "group": list("aaaaa") + list("bbbbb"), "readable": True, "has_exif": True,
                         "width": [w for w, _ in sizes], "height": [h for _, h in sizes]})


def test_images_without_subject_count_one_person_each():
    policy = dataclasses.replace(load_policy(), min_images=None, max_images=None, consistent_columns=(),
                                 min_hours_apart=None, required=(), keypoints="", face_box="")
    res = audit_policy(_table(), policy, attributes=["group"], settings=AuditSettings(min_subjects=4))
    bg = res.by_group.set_index(["check", "group"])
    # by hand: group a holds s1 and three images without a subject id = 4 people (not 2: s1 and "missing")
    assert bg.loc[("resolution", "a"), "n_subjects"] == 4 and bg.loc[("resolution", "b"), "n_subjects"] == 4
    assert bg.loc[("resolution", "a"), "n"] == 5 and bg.loc[("resolution", "a"), "n_failed"] == 4
    assert bg.loc[("resolution", "a"), "tested"] and bg.loc[("resolution", "b"), "tested"]
    # the subject checks are off and the annotations absent: only the image checks have group rows
    assert set(res.by_group["check"]) == {"resolution", "exif", "aspect_ratio"}
    assert set(res.tests["check"]) == {"resolution", "exif", "aspect_ratio"}


def test_untested_checks_say_why():
    policy = dataclasses.replace(load_policy(), required=(), keypoints="", face_box="")
    t = audit_policy(_table(), policy, attributes=["group"], settings=AuditSettings(min_subjects=4)).tests
    why = t.set_index("check")["test"]
    assert why["exif"] == "not tested: no image fails"  # every image has EXIF
    assert why["resolution"] == "Fisher exact"  # 4 of 5 fail in each group
    # a subject-level check counts subjects: group a has one (s1), group b four, so one group of 4+
    assert why["images_per_subject"] == "not tested: fewer than two groups of 4+ subjects"
    assert "time_apart" not in why  # no capture times: run for no image
    t2 = audit_policy(_table(), policy, attributes=["group"], settings=AuditSettings(min_subjects=5)).tests
    assert t2.set_index("check")["test"]["resolution"] == "not tested: fewer than two groups of 5+ subjects"
    small = _table().assign(width=2000, height=1000)  # every image under 8 MP
    t3 = audit_policy(small, policy, attributes=["group"], settings=AuditSettings(min_subjects=4)).tests
    assert t3.set_index("check")["test"]["resolution"] == "not tested: every checked image fails"


def test_policy_and_no_policy_together_exit_2(tmp_path, capsys):
    (tmp_path / "p.toml").write_text("[subject]\nmax_images = 3\n")
    assert main(["curate", "qa", "portraits", "--policy", str(tmp_path / "p.toml"), "--no-policy",
                 "-o", str(tmp_path / "o"), "--no-store"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --policy and --no-policy")
    assert not (tmp_path / "o").exists()
