"""Shims for ``flash_attn`` (FlashAttention-2's package) and ``flash_attn_interface`` (FlashAttention-3's
module), so code written for either runs unchanged on flashattn.

Nothing happens on import: call ``install()`` explicitly (the two-line drop-in)::

    import flashattn.compat; flashattn.compat.install()
    from flash_attn import flash_attn_func          # now flashattn's
    from flash_attn_interface import flash_attn_func as flash_attn_func_v3   # FA3's interface

``install()`` puts an import hook for these modules at the front of ``sys.meta_path``:

    flash_attn                        the functions below, and __version__
    flash_attn.flash_attn_interface   flash_attn_func, ..._qkvpacked/_kvpacked, the varlen ones,
                                      flash_attn_with_kvcache, flash_attn_combine, and the private
                                      _flash_attn_forward/_backward (+ _varlen_) of flash_attn 2.7
    flash_attn.bert_padding           pad_input, unpad_input, index_first_axis, index_put_first_axis,
                                      unpad_input_for_concatenated_sequences
    flash_attn.layers, flash_attn.layers.rotary   apply_rotary_emb (= apply_rotary_emb_func),
                                      apply_rotary_emb_qkv_, apply_rotary_emb_kv_, RotaryEmbedding
    flash_attn_interface              FlashAttention-3's interface (flashattn.fa3_interface)
    flash_attn_3, flash_attn_3.flash_attn_interface   the same, as FA3's package lays it out

and registers package metadata for the distributions ``flash_attn`` and ``flash_attn_3`` (so
``importlib.metadata.version(...)`` and ``packages_distributions()``, which Hugging Face Transformers
checks for ``attn_implementation="flash_attention_2"`` / ``"flash_attention_3"``, answer). The
versions reported are the interfaces implemented with a local label naming this package, e.g.
``2.7.4+flashattn.0.1.0`` and ``3.0.0+flashattn.0.1.0``: honest about what answers. Call
``install()`` before importing a library that caches package lookups at import time (Transformers
does).

If a real ``flash_attn`` (or FA3's ``flash_attn_interface`` / ``flash_attn_3``) is installed or
already imported, ``install()`` refuses (RuntimeError) unless ``override=True``; pass
``flash_attn_3=False`` (or ``flash_attn=False``) to install one shim alone. ``uninstall()`` removes
the hooks, the metadata and the shim modules.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import re
import sys
from typing import Any, Dict, List, Optional, Sequence

from . import __version__ as _flashattn_version

# The flash_attn release whose Python interface this package mirrors, and FlashAttention-3's.
FLASH_ATTN_INTERFACE_VERSION = "2.7.4"
FLASH_ATTN_3_INTERFACE_VERSION = "3.0.0"
SHIM_VERSION = f"{FLASH_ATTN_INTERFACE_VERSION}+flashattn.{_flashattn_version}"
SHIM_VERSION_3 = f"{FLASH_ATTN_3_INTERFACE_VERSION}+flashattn.{_flashattn_version}"

_INTERFACE_NAMES = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
    "flash_attn_combine",
]
_PRIVATE_NAMES = ["_flash_attn_forward", "_flash_attn_backward", "_flash_attn_varlen_forward",
                  "_flash_attn_varlen_backward"]
_BERT_PADDING_NAMES = ["pad_input", "unpad_input", "index_first_axis", "index_put_first_axis",
                       "unpad_input_for_concatenated_sequences"]
_ROTARY_NAMES = ["apply_rotary_emb", "apply_rotary_emb_func", "apply_rotary_emb_qkv_", "apply_rotary_emb_kv_",
                 "RotaryEmbedding"]
_FA3_NAMES = ["flash_attn_func", "flash_attn_varlen_func", "flash_attn_qkvpacked_func", "flash_attn_with_kvcache",
              "flash_attn_combine", "get_scheduler_metadata"]

# shim module -> (flashattn module providing it, names, is_package, which shim: "fa2" or "fa3")
_MODULES: Dict[str, tuple] = {
    "flash_attn": ("flashattn.interface", _INTERFACE_NAMES, True, "fa2"),
    "flash_attn.flash_attn_interface": ("flashattn.interface", _INTERFACE_NAMES + _PRIVATE_NAMES, False, "fa2"),
    "flash_attn.bert_padding": ("flashattn.bert_padding", _BERT_PADDING_NAMES, False, "fa2"),
    "flash_attn.layers": (None, [], True, "fa2"),
    "flash_attn.layers.rotary": ("flashattn.rotary", _ROTARY_NAMES, False, "fa2"),
    "flash_attn_interface": ("flashattn.fa3_interface", _FA3_NAMES, False, "fa3"),
    "flash_attn_3": ("flashattn.fa3_interface", _FA3_NAMES, True, "fa3"),
    "flash_attn_3.flash_attn_interface": ("flashattn.fa3_interface", _FA3_NAMES, False, "fa3"),
}
# The top-level names each shim owns, and its distribution's metadata.
_TOP_LEVEL = {"fa2": ["flash_attn"], "fa3": ["flash_attn_3", "flash_attn_interface"]}
_DISTRIBUTIONS = {"fa2": ("flash_attn", SHIM_VERSION), "fa3": ("flash_attn_3", SHIM_VERSION_3)}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


class _ShimFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the shim modules, built from flashattn's."""

    def __init__(self, shims: Sequence[str]) -> None:
        self.shims = tuple(shims)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in _MODULES or _MODULES[fullname][3] not in self.shims:
            return None
        is_package = _MODULES[fullname][2]
        spec = importlib.machinery.ModuleSpec(fullname, self, origin="flashattn.compat", is_package=is_package)
        if is_package:
            spec.submodule_search_locations = []
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: Any) -> None:
        source, names, _, shim = _MODULES[module.__name__]
        if source is not None:
            provider = importlib.import_module(source)
            for name in names:
                try:
                    setattr(module, name, getattr(provider, name))
                except ImportError:
                    pass  # needs torch (RotaryEmbedding): resolved on access, which then says so

            def __getattr__(name: str, provider: Any = provider, names: Sequence[str] = tuple(names)) -> Any:
                if name in names:
                    return getattr(provider, name)
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

            module.__getattr__ = __getattr__
        module.__all__ = list(names)
        if module.__name__ in ("flash_attn", "flash_attn_3"):
            module.__version__ = _DISTRIBUTIONS[shim][1]
        module.__doc__ = f"{module.__name__} shim installed by flashattn.compat (from {source or 'flashattn'})."


class _ShimDistribution(importlib.metadata.Distribution):
    """Package metadata for a shim: the distribution's name and version, and its top-level modules
    (read by importlib.metadata.packages_distributions())."""

    def __init__(self, shim: str) -> None:
        name, version = _DISTRIBUTIONS[shim]
        self._files = {
            "METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                         f"Summary: {name} interface provided by flashattn (flashattn.compat)\n"),
            "top_level.txt": "".join(f"{module}\n" for module in _TOP_LEVEL[shim]),
            "INSTALLER": "flashattn.compat\n",
        }

    def read_text(self, filename: str) -> Optional[str]:
        return self._files.get(filename)

    def locate_file(self, path: Any) -> Any:
        return None


class _ShimDistributionFinder(importlib.abc.MetaPathFinder):
    def __init__(self, shims: Sequence[str]) -> None:
        self.shims = tuple(shims)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        return None  # finds distributions, not modules

    def find_distributions(self, context: Any = importlib.metadata.DistributionFinder.Context()) -> List[Any]:
        name = getattr(context, "name", None)
        return [_ShimDistribution(shim) for shim in self.shims
                if name is None or _normalize(name) == _normalize(_DISTRIBUTIONS[shim][0])]


_module_finder: Optional[_ShimFinder] = None
_distribution_finder: Optional[_ShimDistributionFinder] = None


def _real_module_present(top_level: str) -> bool:
    existing = sys.modules.get(top_level)
    if existing is not None:
        spec = getattr(existing, "__spec__", None)
        return not (spec is not None and isinstance(spec.loader, _ShimFinder))
    try:
        return importlib.util.find_spec(top_level) is not None
    except (ImportError, ValueError):
        return False


def installed() -> bool:
    """Whether install() is in effect."""
    return _module_finder is not None


def install(override: bool = False, *, flash_attn: bool = True, flash_attn_3: bool = True) -> None:
    """Makes ``import flash_attn`` (flash_attn=True) and ``import flash_attn_interface`` /
    ``flash_attn_3`` (flash_attn_3=True) give flashattn's implementation, with their package
    metadata. Refuses (RuntimeError) when a real one of those is installed or imported, unless
    override=True. A second call is a no-op; uninstall() first to change the selection."""
    global _module_finder, _distribution_finder
    if _module_finder is not None:
        return
    shims = [shim for shim, wanted in (("fa2", flash_attn), ("fa3", flash_attn_3)) if wanted]
    if not shims:
        raise ValueError("flashattn.compat.install(): flash_attn and flash_attn_3 are both False: nothing to install")
    if not override:
        real = [name for shim in shims for name in _TOP_LEVEL[shim] if _real_module_present(name)]
        if real:
            raise RuntimeError(f"flashattn.compat.install(): a real {', '.join(real)} is installed or imported; "
                               "pass override=True to shadow it with flashattn's (or leave that shim out)")
    _forget_modules(shims)  # only reached with override=True
    _module_finder = _ShimFinder(shims)
    _distribution_finder = _ShimDistributionFinder(shims)
    sys.meta_path.insert(0, _module_finder)
    sys.meta_path.append(_distribution_finder)
    importlib.invalidate_caches()


def _forget_modules(shims: Sequence[str]) -> None:
    for top_level in (name for shim in shims for name in _TOP_LEVEL[shim]):
        for name in list(sys.modules):
            if name == top_level or name.startswith(top_level + "."):
                del sys.modules[name]


def uninstall() -> None:
    """Undoes install(): removes the import hooks, the metadata and the shim modules."""
    global _module_finder, _distribution_finder
    shims = _module_finder.shims if _module_finder is not None else ()
    for finder in (_module_finder, _distribution_finder):
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
    _module_finder = _distribution_finder = None
    _forget_modules(shims)
    importlib.invalidate_caches()
