"""Finds the build (MEGANEURA_BUILD, default <repo>/build): its Python package and the CLI."""
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("MEGANEURA_BUILD", ROOT / "build")).resolve()
sys.path.insert(0, str(BUILD / "python"))
CLI = BUILD / "bin" / "meganeura"


def cli_env(env=None):
    """The environment for the CLI: without the shared sanitizer runtime that a sanitized run of these
    tests preloads into python3 (the sanitized CLI carries its own, and two would refuse to start)."""
    env = dict(os.environ if env is None else env)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and "libclang_rt." not in p]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    else:
        env.pop("LD_PRELOAD", None)
    return env


@pytest.fixture(scope="session")
def cli():
    """Runs the meganeura CLI; returns the CompletedProcess (text), failing the test on a non-zero exit."""
    if not CLI.exists():
        pytest.fail(f"the CLI is not built: {CLI}")

    def run(*args, check=True, env=None):
        r = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True, env=cli_env(env))
        if check and r.returncode != 0:
            pytest.fail(f"meganeura {' '.join(map(str, args))}: exit {r.returncode}\n{r.stderr}")
        return r

    return run


def pytest_addoption(parser):
    parser.addoption("--api-coverage", action="store_true",
                     help="fail the run unless every public function and method of meganeura (as its stubs declare "
                          "them) was called at least once")


def pytest_configure(config):
    if config.getoption("--api-coverage"):
        import api_calls

        config.meganeura_calls = api_calls.instrument()


def pytest_sessionfinish(session, exitstatus):
    calls = getattr(session.config, "meganeura_calls", None)
    if calls is not None and any(v == 0 for v in calls.values()) and session.exitstatus == 0:
        session.exitstatus = 1


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    calls = getattr(config, "meganeura_calls", None)
    if calls is None:
        return
    missing = sorted(k for k, v in calls.items() if v == 0)
    if missing:
        terminalreporter.write_line(f"api coverage: FAILED: {len(missing)} of {len(calls)} public functions never "
                                    "called: " + ", ".join(missing), red=True)
    else:
        terminalreporter.write_line(f"api coverage: all {len(calls)} public functions and methods were called")


def vulkan_device_or_skip():
    """Skips (with the reason) where there is no Vulkan device, as the C++ tests do."""
    import meganeura as mn

    try:
        with mn.Session("vulkan", cache_dir="-") as s:
            return s.device_name
    except RuntimeError as e:
        pytest.skip(f"no Vulkan device: {e}")
