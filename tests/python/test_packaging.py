"""Packaging: the license file and metadata agree, the torch requirement is declared, the package
is marked typed, and every public function documents each of its arguments."""
from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

import flashattn
from flashattn import bert_padding, fa3_interface, interface, numpy_api, rotary

ROOT = Path(__file__).resolve().parents[2]


def test_license_file_matches_the_metadata():
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("BSD 3-Clause License")
    assert "Neither the name of the copyright holder" in text  # the third clause
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'license = { text = "BSD-3-Clause" }' in pyproject


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python >= 3.11")
def test_torch_is_an_optional_requirement():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["dependencies"] == []  # numpy alone or torch alone: neither is required
    assert project["optional-dependencies"]["torch"] == ["torch>=2.4"]


def test_package_is_marked_typed():
    assert (Path(flashattn.__file__).parent / "py.typed").exists()


PUBLIC = [getattr(interface, name) for name in interface.__all__] + \
    [getattr(fa3_interface, name) for name in fa3_interface.__all__] + \
    [interface._flash_attn_forward, interface._flash_attn_backward, interface._flash_attn_varlen_forward,
     interface._flash_attn_varlen_backward, numpy_api.fwd, numpy_api.bwd, numpy_api.fwd_kvcache,
     numpy_api.combine, numpy_api.dropout_mask, bert_padding.unpad_input, bert_padding.pad_input,
     bert_padding.unpad_input_for_concatenated_sequences, bert_padding.index_first_axis,
     bert_padding.index_put_first_axis, rotary.apply_rotary_emb, rotary.apply_rotary_emb_qkv_,
     rotary.apply_rotary_emb_kv_, flashattn.device_info, flashattn.set_cpu_threads]
@pytest.mark.parametrize("function", PUBLIC, ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_argument_is_documented(function):
    doc = inspect.getdoc(function) or ""
    assert len(doc) > 40, f"{function.__name__}: no docstring"
    missing = [name for name in inspect.signature(function).parameters if name not in doc]
    assert not missing, f"{function.__name__}: the docstring does not mention {missing}"


@pytest.mark.parametrize("function", PUBLIC, ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_public_functions_have_type_hints(function):
    signature = inspect.signature(function)
    assert signature.return_annotation is not inspect.Signature.empty, function.__name__
    unannotated = [name for name, p in signature.parameters.items() if p.annotation is inspect.Parameter.empty]
    assert not unannotated, f"{function.__name__}: no annotation for {unannotated}"
