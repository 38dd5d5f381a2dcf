"""The flash_attn shim: explicit install, the modules code written for flash_attn imports, package
metadata, refusal to shadow a real flash_attn. Each test runs in a fresh interpreter, since the
shim changes the import system."""
from __future__ import annotations

import subprocess
import sys
import textwrap


def run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_nothing_is_installed_on_import():
    run_python("""
        import importlib.util, flashattn, flashattn.compat
        assert importlib.util.find_spec("flash_attn") is None
        assert not flashattn.compat.installed()
    """)


def test_install_provides_the_flash_attn_modules_and_metadata():
    out = run_python("""
        import importlib.metadata, importlib.util
        import flashattn.compat; flashattn.compat.install()
        import numpy as np
        from flash_attn import flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache
        from flash_attn.flash_attn_interface import flash_attn_qkvpacked_func, flash_attn_combine
        from flash_attn.bert_padding import index_first_axis, pad_input, unpad_input
        from flash_attn.layers.rotary import apply_rotary_emb
        import flash_attn, flashattn
        assert flash_attn_func is flashattn.flash_attn_func
        assert importlib.util.find_spec("flash_attn") is not None
        version = importlib.metadata.version("flash_attn")
        assert version == flash_attn.__version__ == importlib.metadata.version("flash-attn")
        assert "flash_attn" in importlib.metadata.packages_distributions()
        q = np.ones((1, 3, 2, 16), np.float32)
        assert flash_attn_func(q, q, q, causal=True).shape == (1, 3, 2, 16)
        flashattn.compat.uninstall()
        assert importlib.util.find_spec("flash_attn") is None
        print(version)
    """)
    assert out.strip().startswith("2.7.4+flashattn.")


def test_install_refuses_to_shadow_a_real_flash_attn():
    run_python("""
        import sys, types
        sys.modules["flash_attn"] = types.ModuleType("flash_attn")  # stands for an imported real one
        import flashattn.compat
        try:
            flashattn.compat.install()
        except RuntimeError as e:
            assert "override=True" in str(e)
        else:
            raise AssertionError("install() shadowed a real flash_attn silently")
        flashattn.compat.install(override=True)
        import flash_attn
        assert hasattr(flash_attn, "flash_attn_func")
    """)
