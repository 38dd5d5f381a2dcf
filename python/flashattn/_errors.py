"""Exceptions raised for the C++ layer's errors, with the library's message unchanged.

The C++ API returns a Status (code, argument, message); the extension hands it over as a tuple and
``raise_for_status`` raises:

* ``ArgumentError`` (a ``ValueError``) for a call that breaks a rule of the API,
* ``ArgumentTypeError`` (also a ``TypeError``) when an argument is not of a type it accepts (a list
  or None where an array is needed, a float where an int is),
* ``DTypeError`` (an ``ArgumentTypeError``) when the rule broken is about a dtype,
* ``UnsupportedError`` (``ValueError`` and ``NotImplementedError``) for a valid call the chosen
  backend cannot run (e.g. float32 on the CUDA kernels, a paged KV cache in the varlen functions),
* ``CudaError`` / ``InternalError`` for CUDA runtime failures and internal errors.

Every one is also a ``RuntimeError`` (through ``FlashAttnError``), the class flash_attn raises for
bad input, so code written against flash_attn's ``except RuntimeError`` keeps working. Each carries
``.argument`` (the offending argument's name, "" when none applies) and ``.code``.
"""
from __future__ import annotations

from typing import Optional, Tuple


class FlashAttnError(RuntimeError):
    """Base of every error flashattn raises for a call it refuses or cannot run."""

    def __init__(self, message: str, argument: str = "", code: str = "") -> None:
        super().__init__(message)
        self.argument = argument
        self.code = code


class ArgumentError(FlashAttnError, ValueError):
    """The call breaks a rule of the API (shape, range, layout, ...)."""


class ArgumentTypeError(ArgumentError, TypeError):
    """The call passes an argument of a type it does not accept (e.g. a list for a tensor)."""


class DTypeError(ArgumentTypeError):
    """The call passes a tensor of a dtype the argument does not accept."""


class UnsupportedError(FlashAttnError, ValueError, NotImplementedError):
    """Valid, but the chosen backend cannot run it; the message says why."""


class CudaError(FlashAttnError):
    """A CUDA runtime call failed."""


class InternalError(FlashAttnError):
    """A bug in the library (an exception escaped a backend)."""


StatusTuple = Optional[Tuple[str, str, str]]


def error_from_status(status: Tuple[str, str, str]) -> FlashAttnError:
    code, argument, message = status
    if code == "invalid_argument":
        # Every dtype rule of the library words its message "dtype must ..." (src/api/rules.cpp).
        if "dtype must" in message:
            return DTypeError(message, argument, code)
        return ArgumentError(message, argument, code)
    if code == "unsupported":
        return UnsupportedError(message, argument, code)
    if code == "cuda_error":
        return CudaError(message, argument, code)
    return InternalError(message, argument, code)


def raise_for_status(status: StatusTuple) -> None:
    """Raises the exception for a status tuple from flashattn._ext; returns for None (ok)."""
    if status is not None:
        raise error_from_status(status)
