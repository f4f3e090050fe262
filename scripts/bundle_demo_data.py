"""Copy the shared real photos into the package as the bundled demo data set.

Re-encodes the JPEGs (FairFace downscaled from 448 to 320 px, the portraits kept
at 500 x 500 for the skin-colour benchmark) so the package stays under 20 MB,
and copies the labels, licence and credit files unchanged.

    python scripts/bundle_demo_data.py ../shared/data
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from PIL import Image

DEST = Path(__file__).resolve().parents[1] / "src" / "fairvision" / "datasets" / "data"


def reencode(src: Path, dst: Path, size: int | None, quality: int) -> None:
    with Image.open(src) as im:
        im = im.convert("RGB")
        if size and im.size != (size, size):
            im = im.resize((size, size), Image.Resampling.LANCZOS)
        im.save(dst, "JPEG", quality=quality, optimize=True)


def main(shared: str) -> None:
    shared_dir = Path(shared)
    for name, size, quality in (("fairface", 320, 85), ("portraits", None, 85)):
        out = DEST / name
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted((shared_dir / name).iterdir()):
            if f.suffix.lower() == ".jpg":
                reencode(f, out / f.name, size, quality)
            else:
                shutil.copy2(f, out / f.name)
    total = sum(p.stat().st_size for p in DEST.rglob("*") if p.is_file())
    print(f"bundled demo data: {total / 1e6:.1f} MB in {DEST}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/data")
