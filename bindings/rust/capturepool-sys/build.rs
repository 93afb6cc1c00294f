//! Links libcapturepool.a.
//!
//! - `CAPTUREPOOL_LIB_DIR` set: the library already built there is linked
//!   (the project's ctest run points it at its own build tree).
//! - Otherwise the project's CMake builds the static library into OUT_DIR
//!   (Release, host backend always, the CUDA backend where CMake finds the
//!   toolkit), and that is linked.
//!
//! Where the library has the CUDA backend (it calls the CUDA runtime), the
//! static CUDA runtime is linked too, from `CAPTUREPOOL_CUDA_LIB_DIR`, or
//! the toolkit's lib64 (`CUDA_HOME`, `CUDA_PATH`, nvcc's folder, or
//! /usr/local/cuda). A library built with AddressSanitizer needs its
//! runtime in the final link: build with
//! `RUSTFLAGS=-Clink-arg=-fsanitize=address` (and `,undefined` where the
//! library has UBSan too); this script warns when that is missing.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=CAPTUREPOOL_LIB_DIR");
    println!("cargo:rerun-if-env-changed=CAPTUREPOOL_CUDA_LIB_DIR");
    println!("cargo:rerun-if-env-changed=CAPTUREPOOL_CMAKE_ARGS");

    let lib_dir = match env::var_os("CAPTUREPOOL_LIB_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => build_with_cmake(),
    };
    let archive = lib_dir.join("libcapturepool.a");
    println!("cargo:rerun-if-changed={}", archive.display());
    let bytes = fs::read(&archive).unwrap_or_else(|e| {
        panic!(
            "capturepool-sys: cannot read {} ({e}); set CAPTUREPOOL_LIB_DIR to the folder of a built libcapturepool.a",
            archive.display()
        )
    });

    println!("cargo:rustc-link-search=native={}", lib_dir.display());
    println!("cargo:rustc-link-lib=static=capturepool");
    if contains(&bytes, b"cudaStreamCreate") {
        let cuda = cuda_lib_dir().unwrap_or_else(|| {
            panic!(
                "capturepool-sys: {} has the CUDA backend but no libcudart_static.a was found; set CAPTUREPOOL_CUDA_LIB_DIR",
                archive.display()
            )
        });
        println!("cargo:rustc-link-search=native={}", cuda.display());
        println!("cargo:rustc-link-lib=static=cudart_static");
        println!("cargo:rustc-link-lib=dylib=rt");
    }
    println!("cargo:rustc-link-lib=dylib=pthread");
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rustc-link-lib=dylib=m");

    let rustflags = env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if contains(&bytes, b"__asan_") && !rustflags.contains("sanitize=address") {
        println!(
            "cargo:warning={} is built with AddressSanitizer: link with RUSTFLAGS=-Clink-arg=-fsanitize=address",
            archive.display()
        );
    }
    if contains(&bytes, b"__ubsan_") && !rustflags.contains("undefined") {
        println!(
            "cargo:warning={} is built with UndefinedBehaviorSanitizer: add -Clink-arg=-fsanitize=undefined to RUSTFLAGS",
            archive.display()
        );
    }
}

/// Configures and builds the project's static library into OUT_DIR; returns
/// the folder of libcapturepool.a.
fn build_with_cmake() -> PathBuf {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../../..").canonicalize().expect("capturepool-sys: the project root");
    for watched in ["CMakeLists.txt", "src", "include", "cmake"] {
        println!("cargo:rerun-if-changed={}", root.join(watched).display());
    }
    let build = PathBuf::from(env::var_os("OUT_DIR").unwrap()).join("cmake-build");
    let mut configure = Command::new("cmake");
    configure
        .arg("-S")
        .arg(&root)
        .arg("-B")
        .arg(&build)
        .arg("-DCMAKE_BUILD_TYPE=Release")
        .arg("-DCPOOL_BUILD_TESTS=OFF")
        .arg("-DCPOOL_BUILD_EXAMPLES=OFF")
        .arg("-DCPOOL_BUILD_BENCH=OFF");
    if let Ok(extra) = env::var("CAPTUREPOOL_CMAKE_ARGS") {
        configure.args(extra.split_whitespace());
    }
    run(&mut configure);
    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "2".into());
    run(Command::new("cmake")
        .arg("--build")
        .arg(&build)
        .arg("--target")
        .arg("capturepool_static")
        .arg("-j")
        .arg(jobs));
    build.join("src")
}

fn run(cmd: &mut Command) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("capturepool-sys: cannot run {cmd:?} ({e}); is cmake installed?"));
    if !status.success() {
        panic!("capturepool-sys: {cmd:?} failed with {status}");
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn cuda_lib_dir() -> Option<PathBuf> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Some(dir) = env::var_os("CAPTUREPOOL_CUDA_LIB_DIR") {
        candidates.push(dir.into());
    }
    for var in ["CUDA_HOME", "CUDA_PATH", "CUDA_ROOT"] {
        if let Some(root) = env::var_os(var) {
            candidates.push(Path::new(&root).join("lib64"));
            candidates.push(Path::new(&root).join("lib"));
        }
    }
    if let Some(path) = env::var_os("PATH") {
        for dir in env::split_paths(&path) {
            if dir.join("nvcc").is_file() {
                candidates.push(dir.join("../lib64"));
            }
        }
    }
    candidates.push("/usr/local/cuda/lib64".into());
    candidates.into_iter().find(|d| d.join("libcudart_static.a").is_file())
}
