"""Builds cpudl's extension module with the repository's CMake build (pyproject.toml holds the rest).

The extension is the CMake target cpudl_python, built in CPUDL_BUILD_DIR (default: build/, the
release preset); its shared object is copied into the wheel beside the package's Python files."""
import glob
import os
import shutil
import subprocess

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeBuild(build_ext):
    def run(self):
        build_dir = os.environ.get("CPUDL_BUILD_DIR", os.path.join(ROOT, "build"))
        if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
            subprocess.check_call(["cmake", "--preset", "release"], cwd=ROOT)
        subprocess.check_call(["cmake", "--build", build_dir, "--target", "cpudl_python", "-j", str(os.cpu_count() or 2)])
        built = glob.glob(os.path.join(build_dir, "python", "cpudl", "_cpudl*.so"))
        if not built:
            raise RuntimeError(f"no _cpudl*.so in {build_dir}/python/cpudl after building cpudl_python")
        target = os.path.join(self.build_lib, "cpudl")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(built[0], target)


setup(ext_modules=[Extension("cpudl._cpudl", sources=[])], cmdclass={"build_ext": CMakeBuild})
