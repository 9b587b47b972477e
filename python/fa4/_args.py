"""The one checker for fa4's Python scalar arguments (DESIGN.md §1: Python scalars are type-checked).

Every public function (fa4.attention*, fa4.combine, the flash_attn_compat wrappers) passes each
scalar argument through one of these before anything else happens, so a wrong type or an
out-of-range value is a TypeError / ValueError subclass naming the argument -- never a
``std::bad_cast`` from the extension, a numpy OverflowError, or a silent reinterpretation
(``causal='no'`` being truthy, ``num_splits=1.5`` being truncated, a huge ``scale`` turning into
float32 inf). The rules:

- an int is a Python int or a NumPy integer; bool is *not* an int (``num_splits=True`` is an
  error), nor is a float (``chunk=2.0``) or a str;
- a bool is a Python bool or a NumPy bool (``causal=1`` and ``causal='no'`` are errors);
- a real is an int, float or NumPy integer/floating (not bool, complex, str or None), and must be
  representable as a float32 (the library's type for scale and softcap);
- ints are range-checked against the C field they end up in (int32 / int64) or a tighter bound.

Type errors are DTypeError (a TypeError), range errors InvalidArgumentError (a ValueError); both
carry ``.argument``.
"""

import operator

import numpy as _np

from ._errors import DTypeError, InvalidArgumentError, _error

INT32 = (-(2 ** 31), 2 ** 31 - 1)
INT64 = (-(2 ** 63), 2 ** 63 - 1)
_FLT_MAX = float(_np.finfo(_np.float32).max)
_F32_ZERO_BELOW = 2.0 ** -150  # the largest double that float32() rounds to 0
_BOOLS = (bool, _np.bool_)


def _what(x):
    r = repr(x)
    return f"{type(x).__name__} {r if len(r) <= 40 else r[:37] + '...'}"


def as_int(x, name, lo=INT64[0], hi=INT64[1]):
    """x as a Python int in [lo, hi]; TypeError for anything that is not an integer (bool included)."""
    if type(x) is not int:  # the common case costs one type() check
        if isinstance(x, _BOOLS) or not isinstance(x, (int, _np.integer)):
            raise _error(DTypeError, name, f"{name}: expected an int, got {_what(x)}")
        x = operator.index(x)
    if x < lo or x > hi:
        raise _error(InvalidArgumentError, name, f"{name}: {x} is out of range [{lo}, {hi}]")
    return x


def as_bool(x, name):
    """x as a Python bool; only bool / numpy.bool_ are accepted (a str or an int is an error)."""
    if x is True or x is False:
        return x
    if isinstance(x, _np.bool_):
        return bool(x)
    raise _error(DTypeError, name, f"{name}: expected a bool, got {_what(x)}")


def as_real(x, name, positive=False):
    """x as a Python float that fits a float32: finite, >= 0 (> 0 and not underflowing to 0 when
    `positive`, as for scale, where the library would read 0 as 'default')."""
    t = type(x)
    if t is not float:
        if isinstance(x, _BOOLS) or not isinstance(x, (int, float, _np.integer, _np.floating)):
            raise _error(DTypeError, name, f"{name}: expected a real number, got {_what(x)}")
        try:
            x = float(x)
        except OverflowError:  # an int beyond the double range
            raise _error(InvalidArgumentError, name, f"{name}: {_what(x)} is out of range") from None
    # Plain comparisons only (no math.isfinite, no numpy): torch.compile traces this function
    # inside fa4.attention & co. (fullgraph), and dynamo does not trace math.isfinite ("torch.*
    # op returned non-Tensor", torch >= 2.11). NaN fails every comparison, so `not (abs(x) <=
    # max)` refuses NaN and +-inf as well as the finite values beyond float32.
    if not (abs(x) <= _FLT_MAX):
        raise _error(InvalidArgumentError, name, f"{name}: must be finite (and fit a float32), got {x!r}")
    if positive:
        # float32(x) rounds to 0 exactly when x <= 2^-150 (half the smallest subnormal, the tie
        # going to the even 0)
        if not (x > _F32_ZERO_BELOW):
            raise _error(InvalidArgumentError, name, f"{name}: must be > 0 (and not underflow a float32), got {x!r}")
    elif x < 0:
        raise _error(InvalidArgumentError, name, f"{name}: must be >= 0, got {x!r}")
    return x


def as_window(w, name="window"):
    """(left, right): a tuple or list of two ints (-1 = unbounded); bounds beyond that are the
    library's (it names window_left / window_right)."""
    if not isinstance(w, (tuple, list)) or len(w) != 2:
        raise _error(InvalidArgumentError, name,
                     f"{name}: expected a pair (left, right) of ints (-1 = unbounded), got {_what(w)}")
    return as_int(w[0], name), as_int(w[1], name)


def as_scale(x, name="scale"):
    """None (1/sqrt(Dqk), kept as None; it crosses to the extension as 0.0) or a real > 0."""
    return None if x is None else as_real(x, name, positive=True)


def as_num_threads(x, name="num_threads"):
    """0 = all cores, n > 0 = at most n threads. The extension also caps n at the machine's
    hardware concurrency (std::thread::hardware_concurrency), so a huge n cannot exhaust threads."""
    return as_int(x, name, 0, INT32[1])


def as_num_splits(x, name="num_splits"):
    """0 = heuristic, 1 = off, n = force n (negative values are the library's error to name)."""
    return as_int(x, name, *INT32)


def as_seqlen_hint(x, name):
    """max_seqlen_q / max_seqlen_k: hints, 0 = unknown."""
    return as_int(x, name, 0, INT64[1])


def as_cache_seqlens_int(x, name="cache_seqlens"):
    """An int cache_seqlens (every sequence has this length): it becomes an int32 tensor."""
    return as_int(x, name, 0, INT32[1])
