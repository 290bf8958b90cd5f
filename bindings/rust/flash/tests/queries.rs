//! Version, build, algorithm and device queries.

use flash::{Algorithm, Device};

#[test]
fn version_matches_the_header_major() {
    let v = flash::version();
    assert_eq!(
        v.major,
        flash::HEADER_VERSION.major,
        "libflash {v:?} loaded, bindings built for {:?}",
        flash::HEADER_VERSION
    );
    assert!(v >= flash::Version { minor: 0, patch: 0, ..flash::HEADER_VERSION });
    assert_eq!(flash::version_string(), format!("{}.{}.{}", v.major, v.minor, v.patch));
    assert!(flash::build_info().starts_with("libflash "), "{}", flash::build_info());
}

#[test]
fn algorithms_round_trip_through_names() {
    for a in [Algorithm::AUTO, Algorithm::CPU, Algorithm::NAIVE, Algorithm::SM80, Algorithm::SM90] {
        let name = a.name().unwrap();
        assert_eq!(Algorithm::from_name(name), Some(a));
        assert_eq!(a.to_string(), name);
    }
    assert_eq!(Algorithm::from_raw(99).name(), None);
    assert_eq!(Algorithm::from_raw(99).to_string(), "algorithm(99)");
    assert_eq!(Algorithm::from_name("a\0b"), None);
}

#[test]
fn compiled_algorithms_include_the_cpu_ones() {
    let set = flash::compiled_algorithms();
    assert!(set.contains(Algorithm::CPU) && set.contains(Algorithm::NAIVE), "{set:?}");
    assert!(set.iter().all(|a| a.name().is_some()));
}

#[test]
fn cpu_device_info() {
    let info = flash::device_info(Device::Cpu).unwrap();
    assert_eq!(info.device, Device::Cpu);
    assert!(!info.name.is_empty());
    assert_eq!(info.compute_capability, (0, 0));
    assert!(info.multiprocessors >= 1);
    assert!(info.algorithms.contains(Algorithm::CPU));
}

#[test]
fn cuda_queries_never_fail_without_a_gpu() {
    let n = flash::cuda_device_count().unwrap();
    if n == 0 {
        let e = flash::device_info(Device::Cuda(0)).unwrap_err();
        eprintln!("device_info(cuda:0) without a device: {e}");
    } else {
        let info = flash::device_info(Device::Cuda(0)).unwrap();
        assert!(info.compute_capability.0 >= 1);
    }
}
