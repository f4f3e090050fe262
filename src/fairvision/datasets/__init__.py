"""Bundled demo data and loaders for common dataset layouts."""

from fairvision.datasets.demo import demo_path, load_demo, load_portraits, from_folder

__all__ = ["demo_path", "load_demo", "load_portraits", "from_folder"]
