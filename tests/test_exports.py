"""Every public name is importable: ``__all__`` stays complete and truthful."""

from __future__ import annotations

import importlib

import pytest

import rcvgp
import rcvgp.search

MODULES = ["rcvgp", "rcvgp.search"]


@pytest.mark.parametrize("module_name", MODULES)
def test_every_name_in_all_exists(module_name: str) -> None:
    module = importlib.import_module(module_name)
    assert module.__all__, module_name
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    assert len(set(module.__all__)) == len(module.__all__), "duplicate names in __all__"


@pytest.mark.parametrize("module_name", MODULES)
def test_star_import_gives_exactly_all(module_name: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module_name} import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(importlib.import_module(module_name).__all__)


def test_public_classes_are_exported() -> None:
    for name in ("CallableOracle", "DataOracle", "OracleSpec", "Variable", "ExpressionError", "OracleError"):
        assert name in rcvgp.__all__
    for name in ("run_search", "SearchConfig", "SearchResult", "OPTIMIZERS", "METHODS"):
        assert name in rcvgp.search.__all__
    assert isinstance(rcvgp.__version__, str)
