"""Checks of the Python-level arguments of the public functions, before anything reaches the
extension: the C++ library validates shapes, dtypes, strides and values of the arrays it is given,
but a None, a list, a float where an int is expected or an int that does not fit the C API would
otherwise surface as an AttributeError, a ZeroDivisionError or nanobind's "incompatible function
arguments" dump. Every check raises the package's errors with the library's wording:
``argument 'NAME': RULE, got VALUE``."""
from __future__ import annotations

import operator
import sys
from typing import Any, Optional, Sequence, Tuple

from ._errors import ArgumentError, ArgumentTypeError, DTypeError

INT32_MAX = 2**31 - 1
UINT64_MAX = 2**64 - 1


def _describe(value: Any) -> str:
    """How a value is named in a message: its type for containers and objects, itself for scalars."""
    if value is None or isinstance(value, (bool, int, float, str)):
        text = repr(value)
        return text if len(text) <= 40 else text[:37] + "..."
    kind = array_kind(value)
    if kind is not None:
        return f"a {type(value).__module__.split('.')[0]}.{type(value).__name__} of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def type_error(name: str, rule: str, value: Any) -> ArgumentTypeError:
    return ArgumentTypeError(f"argument '{name}': {rule}, got {_describe(value)}", name, "invalid_argument")


def value_error(name: str, rule: str, got: str) -> ArgumentError:
    return ArgumentError(f"argument '{name}': {rule}, got {got}", name, "invalid_argument")


def array_kind(x: Any) -> Optional[str]:
    """'torch' for a torch.Tensor, 'numpy' for a numpy.ndarray, None for anything else. Looks the
    modules up in sys.modules: neither is imported here (whoever made the array imported it)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        return "torch"
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(x, numpy.ndarray):
        return "numpy"
    return None


def tensor(x: Any, name: str, like: Optional[str] = None, *, optional: bool = False) -> Any:
    """x must be a torch.Tensor or a numpy.ndarray (None when optional); with like ('torch' or
    'numpy', the kind of q), of that kind: the two are never mixed in one call."""
    if x is None and optional:
        return None
    kind = array_kind(x)
    if kind is None:
        wanted = {"torch": "a torch.Tensor", "numpy": "a numpy.ndarray"}.get(like or "", "a torch.Tensor or numpy.ndarray")
        raise type_error(name, f"must be {wanted}" + (" or None" if optional else ""), x)
    if like is not None and kind != like:
        raise type_error(name, f"must be a {'torch.Tensor' if like == 'torch' else 'numpy.ndarray'} like 'q' "
                         "(torch tensors and numpy arrays are not mixed in one call)", x)
    if kind == "numpy" and (x.dtype.kind not in "biufc" or not x.dtype.isnative):
        # Arrays DLPack cannot carry (objects, strings, another byte order) never reach the library.
        raise DTypeError(f"argument '{name}': dtype must be numeric in native byte order (e.g. float32, "
                         f"float16, int32), got {x.dtype.str if not x.dtype.isnative else x.dtype}", name,
                         "invalid_argument")
    return x


def first_tensor(x: Any, name: str) -> str:
    """The kind ('torch' or 'numpy') of the argument that decides the call's path (q, qkv, ...)."""
    tensor(x, name)
    return array_kind(x)  # type: ignore[return-value]


def ndim(x: Any, name: str, expected: int, layout: str) -> None:
    if x.ndim != expected:
        raise value_error(name, f"ndim must be {expected} {layout}", f"{x.ndim} (shape {list(x.shape)})")


def head_dim(x: Any, name: str) -> int:
    """The last dim, which must be >= 1 (a zero head_dim has no softmax scale 1/sqrt(head_dim))."""
    size = int(x.shape[-1])
    if size < 1:
        raise value_error(name, "head_dim (the last dim) must be >= 1", str(size))
    return size


def dim(x: Any, name: str, axis: int, expected: int, meaning: str) -> None:
    if x.shape[axis] != expected:
        raise value_error(name, f"dim {axis % x.ndim} must equal {meaning} ({expected})",
                          f"{x.shape[axis]} (shape {list(x.shape)})")


def integer(x: Any, name: str, lo: int = -INT32_MAX - 1, hi: int = INT32_MAX, rule: str = "") -> int:
    """An int (Python, numpy, or a one-element integer tensor) in [lo, hi]; bools and floats are
    refused, as flash_attn's C++ signatures refuse them."""
    if isinstance(x, bool) or x is None:
        raise type_error(name, "must be an int", x)
    try:
        value = operator.index(x)
    except TypeError:
        raise type_error(name, "must be an int", x) from None
    if not lo <= value <= hi:
        raise value_error(name, rule or f"must be in [{lo}, {hi}]", str(value))
    return value


def optional_integer(x: Any, name: str, lo: int = -INT32_MAX - 1, hi: int = INT32_MAX, rule: str = "",
                     default: int = 0) -> int:
    return default if x is None else integer(x, name, lo, hi, rule)


def real(x: Any, name: str) -> float:
    """A real number (int, float, numpy scalar, one-element tensor). Its range is the library's to
    check (it names the rule), so NaN and infinities pass here."""
    if x is None or isinstance(x, (str, bytes)):
        raise type_error(name, "must be a float", x)
    try:
        return float(x)
    except (TypeError, ValueError):
        raise type_error(name, "must be a float", x) from None


def optional_real(x: Any, name: str) -> Optional[float]:
    return None if x is None else real(x, name)


def flag(x: Any, name: str) -> bool:
    """A bool (or anything with a truth value but None, which is more likely a mistake)."""
    if x is None:
        raise type_error(name, "must be a bool", x)
    try:
        return bool(x)
    except (TypeError, ValueError):
        raise type_error(name, "must be a bool", x) from None


def window(window_size: Any, name: str = "window_size") -> Tuple[int, int]:
    """(left, right): each -1 (unbounded on that side) or a number of tokens >= 0 that fits an int32."""
    if isinstance(window_size, (str, bytes)) or not isinstance(window_size, Sequence):
        if array_kind(window_size) is None or getattr(window_size, "ndim", 0) != 1:
            raise type_error(name, "must be a pair (left, right) of ints, -1 = unbounded", window_size)
    if len(window_size) != 2:
        raise value_error(name, "must be a pair (left, right) of ints, -1 = unbounded",
                          f"{len(window_size)} values")
    sides = []
    for side, value in zip(("left", "right"), window_size):
        if isinstance(value, bool) or value is None:
            raise type_error(name, f"{side} must be an int, -1 = unbounded", value)
        try:
            value = operator.index(value)
        except TypeError:
            raise type_error(name, f"{side} must be an int, -1 = unbounded", value) from None
        if not -1 <= value <= INT32_MAX:
            raise value_error(name, f"{side} must be -1 (unbounded) or in [0, {INT32_MAX}]", str(value))
        sides.append(value)
    return sides[0], sides[1]


def none(x: Any, name: str, why: str) -> None:
    """Refuses an argument that is given although the call cannot use it (why says what it needs)."""
    if x is not None:
        raise value_error(name, why, _describe(x))


def last_dim_contiguous(x: Any) -> Any:
    """x, or a copy whose last dim is contiguous, as flash_attn does for its inputs (the kernels read
    rows of head_dim elements). Autograd flows through torch's .contiguous()."""
    if x is None or x.ndim == 0 or x.shape[-1] <= 1:
        return x
    if array_kind(x) == "torch":
        return x if x.stride(-1) == 1 else x.contiguous()
    import numpy as np

    return x if x.strides[-1] == x.itemsize else np.ascontiguousarray(x)
