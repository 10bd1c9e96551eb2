"""Start-up stays light: `rcvgp --help`, `rcvgp --version`, `rcvgp serve`, `rcvgp ping` and a rig's
server load neither sympy nor the search engine (nor matplotlib, which only `rcvgp report` needs),
and the package's public names still import from `rcvgp`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = """
import sys
{code}
heavy = sorted(m for m in ("sympy", "rcvgp.search.engine", "rcvgp.search.racing", "matplotlib") if m in sys.modules)
print("heavy:", ",".join(heavy))
"""


@pytest.mark.parametrize("code", [
    "from rcvgp.cli import build_parser; build_parser()",
    "from rcvgp.cli import main\ntry: main(['--version'])\nexcept SystemExit: pass",
    "from rcvgp.cli import main; main(['ping', 'ipc://{tmp}/nobody.sock', '--timeout', '3'])",
    "import rcvgp.commands.serve, rcvgp.transport.server",
    "from rcvgp import DataOracle, OracleSpec, Variable, SearchConfig",
])
def test_a_light_import_loads_neither_sympy_nor_the_search(code: str, tmp_path: Path) -> None:
    probe = PROBE.format(code=code.format(tmp=tmp_path))
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "heavy: ", out.stdout  # the command's own output comes before


def test_version_names_the_package_and_the_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    import rcvgp
    from rcvgp.cli import main

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out == f"rcvgp {rcvgp.__version__} (protocol rcvgp-oracle 1.1)\n"
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert re.findall(r'^version = "([^"]+)"', pyproject, flags=re.M) == [rcvgp.__version__]


def test_run_search_still_imports_from_the_package() -> None:
    import rcvgp
    from rcvgp.search import run_search

    assert rcvgp.run_search is run_search
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        rcvgp.nothing  # noqa: B018
