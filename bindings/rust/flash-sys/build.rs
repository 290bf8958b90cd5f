//! Finds libflash and its header, then generates the raw bindings with bindgen.
//!
//! Library search, first hit wins:
//!   1. `LIBFLASH_DIR`: a directory holding `libflash.so` (a CMake build directory) or an install prefix
//!      (`lib/`, `lib64/` or `lib/<multiarch>/` holding `libflash.so`, `include/flash.h`). A directory that
//!      holds only `flash.h` names the header and the search for the library goes on.
//!   2. pkg-config (`flash.pc`, installed by the project's `cmake --install`).
//!   3. The standard library directories.
//!
//! Header search, first hit wins: `LIBFLASH_INCLUDE_DIR`, next to the library found (the same directory,
//! `../include`, or the source tree of a CMake build directory), pkg-config's include paths, this
//! repository's own `flash.h` (`../../../flash.h` from this crate), then `/usr/local/include` and `/usr/include`.
//!
//! Test binaries, examples and binaries of this crate get an rpath to the library's directory (unless it
//! is a standard one, or `LIBFLASH_NO_RPATH` is set); the directory is also exported to dependent crates'
//! build scripts as `DEP_FLASH_LIB_DIR` (Cargo's `links` metadata) so they can do the same.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};

/// The file the linker needs for `-lflash` (the unversioned development symlink).
fn lib_file_name() -> &'static str {
    match env::var("CARGO_CFG_TARGET_OS").as_deref() {
        Ok("macos") | Ok("ios") => "libflash.dylib",
        Ok("windows") => "flash.lib",
        _ => "libflash.so",
    }
}

/// Debian-style multiarch directory name for the target ("x86_64-linux-gnu").
fn multiarch() -> Option<String> {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").ok()?;
    if env::var("CARGO_CFG_TARGET_OS").ok()? != "linux" {
        return None;
    }
    let arch = match arch.as_str() {
        "x86" => "i386".to_string(),
        "arm" => "arm".to_string(),
        a => a.to_string(),
    };
    let abi = if arch == "arm" { "gnueabihf" } else { "gnu" };
    Some(format!("{arch}-linux-{abi}"))
}

fn system_lib_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/lib"), PathBuf::from("/usr/local/lib64")];
    if let Some(m) = multiarch() {
        dirs.push(PathBuf::from("/usr/local/lib").join(&m));
        dirs.push(PathBuf::from("/usr/lib").join(&m));
        dirs.push(PathBuf::from("/lib").join(&m));
    }
    dirs.extend(["/usr/lib64", "/usr/lib", "/lib64", "/lib"].iter().map(PathBuf::from));
    dirs
}

/// Directories the dynamic loader searches anyway: no rpath is needed (or wanted) for them.
fn is_default_loader_dir(dir: &Path) -> bool {
    let mut default: Vec<PathBuf> = ["/usr/lib64", "/usr/lib", "/lib64", "/lib"].iter().map(PathBuf::from).collect();
    if let Some(m) = multiarch() {
        default.push(PathBuf::from("/usr/lib").join(&m));
        default.push(PathBuf::from("/lib").join(&m));
    }
    default.iter().any(|d| d == dir)
}

/// The library's directories, and the headers suggested by where it was found.
struct Found {
    /// Directories to pass to the linker (empty when pkg-config already printed the link lines).
    link_dirs: Vec<PathBuf>,
    /// Directories the library lives in (for the rpath and DEP_FLASH_LIB_DIR).
    lib_dirs: Vec<PathBuf>,
    /// Where to look for flash.h, best first.
    header_dirs: Vec<PathBuf>,
    how: String,
}

/// Header directories that go with a library directory: itself, ../include, and, for a CMake build
/// directory, the source tree it was configured from.
fn header_dirs_near(lib_dir: &Path) -> Vec<PathBuf> {
    let mut dirs = vec![lib_dir.to_path_buf()];
    if let Some(parent) = lib_dir.parent() {
        dirs.push(parent.join("include"));
    }
    if let Ok(cache) = fs::read_to_string(lib_dir.join("CMakeCache.txt")) {
        for line in cache.lines() {
            if let Some(src) = line.strip_prefix("CMAKE_HOME_DIRECTORY:INTERNAL=") {
                dirs.push(PathBuf::from(src.trim()));
            }
        }
    }
    dirs
}

fn from_libflash_dir(dir: &Path, searched: &mut Vec<String>, header_hints: &mut Vec<PathBuf>) -> Option<Found> {
    let lib = lib_file_name();
    let mut candidates = vec![dir.to_path_buf(), dir.join("lib"), dir.join("lib64")];
    if let Some(m) = multiarch() {
        candidates.push(dir.join("lib").join(m));
    }
    for cand in candidates {
        searched.push(cand.join(lib).display().to_string());
        if cand.join(lib).is_file() {
            let mut header_dirs = vec![dir.to_path_buf(), dir.join("include")];
            header_dirs.extend(header_dirs_near(&cand));
            return Some(Found {
                link_dirs: vec![cand.clone()],
                lib_dirs: vec![cand.clone()],
                header_dirs,
                how: format!("LIBFLASH_DIR={}", dir.display()),
            });
        }
    }
    if dir.join("flash.h").is_file() || dir.join("include").join("flash.h").is_file() {
        // A header-only directory: keep it for the header, look for the library elsewhere.
        header_hints.push(dir.to_path_buf());
        header_hints.push(dir.join("include"));
        return None;
    }
    fail(&format!(
        "LIBFLASH_DIR is set to {} but neither {lib} nor flash.h is there (looked for: {}).",
        dir.display(),
        searched.join(", ")
    ));
}

fn from_pkg_config(searched: &mut Vec<String>) -> Option<Found> {
    match pkg_config::Config::new().atleast_version("1.0").probe("flash") {
        Ok(lib) => Some(Found {
            link_dirs: Vec::new(), // pkg-config printed cargo:rustc-link-search / -lib itself
            lib_dirs: lib.link_paths.clone(),
            header_dirs: lib.include_paths.clone(),
            how: "pkg-config flash".to_string(),
        }),
        Err(e) => {
            let why = e.to_string().lines().next().unwrap_or("").to_string();
            let path = env::var("PKG_CONFIG_PATH").unwrap_or_default();
            searched.push(format!("pkg-config flash >= 1.0 with PKG_CONFIG_PATH={path:?}: {why}"));
            None
        }
    }
}

fn from_system(searched: &mut Vec<String>) -> Option<Found> {
    let lib = lib_file_name();
    for dir in system_lib_dirs() {
        searched.push(dir.join(lib).display().to_string());
        if dir.join(lib).is_file() {
            let header_dirs = header_dirs_near(&dir);
            return Some(Found {
                link_dirs: vec![dir.clone()],
                lib_dirs: vec![dir.clone()],
                header_dirs,
                how: format!("standard path {}", dir.display()),
            });
        }
    }
    None
}

fn fail(what: &str) -> ! {
    eprintln!(
        "\nflash-sys: {what}\n\n\
         Tell flash-sys where libflash is, one of:\n  \
           LIBFLASH_DIR=<dir>     a directory holding {lib} (e.g. a CMake build directory:\n                         \
                                  cmake -G Ninja -S <libflash> -B build && ninja -C build; LIBFLASH_DIR=$PWD/build)\n  \
           LIBFLASH_DIR=<prefix>  an install prefix with lib/{lib} and include/flash.h\n                         \
                                  (cmake --install build --prefix <prefix>)\n  \
           PKG_CONFIG_PATH=<prefix>/lib/pkgconfig   so that `pkg-config flash` finds the installed flash.pc\n  \
           LIBFLASH_INCLUDE_DIR=<dir>   the directory holding flash.h, if it is not next to the library\n",
        lib = lib_file_name()
    );
    std::process::exit(1);
}

/// Status codes, dtypes, devices, algorithms, alignments and struct ids are int32_t in every signature
/// that takes them, so their macros become i32 constants; flags and versions are uint32_t. (bindgen would
/// otherwise make every macro a u32; and rustified enums are not used: an unknown value from a newer
/// library would be undefined behaviour.)
#[derive(Debug)]
struct Callbacks;

impl bindgen::callbacks::ParseCallbacks for Callbacks {
    fn int_macro(&self, name: &str, _value: i64) -> Option<bindgen::callbacks::IntKind> {
        use bindgen::callbacks::IntKind;
        if name.starts_with("FLASH_FLAG_") || name.starts_with("FLASH_VERSION_") {
            Some(IntKind::U32)
        } else if name.starts_with("FLASH_") {
            Some(IntKind::I32)
        } else {
            None
        }
    }

    fn include_file(&self, filename: &str) {
        println!("cargo:rerun-if-changed={filename}");
    }
}

fn main() {
    for var in ["LIBFLASH_DIR", "LIBFLASH_INCLUDE_DIR", "LIBFLASH_NO_RPATH", "PKG_CONFIG_PATH"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=build.rs");
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));

    // ---- The library.
    let mut searched = Vec::new();
    let mut header_hints = Vec::new();
    let mut found = None;
    if let Some(dir) = env::var_os("LIBFLASH_DIR").filter(|d| !d.is_empty()) {
        found = from_libflash_dir(Path::new(&dir), &mut searched, &mut header_hints);
    }
    if found.is_none() {
        found = from_pkg_config(&mut searched);
    }
    if found.is_none() {
        found = from_system(&mut searched);
    }
    let found = match found {
        Some(f) => f,
        None => fail(&format!("could not find libflash. Searched:\n  {}", searched.join("\n  "))),
    };
    for dir in &found.link_dirs {
        println!("cargo:rustc-link-search=native={}", dir.display());
    }
    if !found.link_dirs.is_empty() {
        println!("cargo:rustc-link-lib=dylib=flash");
    }
    let unix = env::var("CARGO_CFG_TARGET_FAMILY").map(|f| f == "unix").unwrap_or(false);
    let want_rpath = unix && env::var_os("LIBFLASH_NO_RPATH").is_none();
    let mut rpath_dirs = Vec::new();
    for dir in &found.lib_dirs {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        if !is_default_loader_dir(&dir) {
            if want_rpath {
                println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
            }
            rpath_dirs.push(dir.display().to_string());
        }
    }
    // Exported to dependents' build scripts as DEP_FLASH_LIB_DIR (`:`-separated; empty for system dirs).
    println!("cargo:lib_dir={}", rpath_dirs.join(":"));

    // ---- The header.
    let mut header_dirs = Vec::new();
    if let Some(dir) = env::var_os("LIBFLASH_INCLUDE_DIR").filter(|d| !d.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join("flash.h").is_file() {
            fail(&format!("LIBFLASH_INCLUDE_DIR is set to {} but there is no flash.h there.", dir.display()));
        }
        header_dirs.push(dir);
    }
    header_dirs.extend(header_hints);
    header_dirs.extend(found.header_dirs.iter().cloned());
    header_dirs.push(manifest_dir.join("../../.."));
    header_dirs.push(PathBuf::from("/usr/local/include"));
    header_dirs.push(PathBuf::from("/usr/include"));
    let header = match header_dirs.iter().map(|d| d.join("flash.h")).find(|h| h.is_file()) {
        Some(h) => h.canonicalize().unwrap_or(h),
        None => fail(&format!(
            "found libflash ({}) but not flash.h. Looked in:\n  {}",
            found.how,
            header_dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join("\n  ")
        )),
    };
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:include={}", header.parent().unwrap().display());
    // Shown by `cargo build -vv`.
    eprintln!("flash-sys: libflash from {}, header {}", found.how, header.display());

    // ---- The bindings.
    let bindings = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_function("flash_.*")
        .allowlist_type("flash_.*")
        .allowlist_var("FLASH_.*")
        .parse_callbacks(Box::new(Callbacks))
        .layout_tests(true)
        .derive_default(true)
        .derive_debug(true)
        .impl_debug(true)
        .size_t_is_usize(true)
        .generate_comments(true)
        .generate()
        .unwrap_or_else(|e| fail(&format!("bindgen could not parse {}: {e:?}", header.display())));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR")).join("bindings.rs");
    bindings.write_to_file(&out).unwrap_or_else(|e| fail(&format!("could not write {}: {e}", out.display())));
}
