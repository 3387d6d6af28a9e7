# Shared paths for the Python suite: ctest passes them through the environment (tests/CMakeLists.txt);
# run by hand with PYTHONPATH=build/python and the same variables.
import os
import pathlib

import pytest

SOURCE = pathlib.Path(__file__).resolve().parents[2]


def _env_path(name, default):
    return pathlib.Path(os.environ.get(name, default))


@pytest.fixture(scope="session")
def cpudl_binary():
    return _env_path("CPUDL_BINARY", SOURCE / "build" / "cpudl")


@pytest.fixture(scope="session")
def llm_fixtures():
    return _env_path("CPUDL_LLM_FIXTURES_DIR", SOURCE / "build" / "llm-fixtures")


@pytest.fixture(scope="session")
def onnx_fixtures():
    return SOURCE / "tests" / "onnx"


@pytest.fixture(scope="session")
def mnist_tiny():
    return SOURCE / "tests" / "golden" / "mnist_tiny"


def resident_bytes():
    """This process's resident set size, from /proc/self/statm."""
    pages = int(open("/proc/self/statm").read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")
