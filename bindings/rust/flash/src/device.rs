//! Version, build and capability queries.

use flash_sys as sys;

use crate::abi::LibSized;
use crate::error::{check, static_str, Result};
use crate::forward::Algorithm;
use crate::tensor::Device;

/// The version of the libflash loaded at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

/// The version of the loaded library (it may be newer than the header these bindings were built from,
/// [`HEADER_VERSION`], within the same major version).
///
/// ```
/// let v = flash::version();
/// assert_eq!(v.major, flash::HEADER_VERSION.major);
/// assert_eq!(flash::version_string(), format!("{}.{}.{}", v.major, v.minor, v.patch));
/// ```
pub fn version() -> Version {
    // Safety: pure queries.
    unsafe {
        Version {
            major: sys::flash_version_major(),
            minor: sys::flash_version_minor(),
            patch: sys::flash_version_patch(),
        }
    }
}

/// The version of `flash.h` these bindings were generated from.
pub const HEADER_VERSION: Version =
    Version { major: sys::FLASH_VERSION_MAJOR, minor: sys::FLASH_VERSION_MINOR, patch: sys::FLASH_VERSION_PATCH };

/// `"1.0.0"`.
pub fn version_string() -> &'static str {
    // Safety: static storage.
    unsafe { static_str(sys::flash_version_string()) }.unwrap_or("")
}

/// Compiler, CUDA version and GPU targets the library was built with.
pub fn build_info() -> &'static str {
    // Safety: static storage.
    unsafe { static_str(sys::flash_build_info()) }.unwrap_or("")
}

/// A set of algorithms (bit `1 << FLASH_ALGO_x`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AlgorithmSet(pub u32);

impl AlgorithmSet {
    pub fn contains(self, a: Algorithm) -> bool {
        (0..32).contains(&a.to_raw()) && self.0 & (1u32 << a.to_raw()) != 0
    }

    /// The algorithms in the set, in increasing value.
    pub fn iter(self) -> impl Iterator<Item = Algorithm> {
        (0..32).filter(move |i| self.0 & (1u32 << i) != 0).map(Algorithm::from_raw)
    }
}

/// Algorithms built into the loaded library, whatever the hardware.
pub fn compiled_algorithms() -> AlgorithmSet {
    // Safety: pure query.
    AlgorithmSet(unsafe { sys::flash_compiled_algorithms() })
}

/// Number of usable CUDA devices (0 without a driver or in a CPU-only build).
pub fn cuda_device_count() -> Result<usize> {
    let mut n = 0i32;
    // Safety: valid out pointer.
    check(unsafe { sys::flash_device_count(sys::FLASH_DEVICE_CUDA, &mut n) })?;
    Ok(n.max(0) as usize)
}

/// What the library knows about a device.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    pub device: Device,
    /// "NVIDIA H100 80GB HBM3", or the CPU's model name.
    pub name: String,
    /// Compute capability (major, minor); (0, 0) for the CPU.
    pub compute_capability: (i32, i32),
    /// SMs, or hardware threads on the CPU.
    pub multiprocessors: i32,
    pub clock_khz: i32,
    pub memory_clock_khz: i32,
    pub memory_bus_width_bits: i32,
    pub shared_mem_per_sm: i64,
    pub shared_mem_per_block_optin: i64,
    pub l2_cache_bytes: i64,
    pub total_memory_bytes: i64,
    /// Algorithms usable on this device.
    pub algorithms: AlgorithmSet,
}

/// Capabilities of `device`.
///
/// ```
/// let cpu = flash::device_info(flash::Device::Cpu)?;
/// assert!(cpu.multiprocessors >= 1);
/// assert!(cpu.algorithms.contains(flash::Algorithm::CPU));
/// # Ok::<(), flash::Error>(())
/// ```
pub fn device_info(device: Device) -> Result<DeviceInfo> {
    let mut buf = LibSized::<sys::flash_device_info>::zeroed();
    // Safety: a buffer as large as the library's flash_device_info (see abi.rs).
    check(unsafe { sys::flash_device_info_init_sized(buf.as_mut_ptr(), std::mem::size_of::<sys::flash_device_info>() as _) })?;
    let (device_type, device_id) = device.raw_type_and_id();
    check(unsafe { sys::flash_get_device_info(device_type, device_id, buf.as_mut_ptr()) })?;
    let info = buf.get();
    // The library NUL-terminates name; bound the read by the array anyway.
    let bytes: Vec<u8> = info.name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    Ok(DeviceInfo {
        device,
        name: String::from_utf8_lossy(&bytes).into_owned(),
        compute_capability: (info.cc_major, info.cc_minor),
        multiprocessors: info.multiprocessors,
        clock_khz: info.clock_khz,
        memory_clock_khz: info.memory_clock_khz,
        memory_bus_width_bits: info.memory_bus_width_bits,
        shared_mem_per_sm: info.shared_mem_per_sm,
        shared_mem_per_block_optin: info.shared_mem_per_block_optin,
        l2_cache_bytes: info.l2_cache_bytes,
        total_memory_bytes: info.total_memory_bytes,
        algorithms: AlgorithmSet(info.algorithms),
    })
}
