"""The skin pipeline's start-up and scheduling: guided chunks of the local pool, mediapipe imported without
matplotlib, the ``skin measure`` command's light imports and its bundled sources (``portraits``, ``demo``)."""

import json
import subprocess
import sys

import pandas as pd
import pytest

from fairvision.cli import main
from fairvision.datasets import load_portraits
from fairvision.engine import imap
from fairvision.engine.pool import chunk_sizes


def _square(x):
    return x * x


def test_guided_chunks_hand_worked():
    # 100 items, 2 workers: the cap is 100 // 16 = 6; a chunk is ceil(left / 8) capped at 6, so ten chunks of 6
    # (100 -> 40 left), then 5, 5 (40, 35 left), 4, 4 (30, 26), 3, 3 (22, 19), 2 x 4 (16 .. 10), 1 x 8
    assert chunk_sizes(100, 2) == [6] * 10 + [5, 5, 4, 4, 3, 3, 2, 2, 2, 2] + [1] * 8
    # 540 photos, 2 workers: nine chunks of 540 // 16 = 33 before ceil(left / 8) drops below 33 (left 243)
    sizes = chunk_sizes(540, 2)
    assert sizes[:9] == [33] * 9 and sizes[9] == 31 and sizes[-1] == 1 and sum(sizes) == 540
    assert chunk_sizes(10, 3, 4) == [4, 4, 2]  # an explicit size is taken as given
    assert chunk_sizes(5, 2) == [1] * 5 and chunk_sizes(1, 4) == [1]


def test_guided_chunks_give_every_item_once():
    seen = []
    out = list(imap(_square, range(100), workers=2, progress=seen.append))
    assert [o.index for o in out] == list(range(100)) and [o.value for o in out] == [i * i for i in range(100)]
    assert sorted(o.index for o in seen) == list(range(100))
    unordered = list(imap(_square, range(37), workers=2, ordered=False))
    assert sorted(o.value for o in unordered) == [i * i for i in range(37)]


FRESH = r"""
import json, sys
from fairvision.cli import main
code = main(["skin", "measure", sys.argv[1], "-o", sys.argv[2], "-j", "2", "--no-progress", "--no-store",
             "--method", "mean"])
loaded = {m: m in sys.modules for m in ("matplotlib", "matplotlib.pyplot", "fairvision.report", "mediapipe",
                                        "mediapipe.tasks.python")}
import matplotlib.pyplot as plt
import mediapipe as mp
import mediapipe.python.solutions.drawing_utils as du
from mediapipe.tasks.python import vision
print(json.dumps({"code": code, "loaded": loaded, "forwards": du.plt.figure is plt.figure and mp.tasks.vision is vision,
                  "real": [type(sys.modules[m]).__name__ for m in ("matplotlib.pyplot", "mediapipe.tasks.python")]}))
"""


@pytest.mark.vision
def test_measure_imports_neither_matplotlib_nor_the_report_package(tmp_path):
    """A fresh interpreter runs ``skin measure`` on three photos with a pool: mediapipe was imported (to fork the
    workers) but neither matplotlib nor mediapipe's Tasks API, which the face mesh does not use, nor the report
    package (overlays only); imported afterwards they are the real modules, and what mediapipe holds of them
    reaches them."""
    folder = tmp_path / "imgs"
    folder.mkdir()
    for path in load_portraits().image_path[:3]:
        (folder / path.split("/")[-1]).write_bytes(open(path, "rb").read())
    proc = subprocess.run([sys.executable, "-c", FRESH, str(folder), str(tmp_path / "s.csv")], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["code"] == 0 and got["loaded"] == {"matplotlib": False, "matplotlib.pyplot": False,
                                                  "fairvision.report": False, "mediapipe": True,
                                                  "mediapipe.tasks.python": False}
    assert got["forwards"] and got["real"] == ["module", "module"]
    assert len(pd.read_csv(tmp_path / "s.csv")) == 3


@pytest.mark.vision
def test_measure_the_bundled_portraits_by_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no folder named "portraits" here
    out = tmp_path / "skin.parquet"
    code = main(["skin", "measure", "portraits", "-o", str(out), "-j", "2", "--no-progress", "--no-store",
                 "--method", "mean"])
    assert code == 0
    got = pd.read_parquet(out)
    assert list(got.sample_id) == list(load_portraits().sample_id) and got.ok.all()
    assert "62 images: 62 measured" in capsys.readouterr().out


def test_demo_is_the_fairface_sample_with_its_attributes(tmp_path, monkeypatch):
    import fairvision.skin.batch as batch

    seen = {}

    class Stop(Exception):
        pass

    def fake(images, **kw):
        seen["images"] = images
        raise Stop

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(batch, "measure_images", fake)
    with pytest.raises(Stop):
        main(["skin", "measure", "demo", "-o", str(tmp_path / "s.parquet"), "--no-progress", "--no-store"])
    df = seen["images"]
    assert len(df) == 540 and {"sample_id", "image_path", "age", "gender"} <= set(df.columns)
