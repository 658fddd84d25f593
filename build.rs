//! Builds the kernels twice from the same sources:
//! - `replayssm_host`: the launch layer compiled by the host C++ compiler against the SIMT
//!   emulator (csrc/emu), plus host-only C entry points. Always built.
//! - `replayssm_cuda`: the launch layer compiled by nvcc to SASS (sm_90; more with
//!   `REPLAYSSM_CUDA_ARCHS="80;90;100"`) plus
//!   compute_90 PTX, linked with cudart_static. Built when nvcc is found; `REPLAYSSM_REQUIRE_CUDA=1`
//!   turns a missing nvcc into an error. The `-Xptxas -v` report of every kernel is parsed into
//!   `$OUT_DIR/kernel_resources.tsv`. `REPLAYSSM_NO_CUDA=1` skips it (emulated backend only).
//!
//! Then bindgen turns the public header into `$OUT_DIR/bindings.rs`.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    for var in [
        "NVCC",
        "CUDA_HOME",
        "CUDA_PATH",
        "REPLAYSSM_REQUIRE_CUDA",
        "REPLAYSSM_CUDA_ARCHS",
        "LIBCLANG_PATH",
        "REPLAYSSM_NO_CUDA",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo::rustc-check-cfg=cfg(replayssm_cuda)");

    let kernels = launch_layer_sources(&root);
    build_host(&root, &kernels);

    let cuda = match find_nvcc(&root) {
        Some(nvcc) => Some(build_cuda(&root, &out, &nvcc, &kernels)),
        None => {
            if env::var("REPLAYSSM_REQUIRE_CUDA").as_deref() == Ok("1") {
                panic!(
                    "REPLAYSSM_REQUIRE_CUDA=1 but nvcc was not found. Run scripts/test (it installs the \
                     pinned CUDA 13.0 toolchain into .toolchain/), or set NVCC or CUDA_HOME."
                );
            }
            println!(
                "cargo:warning=nvcc not found: building the emulated backend only (set NVCC or CUDA_HOME, \
                 or run scripts/test to install the pinned CUDA 13.0 toolchain)"
            );
            None
        }
    };
    write_build_info(&out, cuda.as_ref());
    generate_bindings(&root, &out);
}

/// `csrc/kernels/*.cu` except the CUDA runtime wrappers: the sources both backends compile.
fn launch_layer_sources(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = fs::read_dir(root.join("csrc/kernels"))
        .expect("csrc/kernels")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "cu") && !p.ends_with("cuda_runtime.cu"))
        .collect();
    files.sort();
    files
}

fn build_host(root: &Path, kernels: &[PathBuf]) {
    let mut b = cc::Build::new();
    b.cpp(true)
        .std("c++17")
        .opt_level(2) // the emulator is slow enough optimised; never build it at -O0
        .debug(false)
        .define("RSSM_EMULATION", None)
        .include(root.join("csrc/include"))
        .include(root.join("csrc/emu"))
        // Contractions would make the emulated result depend on inlining; kernels use fmaf explicitly.
        .flag("-ffp-contract=off")
        // No -ftls-model=initial-exec: it marks libreplayssm.so STATIC_TLS, and with cudart_static's
        // page-aligned TLS the dlopen (Python ctypes) fails with "cannot allocate memory in static
        // TLS block". Linked into an executable, the linker relaxes threadIdx's TLS access to a
        // plain load anyway.
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .flag("-x")
        .flag("c++")
        .file(root.join("csrc/emu/simt.cpp"))
        .file(root.join("csrc/emu/selftest.cpp"))
        .file(root.join("csrc/kernels/host_api.cpp"));
    for k in kernels {
        b.file(k);
    }
    b.compile("replayssm_host");
}

fn find_nvcc(root: &Path) -> Option<PathBuf> {
    if env::var("REPLAYSSM_NO_CUDA").as_deref() == Ok("1") {
        return None;
    }
    let candidates = [
        env::var_os("NVCC").map(PathBuf::from),
        env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("bin/nvcc")),
        env::var_os("CUDA_PATH").map(|h| PathBuf::from(h).join("bin/nvcc")),
        Some(root.join(".toolchain/cuda/nvidia/cu13/bin/nvcc")),
    ];
    candidates.into_iter().flatten().find(|p| p.is_file())
}

struct CudaBuild {
    version: String,
    archs: Vec<String>,
    resources: String,
}

fn build_cuda(root: &Path, out: &Path, nvcc: &Path, kernels: &[PathBuf]) -> CudaBuild {
    let cuda_root = nvcc
        .parent()
        .and_then(Path::parent)
        .expect("nvcc lives in <cuda>/bin")
        .to_path_buf();
    let version = Command::new(nvcc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().find(|l| l.contains("release")).map(|l| l.trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    let archs: Vec<String> = env::var("REPLAYSSM_CUDA_ARCHS")
        .unwrap_or_else(|_| "90".into())
        .split([';', ','])
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect();

    // cc in CUDA mode gives the base command (host compiler flags, -fPIC); debug(false) keeps
    // `-G` out of debug builds. Objects are compiled one by one, without relocatable device
    // code, so that ptxas's report can be captured.
    // cc finds nvcc through $NVCC in CUDA mode (and wraps host flags in -Xcompiler).
    env::set_var("NVCC", nvcc);
    let mut base = cc::Build::new();
    base.cuda(true).debug(false).opt_level(3).cargo_metadata(false);
    let tool = base.get_compiler();

    let mut sources = kernels.to_vec();
    sources.push(root.join("csrc/kernels/cuda_runtime.cu"));
    let jobs: Vec<_> = sources
        .iter()
        .map(|src| {
            let obj = out.join(format!("{}.cuda.o", src.file_stem().unwrap().to_string_lossy()));
            let mut cmd = tool.to_command();
            cmd.args(["-std=c++17", "-O3", "--fmad=false", "-Xptxas", "-v", "-t0"])
                .arg(format!("-I{}", root.join("csrc/include").display()));
            for a in &archs {
                cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
            }
            cmd.arg("-gencode=arch=compute_90,code=compute_90");
            cmd.arg("-c").arg(src).arg("-o").arg(&obj);
            (src.clone(), obj, cmd)
        })
        .collect();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = jobs
            .into_iter()
            .map(|(src, obj, mut cmd)| {
                s.spawn(move || {
                    let o = cmd.output().unwrap_or_else(|e| panic!("running nvcc: {e}"));
                    (src, obj, o)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut report = String::from("kernel\tarch\tregisters\tstack_bytes\tspill_stores\tspill_loads\tsmem_bytes\n");
    let mut archive = cc::Build::new();
    for (src, obj, o) in results {
        let stderr = String::from_utf8_lossy(&o.stderr);
        if !o.status.success() {
            panic!(
                "nvcc failed on {}:\n{}{}",
                src.display(),
                String::from_utf8_lossy(&o.stdout),
                stderr
            );
        }
        report.push_str(&parse_ptxas_report(&stderr));
        archive.object(obj);
    }
    archive.compile("replayssm_cuda");

    let lib_dirs = ["lib", "lib64", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"];
    let cudart = lib_dirs
        .iter()
        .map(|d| cuda_root.join(d))
        .find(|d| d.join("libcudart_static.a").is_file())
        .unwrap_or_else(|| {
            panic!(
                "libcudart_static.a not found under {} (looked in {:?})",
                cuda_root.display(),
                lib_dirs
            )
        });
    println!("cargo:rustc-link-search=native={}", cudart.display());
    println!("cargo:rustc-link-lib=static=cudart_static");
    for l in ["dl", "rt", "pthread"] {
        println!("cargo:rustc-link-lib=dylib={l}");
    }
    println!("cargo:rustc-cfg=replayssm_cuda");
    // DEP_REPLAYSSM_CUDA for crates that link this one (the tools' build.rs sets the same cfg).
    println!("cargo:cuda=1");
    CudaBuild {
        version,
        archs,
        resources: report,
    }
}

/// One TSV row per (kernel, arch) from `ptxas info` lines; names demangled.
fn parse_ptxas_report(stderr: &str) -> String {
    let mut rows = String::new();
    let mut current: Option<(String, String)> = None;
    let mut stack = (0u64, 0u64, 0u64);
    for line in stderr.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            let mut parts = rest.split('\'');
            let name = parts.next().unwrap_or("").to_string();
            let arch = parts.nth(1).unwrap_or("").to_string();
            current = Some((name, arch));
            stack = (0, 0, 0);
        } else if line.contains("bytes stack frame") {
            let n: Vec<u64> = line
                .split(|c: char| !c.is_ascii_digit())
                .filter_map(|t| t.parse().ok())
                .collect();
            if n.len() >= 3 {
                stack = (n[0], n[1], n[2]);
            }
        } else if let Some(rest) = line.split("Used ").nth(1) {
            if let (Some((name, arch)), Some(regs)) = (
                current.take(),
                rest.split_whitespace().next().and_then(|r| r.parse::<u64>().ok()),
            ) {
                let pretty = cpp_demangle::Symbol::new(name.as_bytes())
                    .ok()
                    .and_then(|s| s.demangle(&cpp_demangle::DemangleOptions::default()).ok())
                    .unwrap_or(name);
                // "Used 94 registers, used 1 barriers, 384 bytes smem, 400 bytes cmem[0]"
                let smem = rest
                    .split(',')
                    .find(|part| part.contains("bytes smem"))
                    .and_then(|part| part.split_whitespace().next())
                    .and_then(|n| n.parse::<u64>().ok())
                    .unwrap_or(0);
                rows.push_str(&format!(
                    "{pretty}\t{arch}\t{regs}\t{}\t{}\t{}\t{smem}\n",
                    stack.0, stack.1, stack.2
                ));
            }
        }
    }
    rows
}

fn write_build_info(out: &Path, cuda: Option<&CudaBuild>) {
    let (version, archs, resources) = match cuda {
        Some(c) => (c.version.clone(), c.archs.join(","), c.resources.clone()),
        None => (String::new(), String::new(), String::new()),
    };
    fs::write(out.join("kernel_resources.tsv"), resources).expect("write resources");
    let info = format!(
        "/// Whether the CUDA backend was compiled in.\npub const CUDA_COMPILED: bool = {};\n\
         /// `nvcc --version` release line used for the build (empty without CUDA).\npub const NVCC_VERSION: &str = {:?};\n\
         /// SASS architectures compiled (compute_90 PTX is always embedded too).\npub const CUDA_ARCHS: &str = {:?};\n\
         /// Where the nvcc objects (`*.cuda.o`, with their cubins) of this build are (empty without CUDA).\npub const CUDA_OBJECTS_DIR: &str = {:?};\n",
        cuda.is_some(),
        version,
        archs,
        if cuda.is_some() { out.display().to_string() } else { String::new() }
    );
    fs::write(out.join("build_info.rs"), info).expect("write build info");
}

fn generate_bindings(root: &Path, out: &Path) {
    if env::var_os("LIBCLANG_PATH").is_none() {
        let local = root.join(".toolchain/libclang/clang/native");
        if local.join("libclang.so").is_file() {
            env::set_var("LIBCLANG_PATH", local);
        }
    }
    let bindings = bindgen::Builder::default()
        .header(root.join("csrc/include/replayssm/replayssm.h").display().to_string())
        .header(root.join("csrc/emu/selftest.h").display().to_string())
        .clang_arg(format!("-I{}", root.join("csrc/include").display()))
        .allowlist_function("rssm_.*")
        // Defined in Rust (src/checks/can_implement.rs) and called by the C++ launchers.
        .blocklist_function("rssm_.*_can_implement")
        .allowlist_type("rssm_.*")
        .allowlist_var("RSSM_.*")
        .derive_default(true)
        .derive_debug(true)
        .generate()
        .unwrap_or_else(|e| {
            panic!(
                "bindgen failed ({e}). It needs libclang: run scripts/test or scripts/demo (they install \
                 it into .toolchain/), or set LIBCLANG_PATH."
            )
        });
    bindings.write_to_file(out.join("bindings.rs")).expect("write bindings");
}
