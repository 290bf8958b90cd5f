//! Argument structs sized for the linked library, whichever is larger: its struct or ours.
//!
//! libflash's `flash_*_init` functions (and `flash_get_device_info`) write `sizeof` of the struct *as the
//! library was compiled*. A newer library (a minor version that appended fields) would write past the
//! end of a struct laid out from an older `flash.h`. So every argument struct this crate hands to the
//! library lives in a zeroed, 8-aligned buffer of `max(flash_struct_size(which), size_of::<T>())` bytes:
//! the library initialises all of it (its defaults for fields this crate does not know), and this
//! crate reads and writes the prefix it knows through `&mut T`.

use std::fmt;
use std::marker::PhantomData;
use std::mem::{align_of, size_of};

use flash_sys as sys;

/// Marker for the plain C structs of flash.h: every field is an integer, a float or a pointer, so all
/// zero bytes is a valid value, and their alignment is at most 8.
///
/// # Safety
///
/// Implement only for such structs.
pub(crate) unsafe trait PlainC: Sized {
    const WHICH: i32;
}
unsafe impl PlainC for sys::flash_fwd_args {
    const WHICH: i32 = sys::FLASH_STRUCT_FWD_ARGS;
}
unsafe impl PlainC for sys::flash_block_mask {
    const WHICH: i32 = sys::FLASH_STRUCT_BLOCK_MASK;
}
unsafe impl PlainC for sys::flash_device_info {
    const WHICH: i32 = sys::FLASH_STRUCT_DEVICE_INFO;
}
unsafe impl PlainC for sys::flash_bwd_args {
    const WHICH: i32 = sys::FLASH_STRUCT_BWD_ARGS;
}
unsafe impl PlainC for sys::flash_kvcache_args {
    const WHICH: i32 = sys::FLASH_STRUCT_KVCACHE_ARGS;
}
unsafe impl PlainC for sys::flash_combine_args {
    const WHICH: i32 = sys::FLASH_STRUCT_COMBINE_ARGS;
}

pub(crate) struct LibSized<T: PlainC> {
    buf: Vec<u64>,
    _t: PhantomData<T>,
}

impl<T: PlainC> LibSized<T> {
    /// All zero, large enough for the library's struct and ours.
    pub(crate) fn zeroed() -> Self {
        assert!(align_of::<T>() <= align_of::<u64>());
        // Safety: a pure query.
        let lib = unsafe { sys::flash_struct_size(T::WHICH) };
        let bytes = lib.max(size_of::<T>());
        LibSized { buf: vec![0u64; (bytes + 7) / 8], _t: PhantomData }
    }

    /// The whole buffer, for the library.
    pub(crate) fn as_mut_ptr(&mut self) -> *mut T {
        self.buf.as_mut_ptr() as *mut T
    }
    pub(crate) fn as_ptr(&self) -> *const T {
        self.buf.as_ptr() as *const T
    }

    pub(crate) fn get(&self) -> &T {
        // Safety: the buffer holds at least size_of::<T>() bytes, is 8-aligned (>= align_of::<T>()), and
        // any bytes are a valid T (PlainC); the borrow of self keeps it alive and unaliased.
        unsafe { &*self.as_ptr() }
    }
    pub(crate) fn get_mut(&mut self) -> &mut T {
        // Safety: as in get.
        unsafe { &mut *self.as_mut_ptr() }
    }
}

impl<T: PlainC + fmt::Debug> fmt::Debug for LibSized<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.get().fmt(f)
    }
}

// Safety: the buffer is plain data owned by this value; pointers inside it are only addresses.
unsafe impl<T: PlainC> Send for LibSized<T> {}
unsafe impl<T: PlainC> Sync for LibSized<T> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_hold_both_the_library_struct_and_ours() {
        let mut a = LibSized::<sys::flash_fwd_args>::zeroed();
        let lib = unsafe { sys::flash_struct_size(sys::FLASH_STRUCT_FWD_ARGS) };
        assert!(a.buf.len() * 8 >= lib.max(size_of::<sys::flash_fwd_args>()));
        assert_eq!(unsafe { sys::flash_fwd_args_init_sized(a.as_mut_ptr(), std::mem::size_of::<sys::flash_fwd_args>() as _) }, sys::FLASH_OK);
        assert_eq!(a.get().struct_size, lib);
        assert_eq!(a.get().window_left, -1);
        let mut b = LibSized::<sys::flash_bwd_args>::zeroed();
        let lib = unsafe { sys::flash_struct_size(sys::FLASH_STRUCT_BWD_ARGS) };
        assert!(b.buf.len() * 8 >= lib.max(size_of::<sys::flash_bwd_args>()));
        let ours = size_of::<sys::flash_bwd_args>();
        assert_eq!(unsafe { sys::flash_bwd_args_init_sized(b.as_mut_ptr(), ours as _) }, sys::FLASH_OK);
        assert_eq!(b.get().struct_size, ours);
        assert_eq!((b.get().window_left, b.get().window_right, b.get().flags), (-1, -1, 0));
    }
}
