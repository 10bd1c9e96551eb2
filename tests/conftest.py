"""Shared fixtures: a small experiment file that a search finishes in seconds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

#: A 2-variable law and settings small enough for a test (a few seconds per run).
TINY_EXPERIMENT: dict[str, Any] = {
    "name": "tiny",
    "oracle": {
        "expression": "x0*x1 + 2.5",
        "variables": [
            {"name": "x0", "low": 0.1, "high": 10, "dist": "loguniform"},
            {"name": "x1", "low": 0.1, "high": 10},
        ],
    },
    "method": "racing",
    "operators": ["add", "mul", "sin"],
    "seed": 1,
    "search": {"population": 10, "generations": 3, "batch": 32, "n_trials": 2, "hall_of_fame": 5,
               "n_validation": 64, "n_test": 64},
    "output": "runs/tiny",
}


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        elif value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


@pytest.fixture
def write_experiment(tmp_path: Path) -> Callable[..., Path]:
    """``write_experiment(name="exp.yaml", **changes)``: the tiny experiment, changed, as a file in
    ``tmp_path`` (a nested mapping merges; a value of None removes the key)."""

    def write(name: str = "exp.yaml", **changes: Any) -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(_merge(TINY_EXPERIMENT, changes), sort_keys=False))
        return path

    return write
