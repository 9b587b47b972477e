"""Exceptions raised by fa4. Each carries ``.argument``: the offending argument's name (or None)."""


class Fa4Error(Exception):
    """Base class of every fa4 error. ``argument`` names the offending argument (or is None)."""

    argument = None


class InvalidArgumentError(Fa4Error, ValueError):
    """An argument breaks a rule of the contract (shape, stride, value, ...)."""


class DTypeError(Fa4Error, TypeError):
    """An argument has the wrong dtype, or is not an array/tensor at all."""


class UnsupportedError(Fa4Error, ValueError):
    """Valid, but the chosen backend cannot do it (e.g. float32 on the sm90 path)."""


class BackendUnavailableError(Fa4Error, RuntimeError):
    """The backend is not in this build or not on this machine (e.g. cuda without a GPU)."""


class DeviceError(Fa4Error, RuntimeError):
    """A CUDA runtime / driver call failed."""


class OutOfMemoryError(Fa4Error, MemoryError):
    """An allocation failed."""


class InternalError(Fa4Error, RuntimeError):
    """A bug in fa4."""


# Order known to the extension (fa4_ext.cpp: kErr*).
_ALL = (InvalidArgumentError, DTypeError, UnsupportedError, BackendUnavailableError, DeviceError,
        OutOfMemoryError, InternalError)


def _error(cls, argument, message):
    e = cls(message)
    e.argument = argument
    return e
