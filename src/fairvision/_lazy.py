"""Lazy (PEP 562) exports for packages whose public names live in submodules."""

from __future__ import annotations

import importlib
from typing import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str], namespace: dict) -> tuple[Callable, Callable]:
    """Module-level ``__getattr__`` and ``__dir__`` that import ``exports[name]`` on first use.

    ``exports`` maps each public name to the submodule (relative to
    ``package``) that defines it; the value is cached in ``namespace``.
    """

    def __getattr__(name: str):
        mod = exports.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{mod}"), name)
        namespace[name] = value
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
