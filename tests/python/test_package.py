# The package as a whole: cpudl.doctor() is `cpudl doctor --json`, the type stubs name everything the
# extension exports, threads are settable, and `pip install` into a fresh virtual environment works
# offline.
import ast
import json
import pathlib
import subprocess
import sys

import pytest

import cpudl
from cpudl import _cpudl

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "cpudl"


def test_doctor_is_the_cli_report(cpudl_binary):
    ours = cpudl.doctor()
    cli = json.loads(subprocess.run([str(cpudl_binary), "doctor", "--json"], check=True, capture_output=True,
                                    text=True).stdout)
    assert list(ours) == list(cli)
    for key in ("cpu", "isa", "cpuid", "level", "kernels", "caches", "numa_nodes", "affinity"):
        assert ours[key] == cli[key], key


def test_threads_can_be_set():
    before = cpudl.get_threads()
    cpudl.set_threads(1)
    assert cpudl.get_threads() == 1
    cpudl.set_threads(before)
    with pytest.raises(ValueError, match="thread count"):
        cpudl.set_threads(0)


def stub_names():
    tree = ast.parse((PACKAGE / "_cpudl.pyi").read_text())
    top, classes = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top.add(node.name)
        if isinstance(node, ast.ClassDef):
            classes[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)} | \
                {n.target.id for n in node.body if isinstance(n, ast.AnnAssign)}
    return top, classes


def test_stubs_cover_the_extension():
    top, classes = stub_names()
    exported = {n for n in dir(_cpudl) if not n.startswith("__")}
    assert sorted(exported - top) == [], "names of _cpudl missing from _cpudl.pyi"
    assert sorted(top - exported) == [], "names in _cpudl.pyi that _cpudl does not have"
    inherited = set(dir(object)) | {"__dict__", "__module__", "__weakref__"}
    for cls, members in classes.items():
        own = {n for n in vars(getattr(_cpudl, cls)) if n not in inherited and n not in ("_pybind11_conduit_v1_",)}
        missing = sorted(n for n in own - members if not (n.startswith("__") and n not in (
            "__len__", "__getitem__", "__iter__", "__next__", "__array__", "__dlpack__", "__dlpack_device__")))
        assert missing == [], f"{cls}: members missing from _cpudl.pyi"


def test_public_functions_have_docstrings():
    for module in (cpudl, cpudl.nn, cpudl.optim, cpudl.data, cpudl.llm):
        for name in getattr(module, "__all__", [n for n in dir(module) if not n.startswith("_")]):
            value = getattr(module, name)
            if callable(value) and not isinstance(value, type(json)):
                assert (value.__doc__ or "").strip(), f"{module.__name__}.{name} has no docstring"


def test_pip_installs_offline_into_a_virtual_environment(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    root = PACKAGE.parents[1]
    subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-index", "--no-deps", "-q",
                    str(root)], check=True, capture_output=True, cwd=tmp_path)
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import cpudl; print(cpudl.__file__); print(cpudl.tensor([1.5]).item())"],
                         check=True, capture_output=True, text=True, cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})
    path, value = out.stdout.split()
    assert path.startswith(str(venv)) and float(value) == 1.5
