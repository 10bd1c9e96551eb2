"""The README's two served demos find their laws: the pendulum rig of examples/pendulum_rig.py,
served with the README's own `rcvgp serve` line, and the catalog's sincos-3-2-2/1, each discovered
with examples/remote.yaml as it stands (only the endpoint and the output folder changed); and
examples/lab_rig.py, which serves itself, answers `rcvgp ping`."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy

from rcvgp.config import load_experiment
from rcvgp.metrics import is_exact
from rcvgp.runner import run_experiment

ROOT = Path(__file__).resolve().parents[2]


def _discover(tmp_path: Path, served: str, *options: str) -> dict:  # type: ignore[type-arg]
    address = f"ipc://{tmp_path}/demo.sock"
    proc = subprocess.Popen([sys.executable, "-m", "rcvgp", "serve", served, *options, "--bind", address, "--quiet"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server says it is ready
        assert address in line, line + proc.stderr.read()  # type: ignore[union-attr]
        config = load_experiment(ROOT / "examples" / "remote.yaml",
                                 {"oracle.endpoint": address, "output": str(tmp_path / "run")})
        return run_experiment(config, notes=None, handle_signals=False).result_json
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


def _readme_serve_line(served: str) -> list[str]:
    """The words of the README's ``rcvgp serve SERVED ...`` line, its ``--bind`` left out."""
    text = (ROOT / "README.md").read_text()
    line = next(line for line in text.splitlines() if line.startswith(f"rcvgp serve {served} "))
    words = shlex.split(line)
    at = words.index("--bind")
    return words[2:at] + words[at + 2:]


@pytest.mark.integration
def test_the_pendulum_rig_gives_the_pendulum_law(tmp_path: Path) -> None:
    served, *options = _readme_serve_line("examples/pendulum_rig.py:PendulumRig")
    noise = float(options[options.index("--arg") + 1].removeprefix("noise="))
    data = _discover(tmp_path, served, *options)
    L, theta0 = sympy.symbols("L theta0", positive=True)
    law = sympy.sympify(data["expression"], locals={"L": L, "theta0": theta0})
    # T = 2 pi sqrt(L/g) (1 + theta0^2/16): sqrt(L) times a constant plus a theta0^2 term
    scale = sympy.expand(sympy.simplify(law / sympy.sqrt(L)))
    assert scale.free_symbols == {theta0} and scale.is_polynomial(theta0), data["expression"]
    assert sympy.degree(scale, theta0) == 2, data["expression"]
    truth = 2 * np.pi / np.sqrt(9.81)
    points = np.random.default_rng(0).uniform([0.2, 0.05], [2.0, 0.6], size=(200, 2))
    expected = truth * np.sqrt(points[:, 0]) * (1 + points[:, 1] ** 2 / 16)
    found = sympy.lambdify([L, theta0], law)(*points.T)
    assert np.max(np.abs(found / expected - 1)) < 1e-3  # the rig's readings scatter by 1e-3
    assert data["noise"]["source"] == "replicates" and data["noise"]["relative"] == pytest.approx(noise, rel=0.3)


@pytest.mark.integration
def test_the_lab_rig_serves_itself_and_answers_ping(tmp_path: Path) -> None:
    address = f"ipc://{tmp_path}/lab.sock"
    proc = subprocess.Popen([sys.executable, "examples/lab_rig.py", "--bind", address], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert address in line, line + proc.stderr.read()  # type: ignore[union-attr]
        ping = subprocess.run([sys.executable, "-m", "rcvgp", "ping", address, "--json"], cwd=ROOT,
                              capture_output=True, text=True, timeout=60)
    finally:
        proc.terminate()
        proc.communicate(timeout=30)
    assert ping.returncode == 0, ping.stderr
    hello = json.loads(ping.stdout)["hello"]
    assert hello["oracle"]["name"] == "rig:pendulum-bench"
    assert [(v["name"], v["unit"]) for v in hello["oracle"]["variables"]] == [("L", "m"), ("theta0", "rad")]


@pytest.mark.integration
def test_the_served_catalog_oracle_gives_its_law(tmp_path: Path) -> None:
    data = _discover(tmp_path, "sincos-3-2-2/1")
    assert data["nmse_test"] < 1e-20
    truth = "0.6098*x1*sin(x0) + 0.66*x2 - 0.5542*sin(x2)*cos(x1) - 0.5932*cos(x0) + 0.1835"
    assert is_exact(data["expression"], truth), data["expression"]
