"""The built extension as a binary: what it exports and imports, and a build that links libstdc++
statically (as some toolchains do by default) running next to the process's shared libstdc++.

The failure these guard against: a module carrying a static libstdc++ of another version than the
shared one that torch or numpy loaded first exported that copy's symbols; the dynamic linker bound
part of them to the shared library, so the module ran half on each, and formatting a float in an
error message crashed inside libstdc++ (their locale tables differ). The module now exports its init
function alone (python/CMakeLists.txt) and formats messages with snprintf, not iostreams.
These tests read ELF symbol tables with binutils' nm and skip where it is missing (not Linux)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

import flashattn

NM = shutil.which("nm")
pytestmark = pytest.mark.skipif(NM is None or not sys.platform.startswith("linux"),
                                reason="needs binutils' nm and an ELF extension")
ROOT = Path(__file__).resolve().parents[2]


def dynamic_symbols(path: Path, which: str) -> list:
    """Names in the dynamic symbol table: which = 'defined' or 'undefined'."""
    out = subprocess.run([NM, "-D", f"--{which}-only", str(path)], capture_output=True, text=True, check=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def extension_path() -> Path:
    return Path(flashattn._ext.__file__)


def test_extension_exports_its_init_function_alone():
    exported = dynamic_symbols(extension_path(), "defined")
    assert exported == ["PyInit__ext"], f"exported besides PyInit__ext: {sorted(set(exported) - {'PyInit__ext'})[:20]}"


def test_messages_format_floats_without_iostreams():
    # ostream::_M_insert<double> / <long double> is how `stream << float` reaches libstdc++.
    imported = dynamic_symbols(extension_path(), "undefined")
    streamed = [name for name in imported if name.startswith(("_ZNSo9_M_insertI", "_ZNSt7num_put"))]
    assert not streamed, f"the extension formats numbers through iostreams: {streamed}"


def _static_libstdcxx_available() -> bool:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        return False
    path = subprocess.run([cxx, "-print-file-name=libstdc++.a"], capture_output=True, text=True).stdout.strip()
    return os.path.isabs(path) and os.path.exists(path)


def _build_tools_available() -> bool:
    if not (_module_available("nanobind") and _module_available("scikit_build_core")):
        return False
    return shutil.which("cmake") is not None or _module_available("cmake")


def _module_available(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


# Runs in a fresh interpreter with the statically linked package first on sys.path. The process's
# shared libstdc++ is loaded first and globally, as torch does, so that exported symbols of the
# module's own copy would bind to it.
STATIC_SCRIPT = textwrap.dedent("""
    import ctypes, sys
    ctypes.CDLL("libstdc++.so.6", mode=ctypes.RTLD_GLOBAL)
    sys.path.insert(0, sys.argv[1])
    import numpy as np
    import flashattn
    assert flashattn.__file__.startswith(sys.argv[1]), flashattn.__file__
    q = np.ones((1, 4, 2, 64), np.float32)
    messages = []
    # The extension's own entry, so that the C++ library formats each message (not Python).
    for kwargs in (dict(dropout_p=1.5), dict(softcap=float("nan")), dict(softmax_scale=float("inf"))):
        status = flashattn._ext.fwd(q, q, q, np.empty_like(q), backend="cpu", **kwargs)
        messages.append(status[2])
    out = flashattn.flash_attn_func(q, q, q, causal=True)
    assert np.allclose(out, 1.0), out
    print("\\n".join(messages))
""")


@pytest.mark.skipif(not _static_libstdcxx_available(), reason="the C++ toolchain has no static libstdc++")
@pytest.mark.skipif(not _build_tools_available(), reason="scikit-build-core, nanobind or cmake missing")
def test_static_libstdcxx_build_runs_beside_the_shared_one(tmp_path):
    """Builds the package with -static-libstdc++ (CPU backend; incremental in build/python-static)
    and runs error paths that format floats, and an attention call, in a process that loaded the
    shared libstdc++ first."""
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(os.cpu_count() or 2))
    wheel_dir = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
         "--disable-pip-version-check", "-C", "cmake.define.FLASHATTN_CUDA=OFF",
         "-C", "cmake.define.CMAKE_MODULE_LINKER_FLAGS=-static-libstdc++ -static-libgcc",
         "-C", f"build-dir={ROOT / 'build' / 'python-static'}", "-w", str(wheel_dir), str(ROOT)],
        check=True, env=env, capture_output=True, text=True, timeout=1800)
    (wheel,) = wheel_dir.glob("flashattn-*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    (module,) = (site / "flashattn").glob("_ext*.so")
    imported = dynamic_symbols(module, "undefined")
    assert not [name for name in imported if "GLIBCXX" in name or name.startswith("_ZNSt")], \
        "libstdc++ was not linked statically: the test would prove nothing"
    assert dynamic_symbols(module, "defined") == ["PyInit__ext"]
    proc = subprocess.run([sys.executable, "-c", STATIC_SCRIPT, str(site)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-3000:]}"
    lines = proc.stdout.strip().splitlines()
    assert lines == ["argument 'dropout_p': must be in [0, 1), got 1.5",
                     "argument 'softcap': must be finite and >= 0 (0 = off), got nan",
                     "argument 'softmax_scale': must be finite when given, got inf"], lines
