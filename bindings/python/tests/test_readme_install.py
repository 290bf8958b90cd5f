"""The install commands of bindings/python/README.md work as written on Debian's Python (PEP 668: its pip refuses
to install outside a virtual environment), offline. Runs the README's marked block in a temporary directory that
holds a copy of bindings/python and a link to the built library, with Debian's /usr/bin first on PATH."""

import os
import re
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
MARK = "<!-- tests/test_readme_install.py runs this block"


def readme_block():
    text = open(os.path.join(PKG, "README.md"), encoding="utf-8").read()
    at = text.index(MARK)
    m = re.search(r"```sh\n(.*?)```", text[at:], re.S)
    return m.group(1)


def prerequisites():
    """Why the block cannot run here (None if it can): what Debian packages it names are missing."""
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        return "no Debian /usr/bin/python3"
    probe = "import ensurepip, setuptools, wheel, numpy"
    r = subprocess.run([py, "-c", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return "Debian's python3-venv/-setuptools/-wheel/-numpy missing: " + r.stderr.strip().splitlines()[-1]
    return None


def test_readme_install_block_runs(tmp_path):
    why = prerequisites()
    if why:
        pytest.skip(why)
    lib = os.environ.get("LIBFLASH_PATH")
    if not lib:
        pytest.skip("LIBFLASH_PATH is not set (scripts/run-tests.sh sets it)")
    shutil.copytree(PKG, tmp_path / "bindings" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".pytest_cache"))
    os.symlink(lib if os.path.isdir(lib) else os.path.dirname(os.path.abspath(lib)), tmp_path / "build")
    env = {k: v for k, v in os.environ.items() if k not in ("LIBFLASH_PATH", "PYTHONPATH", "VIRTUAL_ENV", "PIP_TARGET")}
    env["PATH"] = "/usr/bin:/bin:" + env.get("PATH", "")
    r = subprocess.run(["bash", "-euo", "pipefail", "-c", readme_block()], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, "README block failed:\n" + r.stdout + r.stderr
    version = r.stdout.strip().splitlines()[-1]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), r.stdout


def test_plain_system_pip_is_refused_as_the_readme_says():
    """The README's reason for the venv: Debian's pip refuses a system install (if this stops being true, the
    README can be simplified)."""
    if not os.path.exists("/usr/lib/python3/dist-packages") or not any(
            os.path.exists("/usr/lib/python3.%d/EXTERNALLY-MANAGED" % m) for m in range(9, 20)):
        pytest.skip("not a PEP 668 Debian Python")
    # Debian's own pip as shipped: no pip configuration files and no PIP_* variables (a machine whose pip.conf or
    # environment sets break-system-packages, as the H200 image does, would install).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    r = subprocess.run(["/usr/bin/python3", "-m", "pip", "install", "--dry-run", "--no-index", "--no-build-isolation",
                        PKG], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and "externally-managed-environment" in (r.stdout + r.stderr)
