"""Start-up stays light: `rcvgp --help`, `rcvgp serve` and a rig's server load neither sympy nor
the search engine (nor matplotlib, which only `rcvgp report` needs), and the package's public
names still import from `rcvgp`."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import sys
{code}
heavy = sorted(m for m in ("sympy", "rcvgp.search.engine", "rcvgp.search.racing", "matplotlib") if m in sys.modules)
print(",".join(heavy))
"""


@pytest.mark.parametrize("code", [
    "from rcvgp.cli import build_parser; build_parser()",
    "import rcvgp.commands.serve, rcvgp.transport.server",
    "from rcvgp import DataOracle, OracleSpec, Variable, SearchConfig",
])
def test_a_light_import_loads_neither_sympy_nor_the_search(code: str) -> None:
    out = subprocess.run([sys.executable, "-c", PROBE.format(code=code)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_run_search_still_imports_from_the_package() -> None:
    import rcvgp
    from rcvgp.search import run_search

    assert rcvgp.run_search is run_search
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        rcvgp.nothing  # noqa: B018
