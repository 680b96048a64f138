"""A package's face: the names it offers other packages, each loaded from its module on first use, so importing one
module of a package never loads the others (the sampler stays free of pydantic, the headless run of textual)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy(package: str, face: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """The `__getattr__` of `package`: `face` maps each offered name to the module (relative) that defines it, or
    to "" where the name is a module of the package offered whole (a namespace such as `report.plot`)."""

    def __getattr__(name: str) -> Any:
        module = face.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        if not module:
            value = importlib.import_module(f"{package}.{name}")
        else:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    return __getattr__
