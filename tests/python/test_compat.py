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


def test_install_provides_flash_attention_3s_interface_and_metadata():
    out = run_python("""
        import importlib.metadata, importlib.util
        import flashattn.compat; flashattn.compat.install()
        import numpy as np
        import flash_attn_interface, flash_attn_3, flash_attn_3.flash_attn_interface as nested
        from flash_attn_interface import (flash_attn_func, flash_attn_varlen_func, flash_attn_with_kvcache,
                                          flash_attn_combine, get_scheduler_metadata, flash_attn_qkvpacked_func)
        import flashattn.fa3_interface as fa3
        assert flash_attn_func is fa3.flash_attn_func is nested.flash_attn_func
        # What Transformers checks for attn_implementation="flash_attention_3": the module, and that
        # the distribution providing it is named flash-attn-3.
        assert importlib.util.find_spec("flash_attn_interface") is not None
        dists = importlib.metadata.packages_distributions()
        assert "flash_attn_3" in dists["flash_attn_interface"], dists.get("flash_attn_interface")
        assert "flash_attn_3" in dists["flash_attn_3"] and "flash_attn" in dists["flash_attn"]
        version = importlib.metadata.version("flash_attn_3")
        assert version == importlib.metadata.version("flash-attn-3") == flash_attn_3.__version__
        q = np.ones((1, 3, 2, 16), np.float32)
        out, lse = flash_attn_func(q, q, q, causal=True, return_attn_probs=True)
        assert out.shape == (1, 3, 2, 16) and lse.shape == (1, 2, 3)
        flashattn.compat.uninstall()
        assert importlib.util.find_spec("flash_attn_interface") is None
        assert "flash_attn_interface" not in importlib.metadata.packages_distributions()
        print(version)
    """)
    assert out.strip().startswith("3.0.0+flashattn.")


def test_install_one_shim_alone():
    run_python("""
        import importlib.util, importlib.metadata
        import flashattn.compat; flashattn.compat.install(flash_attn_3=False)
        assert importlib.util.find_spec("flash_attn") is not None
        assert importlib.util.find_spec("flash_attn_interface") is None
        assert "flash_attn_interface" not in importlib.metadata.packages_distributions()
        flashattn.compat.uninstall()
        flashattn.compat.install(flash_attn=False)
        assert importlib.util.find_spec("flash_attn") is None
        assert importlib.util.find_spec("flash_attn_interface") is not None
    """)


def test_install_refuses_to_shadow_a_real_flash_attention_3():
    run_python("""
        import sys, types
        sys.modules["flash_attn_interface"] = types.ModuleType("flash_attn_interface")
        import flashattn.compat
        try:
            flashattn.compat.install()
        except RuntimeError as e:
            assert "flash_attn_interface" in str(e) and "override=True" in str(e)
        else:
            raise AssertionError("install() shadowed a real flash_attn_interface silently")
        flashattn.compat.install(flash_attn_3=False)  # the flash_attn shim alone is fine
        import flash_attn
        assert not hasattr(sys.modules["flash_attn_interface"], "flash_attn_func")
    """)


def test_flash_attn_submodules_offer_what_code_imports():
    run_python("""
        import flashattn.compat; flashattn.compat.install()
        from flash_attn.flash_attn_interface import (_flash_attn_forward, _flash_attn_backward,
                                                     _flash_attn_varlen_forward, _flash_attn_varlen_backward)
        from flash_attn.bert_padding import unpad_input_for_concatenated_sequences
        from flash_attn.layers.rotary import (apply_rotary_emb, apply_rotary_emb_func, apply_rotary_emb_qkv_,
                                              apply_rotary_emb_kv_)
        import flash_attn.layers.rotary as rotary
        try:
            import torch
        except ImportError:
            pass
        else:
            assert issubclass(rotary.RotaryEmbedding, torch.nn.Module)
    """)
