//! `Error`: a libflash status code, its name and the message that says exactly what was wrong.

use std::ffi::CStr;
use std::fmt;

use flash_sys as sys;

/// `Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A failed call: the library's status code (`FLASH_ERROR_*`), its name, and the message naming the
/// exact problem (`"k.shape[3] is 96 but q.shape[3] is 128"`).
///
/// Errors come from two places with the same codes: the library (the message is
/// `flash_last_error_message()`, read on the calling thread right after the call), and the checks this
/// crate makes before a call that the library cannot make itself, such as a slice being too short for
/// the shape and strides it is viewed with.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    code: i32,
    message: String,
}

/// The broad kind of an [`Error`], one per `FLASH_ERROR_*` code known to this crate.
///
/// New codes may appear in newer libraries; they map to [`ErrorKind::Other`] (the code itself is
/// always available from [`Error::code`]).
#[non_exhaustive]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    InvalidArgument,
    NullPointer,
    StructSize,
    BadShape,
    BadStride,
    DtypeMismatch,
    UnsupportedDtype,
    DeviceMismatch,
    UnsupportedHeadDim,
    BadMask,
    NoCudaDevice,
    AlgorithmUnavailable,
    Unsupported,
    OutOfMemory,
    WorkspaceTooSmall,
    Cuda,
    Cublas,
    Internal,
    /// A code this version of the crate does not know.
    Other,
}

impl Error {
    /// An error with a status code and a message of our own (checks made before calling the library).
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Self {
        Error { code, message: message.into() }
    }

    /// The error the library just reported on this thread for `code`.
    fn from_library(code: i32) -> Self {
        // Safety: flash_last_error_message() returns a NUL-terminated thread-local string (never NULL)
        // that stays valid until the next libflash call on this thread; it is copied at once.
        let message = unsafe {
            let p = sys::flash_last_error_message();
            if p.is_null() {
                String::new()
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        Error { code, message }
    }

    /// The status code (`flash_sys::FLASH_ERROR_*`).
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The status code's name, from `flash_status_string` (`"FLASH_ERROR_BAD_SHAPE"`;
    /// `"FLASH_ERROR_UNKNOWN_STATUS"` for a code the library does not know).
    pub fn name(&self) -> &'static str {
        status_name(self.code)
    }

    /// What exactly was wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The kind of error, for matching.
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind::*;
        match self.code {
            sys::FLASH_ERROR_INVALID_ARGUMENT => InvalidArgument,
            sys::FLASH_ERROR_NULL_POINTER => NullPointer,
            sys::FLASH_ERROR_STRUCT_SIZE => StructSize,
            sys::FLASH_ERROR_BAD_SHAPE => BadShape,
            sys::FLASH_ERROR_BAD_STRIDE => BadStride,
            sys::FLASH_ERROR_DTYPE_MISMATCH => DtypeMismatch,
            sys::FLASH_ERROR_UNSUPPORTED_DTYPE => UnsupportedDtype,
            sys::FLASH_ERROR_DEVICE_MISMATCH => DeviceMismatch,
            sys::FLASH_ERROR_UNSUPPORTED_HEAD_DIM => UnsupportedHeadDim,
            sys::FLASH_ERROR_BAD_MASK => BadMask,
            sys::FLASH_ERROR_NO_CUDA_DEVICE => NoCudaDevice,
            sys::FLASH_ERROR_ALGORITHM_UNAVAILABLE => AlgorithmUnavailable,
            sys::FLASH_ERROR_UNSUPPORTED => Unsupported,
            sys::FLASH_ERROR_OUT_OF_MEMORY => OutOfMemory,
            sys::FLASH_ERROR_WORKSPACE_TOO_SMALL => WorkspaceTooSmall,
            sys::FLASH_ERROR_CUDA => Cuda,
            sys::FLASH_ERROR_CUBLAS => Cublas,
            sys::FLASH_ERROR_INTERNAL => Internal,
            _ => Other,
        }
    }
}

/// The name of a status code, from the library (`flash_status_string`).
pub fn status_name(code: i32) -> &'static str {
    // Safety: flash_status_string returns a pointer to a static NUL-terminated string for every input.
    unsafe { static_str(sys::flash_status_string(code)) }.unwrap_or("FLASH_ERROR_UNKNOWN_STATUS")
}

/// Turns a static C string from the library into a `&'static str`.
///
/// Safety: `p` is NULL or points to a NUL-terminated string in static storage.
pub(crate) unsafe fn static_str(p: *const std::os::raw::c_char) -> Option<&'static str> {
    if p.is_null() {
        None
    } else {
        CStr::from_ptr(p).to_str().ok()
    }
}

/// The one place a libflash status becomes a `Result`: `FLASH_OK` is `Ok(())`, anything else an
/// [`Error`] carrying the code and this thread's last-error message. Call it directly after the call
/// that returned `status`, on the same thread.
pub(crate) fn check(status: i32) -> Result<()> {
    if status == sys::FLASH_OK {
        Ok(())
    } else {
        Err(Error::from_library(status))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("code", &self.code)
            .field("name", &self.name())
            .field("message", &self.message)
            .finish()
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_is_ok_and_codes_map_to_kinds() {
        assert!(check(sys::FLASH_OK).is_ok());
        let e = Error::new(sys::FLASH_ERROR_BAD_MASK, "window_left is -2");
        assert_eq!(e.kind(), ErrorKind::BadMask);
        assert_eq!(e.name(), "FLASH_ERROR_BAD_MASK");
        assert_eq!(e.to_string(), "FLASH_ERROR_BAD_MASK (150): window_left is -2");
    }

    #[test]
    fn unknown_codes_stay_representable() {
        let e = Error::new(4242, "from the future");
        assert_eq!(e.kind(), ErrorKind::Other);
        assert_eq!(e.code(), 4242);
        assert_eq!(e.name(), "FLASH_ERROR_UNKNOWN_STATUS");
    }

    #[test]
    fn check_reads_the_library_message() {
        // A null args pointer is the simplest real failure.
        let status = unsafe { sys::flash_fwd(std::ptr::null_mut()) };
        let e = check(status).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NullPointer);
        assert_eq!(e.message(), "args is NULL");
    }
}
