"""Names a package exports but loads on first use (PEP 562), so that
importing the package loads nothing heavy: ``python -m pompy.train`` and
``python -m pompy.generate`` choose their allocator before torch loads."""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str], names: Callable[[], dict]
                 ) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose name N is
    ``exports[N]``'s attribute N; ``names``: the package's globals."""
    def getattr_(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(exports[name]), name)

    def dir_() -> list[str]:
        return sorted(set(names()) | set(exports))
    return getattr_, dir_
