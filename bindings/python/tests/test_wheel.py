"""Packaging (bindings/python/setup.py): a wheel built offline with Debian's pip, setuptools and wheel from a built
tree bundles the library (LIBFLASH_BUNDLE), is tagged for the platform, installs into a fresh venv and works there
with no LIBFLASH_PATH (the bundled copy is the one loaded); without LIBFLASH_BUNDLE the wheel is pure and ships no
library; a bundle that is not a libflash is refused at build time. Builds in a copy of bindings/python in a temporary
directory (pip builds in-tree). Skipped when Debian's python3-pip/-venv/-setuptools/-wheel or a built library
(LIBFLASH_PATH) is missing."""

import os
import platform
import re
import shutil
import subprocess
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
PY = "/usr/bin/python3"


def prerequisites():
    if not os.path.exists(PY):
        return "no Debian /usr/bin/python3"
    probe = "import setuptools, wheel, ensurepip, numpy"  # (setuptools first: its distutils shim must come first)
    r = subprocess.run([PY, "-c", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "Debian's python3-venv/-setuptools/-wheel/-numpy missing: " + r.stderr.strip().splitlines()[-1]
    r = subprocess.run([PY, "-m", "pip", "--version"], capture_output=True, text=True)
    if r.returncode != 0:
        return "Debian's python3-pip missing: " + (r.stderr.strip().splitlines() or ["?"])[-1]
    return None


def built_library():
    lib = os.environ.get("LIBFLASH_PATH")
    if not lib:
        return None
    if os.path.isdir(lib):
        for n in ("libflash.so.1", "libflash.so"):
            if os.path.exists(os.path.join(lib, n)):
                return os.path.join(lib, n)
        return None
    return lib if os.path.exists(lib) else None


@pytest.fixture(scope="module")
def tools():
    why = prerequisites()
    if why:
        pytest.skip(why)
    lib = built_library()
    if lib is None:
        pytest.skip("LIBFLASH_PATH does not name a built library (scripts/run-tests.sh sets it)")
    return lib


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LIBFLASH_PATH", "PYTHONPATH", "VIRTUAL_ENV", "PIP_TARGET", "LIBFLASH_BUNDLE")}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    env["PIP_NO_INPUT"] = "1"
    env.update(extra)
    return env


def build_wheel(tmp_path, name, **env):
    src = tmp_path / name / "python"
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache",
                                                            "libflash*.so*"))
    out = tmp_path / name / "dist"
    r = subprocess.run([PY, "-m", "pip", "wheel", "--no-build-isolation", "--no-index", "--no-deps", "-w", str(out),
                        str(src)], env=clean_env(**env), capture_output=True, text=True, timeout=300)
    return r, sorted(out.glob("*.whl")) if out.exists() else []


def test_wheel_bundles_the_library_and_works_in_a_venv(tools, tmp_path):
    lib = tools
    r, wheels = build_wheel(tmp_path, "bundled", LIBFLASH_BUNDLE=lib)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(wheels) == 1, wheels
    whl = wheels[0]
    assert re.fullmatch(r"libflash-\d+\.\d+\.\d+-py3-none-linux_%s\.whl" % re.escape(platform.machine()), whl.name), \
        whl.name
    with zipfile.ZipFile(whl) as z:
        names = z.namelist()
        assert "libflash/lib/libflash.so.1" in names, names
        with open(os.path.realpath(lib), "rb") as f:
            assert z.read("libflash/lib/libflash.so.1") == f.read()
        assert "Root-Is-Purelib: false" in z.read([n for n in names if n.endswith("/WHEEL")][0]).decode()

    venv = tmp_path / "venv"
    r = subprocess.run([PY, "-m", "venv", "--system-site-packages", str(venv)], env=clean_env(), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-index", "--no-deps", str(whl)], env=clean_env(),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    code = ("import libflash, numpy as np\n"
            "q = np.random.default_rng(0).standard_normal((1, 8, 2, 16)).astype(np.float32)\n"
            "o = libflash.attention(q, q, q, causal=True)\n"
            "assert o.shape == q.shape and np.isfinite(o).all()\n"
            "print(libflash.library_path())\n"
            "print(libflash.__file__)\n")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=clean_env(), cwd=str(tmp_path),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    loaded, module = r.stdout.split()
    site = str(venv)
    assert module.startswith(site), module  # the installed package, not the source tree
    assert loaded.startswith(site) and loaded.endswith(os.path.join("libflash", "lib", "libflash.so.1")), loaded


def test_wheel_without_bundle_is_pure(tools, tmp_path):
    r, wheels = build_wheel(tmp_path, "pure")
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(wheels) == 1 and wheels[0].name.endswith("-py3-none-any.whl"), wheels
    with zipfile.ZipFile(wheels[0]) as z:
        assert not [n for n in z.namelist() if ".so" in n]


def test_bundling_something_else_is_refused(tools, tmp_path):
    bogus = tmp_path / "libflash.so.1"
    bogus.write_bytes(b"not a shared library")
    r, wheels = build_wheel(tmp_path, "bogus", LIBFLASH_BUNDLE=str(bogus))
    assert r.returncode != 0 and not wheels
    assert "not a loadable libflash" in r.stdout + r.stderr
    r, wheels = build_wheel(tmp_path, "missing", LIBFLASH_BUNDLE=str(tmp_path / "nowhere"))
    assert r.returncode != 0 and "no shared library there" in r.stdout + r.stderr


def test_source_tree_has_no_bundled_library_committed():
    """The hand-copy route (libflash/lib/) must not leave a library in the repository: it is git-ignored."""
    r = subprocess.run(["git", "-C", PKG, "ls-files", "libflash/lib"], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("not a git checkout")
    assert [n for n in r.stdout.split() if ".so" in n] == []
