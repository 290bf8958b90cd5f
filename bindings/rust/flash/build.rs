//! Gives this crate's tests, doctests and examples an rpath to the libflash that flash-sys found
//! (`DEP_FLASH_LIB_DIR`, from flash-sys's `links = "flash"` metadata), so they run without
//! LD_LIBRARY_PATH. Link arguments do not propagate to dependents, so a binary crate using `flash`
//! with a libflash outside the loader's default paths does the same in its own build.rs, sets
//! LD_LIBRARY_PATH, or installs libflash where the loader looks. `LIBFLASH_NO_RPATH` turns it off.
use std::env;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBFLASH_NO_RPATH");
    let unix = env::var("CARGO_CFG_TARGET_FAMILY").map(|f| f == "unix").unwrap_or(false);
    if !unix || env::var_os("LIBFLASH_NO_RPATH").is_some() {
        return;
    }
    if let Ok(dirs) = env::var("DEP_FLASH_LIB_DIR") {
        for dir in dirs.split(':').filter(|d| !d.is_empty()) {
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        }
    }
}
