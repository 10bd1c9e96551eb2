"""The README's promises: its two commands work on a fresh virtual environment, every command it
shows exists, CI runs its test command, and the examples it points to load and run."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rcvgp.cli import build_parser
from rcvgp.config import load_experiment

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAIN_COMMAND = "pip install . && rcvgp run examples/quickstart.yaml"
TEST_COMMAND = 'pip install -e ".[test]" && python -m pytest'


def code_lines() -> list[str]:
    """Every line of the README's fenced code blocks (the YAML block excepted)."""
    lines: list[str] = []
    for block in re.findall(r"```([a-z]*)\n(.*?)```", README.read_text(), flags=re.S):
        if block[0] in ("", "sh", "bash", "console"):
            lines.extend(line.strip() for line in block[1].splitlines() if line.strip())
    return lines


def test_the_readme_shows_the_two_commands_as_single_lines():
    lines = code_lines()
    assert MAIN_COMMAND in lines
    assert TEST_COMMAND in lines


def test_ci_runs_the_readme_test_command():
    script = (ROOT / ".ci" / "run").read_text()
    assert TEST_COMMAND in script.splitlines()
    assert "set -euo pipefail" in script and "venv" in script


def test_every_rcvgp_command_in_the_readme_exists():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command")
    commands = subparsers.choices  # type: ignore[attr-defined]
    shown = [shlex.split(line) for line in code_lines() if line.startswith("rcvgp ")]
    shown += [["rcvgp", m] for m in re.findall(r"`rcvgp (\w+)", README.read_text())]
    assert shown
    for words in shown:
        assert words[1] in commands, f"the README shows `rcvgp {words[1]}`, which is not a command"


def test_the_examples_load():
    quick = load_experiment(ROOT / "examples" / "quickstart.yaml")
    assert quick.oracle.kind == "expression" and quick.method == "racing" and quick.seed == 0
    assert quick.search.max_seconds is not None and quick.search.max_seconds < 60  # a result in under a minute
    remote = load_experiment(ROOT / "examples" / "remote.yaml")
    assert remote.oracle.kind == "endpoint" and remote.oracle.endpoint == "tcp://127.0.0.1:5555"


def test_the_readme_shows_the_rig_class_as_it_is_in_its_example_file():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    rig = (ROOT / "examples" / "pendulum_rig.py").read_text()
    assert rig in blocks
    assert "rcvgp serve examples/pendulum_rig.py:PendulumRig" in "\n".join(code_lines())


def test_the_rig_class_of_the_readme_measures_the_pendulum_in_process():
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location("pendulum_rig", ROOT / "examples" / "pendulum_rig.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    X = np.array([[1.0, 0.05], [2.0, 0.6]])
    with module.PendulumRig(noise=0.0) as rig:
        described = rig.describe()
        T = rig.measure(X)
    assert [v.name for v in described.variables] == ["L", "theta0"] and described.output.unit == "s"
    assert T == pytest.approx(2 * np.pi * np.sqrt(X[:, 0] / 9.81) * (1 + X[:, 1] ** 2 / 16))
    noisy = module.PendulumRig(noise=0.01, seed=3).measure(np.tile(X[:1], (200, 1)))
    assert np.std(noisy) / np.mean(noisy) == pytest.approx(0.01, rel=0.2)


def test_git_ignores_secret_keys_and_run_folders():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    paths = ["keys/server.key_secret", "examples/keys/client.key_secret", "somewhere/alice.key_secret",
             "examples/runs/quickstart/result.json"]
    done = subprocess.run(["git", "check-ignore", *paths], cwd=ROOT, capture_output=True, text=True)
    assert done.stdout.split() == paths


def _block_with(command: str) -> list[str]:
    """The lines of the README's code block that shows ``command``."""
    for block in re.findall(r"```([a-z]*)\n(.*?)```", README.read_text(), flags=re.S):
        lines = [line.strip() for line in block[1].splitlines() if line.strip()]
        if any(line.startswith(command) for line in lines):
            return lines
    raise AssertionError(f"the README shows no `{command}`")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.integration
@pytest.mark.skipif(not __import__("zmq").has("curve"), reason="libzmq without CURVE")
def test_the_readme_curvezmq_steps_work_as_written(tmp_path):
    """Run in a copy of examples/ from the top folder, on a free port instead of 5555."""
    shutil.copytree(ROOT / "examples", tmp_path / "examples",
                    ignore=shutil.ignore_patterns("runs", "keys", "__pycache__"))
    port = str(_free_port())
    experiment = tmp_path / "examples" / "remote_curve.yaml"
    experiment.write_text(experiment.read_text().replace("5555", port))
    steps = [shlex.split(line.replace("5555", port)) for line in _block_with("rcvgp keys")]
    assert [words[:2] for words in steps] == [["rcvgp", "keys"], ["rcvgp", "serve"], ["rcvgp", "run"]]
    rcvgp = [sys.executable, "-m", "rcvgp"]
    keys = subprocess.run(rcvgp + steps[0][1:], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert keys.returncode == 0, keys.stderr
    server = subprocess.Popen(rcvgp + steps[1][1:] + ["--quiet"], cwd=tmp_path, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        ready = server.stdout.readline()
        assert "CURVE" in ready, ready + server.stderr.read()  # type: ignore[union-attr]
        run = subprocess.run(rcvgp + steps[2][1:] + ["--quiet"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=600)
    finally:
        server.terminate()
        server.communicate(timeout=30)
    assert run.returncode == 0, run.stderr
    assert "test data" in run.stdout and "schedule" in run.stdout
    assert (tmp_path / "examples" / "runs" / "remote_curve" / "result.json").exists()


@pytest.mark.integration
def test_the_api_example_runs():
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "api_example.py")], capture_output=True,
                          text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert "found:" in done.stdout and "test NMSE" in done.stdout


def _copy_of_the_repository(dst: Path) -> Path:
    ignore = shutil.ignore_patterns(".git", "runs", "build", "dist", "*.egg-info", ".venv", "__pycache__",
                                    ".pytest_cache", "*.pyc")
    shutil.copytree(ROOT, dst, ignore=ignore)
    return dst


@pytest.mark.integration
def test_the_readme_commands_work_in_a_fresh_virtual_environment(tmp_path):
    """One fresh venv (no system packages): the main command, then the test command on a part
    of the suite (the whole suite is what CI runs; running it here would run this test again)."""
    repo = _copy_of_the_repository(tmp_path / "repo")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    env["VIRTUAL_ENV"] = str(venv)

    main = subprocess.run(["bash", "-c", MAIN_COMMAND], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=900)
    assert main.returncode == 0, main.stdout[-3000:] + main.stderr[-3000:]
    assert "true law" in main.stdout and "schedule" in main.stdout
    assert (repo / "examples" / "runs" / "quickstart" / "result.json").exists()
    assert "best NMSE" in main.stderr  # progress was shown

    env["PYTEST_ADDOPTS"] = "-p no:cacheprovider tests/test_config.py tests/test_journal.py"
    tests = subprocess.run(["bash", "-c", TEST_COMMAND], cwd=repo, env=env, capture_output=True, text=True,
                           timeout=900)
    assert tests.returncode == 0, tests.stdout[-3000:] + tests.stderr[-3000:]
    assert re.search(r"\d+ passed", tests.stdout)
