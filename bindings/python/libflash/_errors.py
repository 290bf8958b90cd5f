"""FlashError: a failed libflash call, with the status code, its name and the library's message."""

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
