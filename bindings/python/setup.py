"""setuptools hooks for the libflash binding (the metadata is in pyproject.toml).

Bundling a built library into the package and its wheel:

    LIBFLASH_BUNDLE=build/libflash.so.1 pip wheel --no-build-isolation --no-index --no-deps -w dist ./bindings/python

LIBFLASH_BUNDLE names the shared library (or the build directory holding libflash.so.1); it is copied (symlinks
resolved) into the built package as libflash/lib/libflash.so.1, where `import libflash` finds it after LIBFLASH_PATH and
before the system loader, after checking at build time that it loads and speaks ABI major version 1. A library copied
into bindings/python/libflash/lib/ by hand is bundled the same way. A wheel that bundles a library is tagged for the
platform (py3-none-<platform>: the library is native code, the binding pure Python for any Python 3); without one the
wheel is pure (py3-none-any) and finds the library through LIBFLASH_PATH or the system loader.

libflash.so needs only the C/C++ runtime (libstdc++, libgcc_s, libm, libc) and, for its GPU code, the NVIDIA driver's
libcuda.so.1 at run time: the CUDA runtime is linked statically, so the wheel works offline on any machine with the
driver.
"""

import ctypes
import glob
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

try:  # setuptools >= 70.1 ships bdist_wheel itself
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # older setuptools: the wheel package's (Debian 12: python3-wheel 0.38)
    from wheel.bdist_wheel import bdist_wheel

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_LIB = os.path.join(HERE, "libflash", "lib")
BUNDLED_NAME = "libflash.so.1"
ABI_MAJOR = 1


def _bundle_source():
    """The library LIBFLASH_BUNDLE names (a file, or a directory holding libflash.so.1 / libflash.so), or None."""
    value = os.environ.get("LIBFLASH_BUNDLE", "").strip()
    if not value:
        return None
    path = os.path.abspath(os.path.expanduser(value))
    candidates = [os.path.join(path, n) for n in (BUNDLED_NAME, "libflash.so")] if os.path.isdir(path) else [path]
    for c in candidates:
        if os.path.isfile(c):
            return os.path.realpath(c)
    raise SystemExit("libflash setup.py: LIBFLASH_BUNDLE=%r: no shared library there (tried %s)"
                     % (value, ", ".join(candidates)))


def _hand_copied():
    return sorted(glob.glob(os.path.join(PACKAGE_LIB, "libflash*.so*")))


def _check_library(path):
    """Refuses to bundle what is not a loadable libflash of this ABI major version."""
    try:
        lib = ctypes.CDLL(path)
        major = lib.flash_version_major
    except (OSError, AttributeError) as e:
        raise SystemExit("libflash setup.py: %s is not a loadable libflash (%s)" % (path, e))
    major.restype = ctypes.c_uint32
    major.argtypes = []
    if major() != ABI_MAJOR:
        raise SystemExit("libflash setup.py: %s is ABI major %d but this binding speaks %d" % (path, major(), ABI_MAJOR))


def bundles_library():
    return _bundle_source() is not None or bool(_hand_copied())


class BuildPy(build_py):
    """build_py, then the library LIBFLASH_BUNDLE names copied in; copies left in the build directory by an earlier
    build are removed first, so that a build never ships a stale library."""

    def run(self):
        super().run()
        dst_dir = os.path.join(self.build_lib, "libflash", "lib")
        src = _bundle_source()
        keep = {os.path.basename(p) for p in _hand_copied()} if src is None else set()
        for old in glob.glob(os.path.join(dst_dir, "libflash*.so*")):
            if os.path.basename(old) not in keep:
                os.remove(old)
        if src is not None:
            _check_library(src)
            os.makedirs(dst_dir, exist_ok=True)
            shutil.copyfile(src, os.path.join(dst_dir, BUNDLED_NAME))
            os.chmod(os.path.join(dst_dir, BUNDLED_NAME), 0o755)
            self.announce("bundling %s as libflash/lib/%s" % (src, BUNDLED_NAME), level=2)


class BinaryDistribution(Distribution):
    """With a bundled library the package holds native code: installed to platlib, its wheel not pure."""

    def has_ext_modules(self):
        return bundles_library()


class BdistWheel(bdist_wheel):
    """A platform wheel (py3-none-<platform>) when a native library is bundled, a pure one otherwise."""

    def get_tag(self):
        python, abi, plat = super().get_tag()
        if not self.root_is_pure:
            python, abi = "py3", "none"  # no Python extension inside: any CPython 3 (and its ABI) loads it via ctypes
        return python, abi, plat


setup(distclass=BinaryDistribution, cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel})
