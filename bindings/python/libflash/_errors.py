"""FlashError: a failed libflash call, with the status code, its name and the library's message."""

import ctypes
import math
import operator

from . import _capi


class FlashError(RuntimeError):
    """A libflash call failed.

    Attributes:
        status: the int32 FLASH_ERROR_* code (e.g. 110).
        status_name: its name (e.g. "FLASH_ERROR_BAD_SHAPE").
        message: the library's message naming the exact problem (or the binding's, for checks it makes
            before calling the library; those use the same codes).
    """

    def __init__(self, status, status_name, message):
        super().__init__(status, status_name, message)
        self.status = int(status)
        self.status_name = status_name
        self.message = message

    def __str__(self):
        return "%s (%d): %s" % (self.status_name, self.status, self.message)

    def __reduce__(self):
        return (FlashError, (self.status, self.status_name, self.message))


def status_name(status):
    return _capi.flash_status_string(int(status)).decode()


def error(status, message):
    """A FlashError raised by the binding itself, with the library's name for the code."""
    return FlashError(status, status_name(status), message)


def check(status):
    """Raises FlashError for a non-zero status, with this thread's last-error message."""
    if status != _capi.FLASH_OK:
        raw = _capi.flash_last_error_message()
        raise FlashError(status, status_name(status), raw.decode("utf-8", "replace") if raw else "")
    return status


_INT_RANGES = {32: (-2 ** 31, 2 ** 31 - 1), 64: (-2 ** 63, 2 ** 63 - 1)}


def c_int(value, name, status, bits=32):
    """value as a Python int for a C int<bits>_t field, or FlashError(status) naming the field: ctypes keeps
    only the low bits of an int that does not fit (window=(2**40, 0) ran as (0, 0), 2**32 + 3 as 3). Integral
    floats (256.0) are taken; other floats are refused rather than truncated."""
    try:
        v = operator.index(value)
    except TypeError:
        try:
            f = float(value)
        except (TypeError, ValueError):
            raise error(status, "%s is %r, not an integer" % (name, value)) from None
        if not f.is_integer():
            raise error(status, "%s is %r, not an integer" % (name, value))
        v = int(f)
    lo, hi = _INT_RANGES[bits]
    if not lo <= v <= hi:
        raise error(status, "%s is %d, which does not fit the C field's int%d_t range [%d, %d]" % (name, v, bits, lo, hi))
    return v


def c_float(value, name, status):
    """value as a float the C float field holds without change of meaning, or FlashError(status): ctypes turns a
    float beyond float32's range into inf and a tiny one into 0.0 (softmax_scale 0 means the default)."""
    v = float(value)
    f = ctypes.c_float(v).value
    if math.isfinite(v) and not math.isfinite(f):
        raise error(status, "%s is %r, beyond float32's range" % (name, value))
    if v != 0.0 and f == 0.0:
        raise error(status, "%s is %r, which rounds to 0 in float32" % (name, value))
    return v
