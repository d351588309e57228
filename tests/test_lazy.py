"""deisa._lazy: each package's public names import on first use, and only those names."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("package", ["deisa", "deisa.bridge", "deisa.analysis"])
def test_lazy_names_import_on_first_use(package: str) -> None:
    module = importlib.import_module(package)
    assert sorted(module.__all__) == sorted(module._LAZY)
    assert set(module._LAZY) <= set(dir(module))
    for name in module._LAZY:
        value = getattr(module, name)
        assert vars(module)[name] is value  # stored: later lookups skip __getattr__
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nosuch'"):
        module.nosuch  # noqa: B018
