"""A ``flash_attn`` shim, so code written for flash_attn runs unchanged on flashattn.

Nothing happens on import: call ``install()`` explicitly (the two-line drop-in)::

    import flashattn.compat; flashattn.compat.install()
    from flash_attn import flash_attn_func          # now flashattn's

``install()`` puts an import hook for these modules at the front of ``sys.meta_path``:

    flash_attn                        the functions below, and __version__
    flash_attn.flash_attn_interface   flash_attn_func, ..._qkvpacked/_kvpacked, the varlen ones,
                                      flash_attn_with_kvcache, flash_attn_combine
    flash_attn.bert_padding           pad_input, unpad_input, index_first_axis, index_put_first_axis
    flash_attn.layers, flash_attn.layers.rotary   apply_rotary_emb

and registers package metadata for the distribution ``flash_attn`` (so
``importlib.metadata.version("flash_attn")``, which Hugging Face Transformers checks, answers).
The version it reports is the flash_attn interface implemented with a local label naming this
package, e.g. ``2.7.4+flashattn.0.1.0``: honest about what answers. Call ``install()`` before
importing a library that caches package lookups at import time (Transformers does).

If a real ``flash_attn`` is installed or already imported, ``install()`` refuses (RuntimeError)
unless ``override=True``. ``uninstall()`` removes the hook, the metadata and the shim modules.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import re
import sys
from typing import Any, Dict, List, Optional

from . import __version__ as _flashattn_version

# The flash_attn release whose Python interface this package mirrors.
FLASH_ATTN_INTERFACE_VERSION = "2.7.4"
SHIM_VERSION = f"{FLASH_ATTN_INTERFACE_VERSION}+flashattn.{_flashattn_version}"

_INTERFACE_NAMES = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
    "flash_attn_combine",
]
_BERT_PADDING_NAMES = ["pad_input", "unpad_input", "index_first_axis", "index_put_first_axis"]

# shim module -> (flashattn module providing it, names, is_package)
_MODULES: Dict[str, tuple] = {
    "flash_attn": ("flashattn.interface", _INTERFACE_NAMES, True),
    "flash_attn.flash_attn_interface": ("flashattn.interface", _INTERFACE_NAMES, False),
    "flash_attn.bert_padding": ("flashattn.bert_padding", _BERT_PADDING_NAMES, False),
    "flash_attn.layers": (None, [], True),
    "flash_attn.layers.rotary": ("flashattn.rotary", ["apply_rotary_emb"], False),
}


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


class _ShimFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the shim modules, built from flashattn's."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in _MODULES:
            return None
        is_package = _MODULES[fullname][2]
        spec = importlib.machinery.ModuleSpec(fullname, self, origin="flashattn.compat", is_package=is_package)
        if is_package:
            spec.submodule_search_locations = []
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: Any) -> None:
        source, names, _ = _MODULES[module.__name__]
        if source is not None:
            provider = importlib.import_module(source)
            for name in names:
                setattr(module, name, getattr(provider, name))
        module.__all__ = list(names)
        if module.__name__ == "flash_attn":
            module.__version__ = SHIM_VERSION
        module.__doc__ = f"flash_attn shim installed by flashattn.compat (from {source or 'flashattn'})."


class _ShimDistribution(importlib.metadata.Distribution):
    """Package metadata for the shim: name flash_attn, version SHIM_VERSION."""

    _FILES = {
        "METADATA": (f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {SHIM_VERSION}\n"
                     "Summary: flash_attn interface provided by flashattn (flashattn.compat)\n"),
        "top_level.txt": "flash_attn\n",
        "INSTALLER": "flashattn.compat\n",
    }

    def read_text(self, filename: str) -> Optional[str]:
        return self._FILES.get(filename)

    def locate_file(self, path: Any) -> Any:
        return None


class _ShimDistributionFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> None:
        return None  # finds distributions, not modules

    def find_distributions(self, context: Any = importlib.metadata.DistributionFinder.Context()) -> List[Any]:
        name = getattr(context, "name", None)
        if name is None or _normalize(name) == "flash_attn":
            return [_ShimDistribution()]
        return []


_module_finder: Optional[_ShimFinder] = None
_distribution_finder: Optional[_ShimDistributionFinder] = None


def _real_flash_attn_present() -> bool:
    existing = sys.modules.get("flash_attn")
    if existing is not None:
        spec = getattr(existing, "__spec__", None)
        return not (spec is not None and isinstance(spec.loader, _ShimFinder))
    try:
        return importlib.util.find_spec("flash_attn") is not None
    except (ImportError, ValueError):
        return False


def installed() -> bool:
    """Whether install() is in effect."""
    return _module_finder is not None


def install(override: bool = False) -> None:
    """Makes ``import flash_attn`` (and its submodules above) give flashattn's implementation.
    Refuses when a real flash_attn is installed or imported, unless override=True."""
    global _module_finder, _distribution_finder
    if _module_finder is not None:
        return
    if not override and _real_flash_attn_present():
        raise RuntimeError("flashattn.compat.install(): a real flash_attn package is installed or imported; "
                           "pass override=True to shadow it with flashattn's")
    for name in list(sys.modules):
        if name == "flash_attn" or name.startswith("flash_attn."):
            del sys.modules[name]  # only reached with override=True
    _module_finder = _ShimFinder()
    _distribution_finder = _ShimDistributionFinder()
    sys.meta_path.insert(0, _module_finder)
    sys.meta_path.append(_distribution_finder)
    importlib.invalidate_caches()


def uninstall() -> None:
    """Undoes install(): removes the import hook, the metadata and the shim modules."""
    global _module_finder, _distribution_finder
    for finder in (_module_finder, _distribution_finder):
        if finder is not None and finder in sys.meta_path:
            sys.meta_path.remove(finder)
    _module_finder = _distribution_finder = None
    for name in list(sys.modules):
        if name == "flash_attn" or name.startswith("flash_attn."):
            del sys.modules[name]
    importlib.invalidate_caches()
