"""flashattn: exact FlashAttention (CPU backend; FA2/FA3 CUDA backends) with the flash_attn interface.

    from flashattn import flash_attn_func
    out = flash_attn_func(q, k, v, causal=True)   # torch tensors (autograd) or numpy arrays

Importing the package imports neither torch nor numpy; each is used when you pass its arrays.
``flashattn.compat.install()`` makes ``import flash_attn`` resolve to this package.
"""
from __future__ import annotations

from typing import Any, Dict

__version__ = "0.1.0"

from . import _args, _ext  # noqa: E402
from ._errors import (  # noqa: E402
    ArgumentError,
    ArgumentTypeError,
    CudaError,
    DTypeError,
    FlashAttnError,
    InternalError,
    UnsupportedError,
    raise_for_status,
)
from .fp8 import incoherent_qk, incoherent_rotation, quantize_fp8  # noqa: E402
from .interface import (  # noqa: E402
    flash_attn_combine,
    flash_attn_func,
    flash_attn_kvpacked_func,
    flash_attn_qkvpacked_func,
    flash_attn_varlen_func,
    flash_attn_varlen_kvpacked_func,
    flash_attn_varlen_qkvpacked_func,
    flash_attn_with_kvcache,
)


def device_info(device: int = 0) -> Dict[str, Any]:
    """What the library sees: cuda_built, device_count, and for a visible device its name, sm,
    multiprocessors and memory sizes."""
    return _ext.device_info(_args.integer(device, "device", 0))


def library_version() -> str:
    """The C++ library's version string."""
    return _ext.version()


def set_cpu_threads(threads: int) -> None:
    """Threads of the CPU backend's later calls (0 = all hardware threads; at most
    max(64, 4 x the hardware threads), else ArgumentError)."""
    # The range is the library's rule (it knows the bound); here only that threads is an int32.
    raise_for_status(_ext.set_cpu_threads(_args.integer(threads, "threads")))


def cpu_threads() -> int:
    """Threads the CPU backend runs on."""
    return _ext.cpu_threads()


__all__ = [
    "flash_attn_func", "flash_attn_qkvpacked_func", "flash_attn_kvpacked_func", "flash_attn_varlen_func",
    "flash_attn_varlen_qkvpacked_func", "flash_attn_varlen_kvpacked_func", "flash_attn_with_kvcache",
    "flash_attn_combine", "FlashAttnError", "ArgumentError", "ArgumentTypeError", "DTypeError", "UnsupportedError",
    "CudaError", "InternalError", "device_info", "library_version", "set_cpu_threads", "cpu_threads", "quantize_fp8",
    "incoherent_qk", "incoherent_rotation", "__version__",
]
