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
//!
//! Every object is kept in `<target>/replayssm-object-cache/`, keyed by a hash of what goes into
//! it (its source and the headers it includes, the compiler's path, version and flags, the
//! target). Cargo runs this script once per profile and feature set (clippy, test, the C
//! example's build and scripts/install each run it), and nvcc is most of a clean build's time:
//! with the cache each source compiles once per content. `REPLAYSSM_OBJECT_CACHE=0` turns it off.

use std::collections::hash_map::DefaultHasher;
use std::env;
use std::fs;
use std::hash::{Hash, Hasher};
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
        "REPLAYSSM_OBJECT_CACHE",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    println!("cargo:rerun-if-changed=csrc");
    println!("cargo::rustc-check-cfg=cfg(replayssm_cuda)");

    let kernels = launch_layer_sources(&root);
    let cache = ObjectCache::new(&root, &out);
    build_host(&root, &kernels, &cache);

    let cuda = match find_nvcc(&root) {
        Some(nvcc) => Some(build_cuda(&root, &out, &nvcc, &kernels, &cache)),
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

fn build_host(root: &Path, kernels: &[PathBuf], cache: &ObjectCache) {
    let mut base = cc::Build::new();
    base.cpp(true)
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
        .flag("c++");
    // Resolves the flag checks once; the clones below share their answers.
    let tool = base.get_compiler();
    let mut sources = vec![
        root.join("csrc/emu/simt.cpp"),
        root.join("csrc/emu/selftest.cpp"),
        root.join("csrc/kernels/host_api.cpp"),
    ];
    sources.extend_from_slice(kernels);
    let identity = tool_identity(&tool);
    let keys: Vec<String> = sources.iter().map(|src| cache.key("host", src, &identity)).collect();
    let mut objects: Vec<Option<PathBuf>> = keys.iter().map(|k| cache.load(k, "o")).collect();
    // The misses, one compiler per source in parallel (cc's own loop is serial).
    let compiled: Vec<(usize, PathBuf)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..sources.len())
            .filter(|&i| objects[i].is_none())
            .map(|i| {
                let mut b = base.clone();
                b.file(&sources[i]);
                s.spawn(move || (i, b.compile_intermediates().remove(0)))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("host compile thread"))
            .collect()
    });
    for (i, obj) in compiled {
        cache.store(&keys[i], "o", &obj);
        objects[i] = Some(obj);
    }
    let objects: Vec<PathBuf> = objects.into_iter().flatten().collect();
    base.objects(objects).compile("replayssm_host");
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

fn build_cuda(root: &Path, out: &Path, nvcc: &Path, kernels: &[PathBuf], cache: &ObjectCache) -> CudaBuild {
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
    let flags = |cmd: &mut Command| {
        cmd.args(["-std=c++17", "-O3", "--fmad=false", "-Xptxas", "-v", "-t0"])
            .arg(format!("-I{}", root.join("csrc/include").display()));
        for a in &archs {
            cmd.arg(format!("-gencode=arch=compute_{a},code=sm_{a}"));
        }
        cmd.arg("-gencode=arch=compute_90,code=compute_90");
    };
    let mut identity = tool_identity(&tool);
    let mut probe = Command::new("nvcc");
    flags(&mut probe);
    identity.extend(probe.get_args().map(|a| a.to_string_lossy().into_owned()));
    identity.push(version.clone());
    identity.extend(tool_identity(&cc::Build::new().cpp(true).get_compiler())); // nvcc's host compiler

    // Per source: its object in $OUT_DIR (tests/sass.rs reads the cubins there) and ptxas's report,
    // from the cache where both are there.
    let keys: Vec<String> = sources.iter().map(|src| cache.key("cuda", src, &identity)).collect();
    let object = |src: &Path| out.join(format!("{}.cuda.o", src.file_stem().unwrap().to_string_lossy()));
    let mut compiled: Vec<Option<(PathBuf, String)>> = sources
        .iter()
        .zip(&keys)
        .map(|(src, key)| {
            let report = fs::read_to_string(cache.load(key, "ptxas.txt")?).ok()?;
            let obj = object(src);
            fs::copy(cache.load(key, "o")?, &obj).ok()?;
            Some((obj, report))
        })
        .collect();
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..sources.len())
            .filter(|&i| compiled[i].is_none())
            .map(|i| {
                let (src, obj) = (&sources[i], object(&sources[i]));
                let mut cmd = tool.to_command();
                flags(&mut cmd);
                cmd.arg("-c").arg(src).arg("-o").arg(&obj);
                s.spawn(move || {
                    let o = cmd.output().unwrap_or_else(|e| panic!("running nvcc: {e}"));
                    (i, obj, o)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, obj, o) in results {
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        if !o.status.success() {
            panic!(
                "nvcc failed on {}:\n{}{}",
                sources[i].display(),
                String::from_utf8_lossy(&o.stdout),
                stderr
            );
        }
        let report = obj.with_extension("ptxas.txt");
        if fs::write(&report, &stderr).is_ok() {
            cache.store(&keys[i], "ptxas.txt", &report);
        }
        cache.store(&keys[i], "o", &obj);
        compiled[i] = Some((obj, stderr));
    }
    let mut report = String::from("kernel\tarch\tregisters\tstack_bytes\tspill_stores\tspill_loads\tsmem_bytes\n");
    let mut archive = cc::Build::new();
    for (obj, stderr) in compiled.into_iter().flatten() {
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

/// A compiler as the cache key sees it: its path, its flags (cc folds CFLAGS/CXXFLAGS in) and
/// what `--version` prints.
fn tool_identity(tool: &cc::Tool) -> Vec<String> {
    let mut id = vec![tool.path().display().to_string()];
    id.extend(tool.args().iter().map(|a| a.to_string_lossy().into_owned()));
    let version = Command::new(tool.path()).arg("--version").output();
    id.push(
        version
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default(),
    );
    id
}

/// Objects kept by the hash of their inputs, shared by every profile of one target directory.
/// Any failure to read or write it only costs a compile: a cache never fails the build.
struct ObjectCache {
    dir: Option<PathBuf>,
    /// Where `#include "..."` is looked up after the including file's own folder.
    include_dirs: Vec<PathBuf>,
}

impl ObjectCache {
    /// Files kept: about four builds' worth; the least recently used go first.
    const KEEP: usize = 160;

    fn new(root: &Path, out: &Path) -> Self {
        // OUT_DIR is <target>/[<triple>/]<profile>/build/<package>-<hash>/out.
        let build = out.ancestors().nth(2);
        let enabled = env::var("REPLAYSSM_OBJECT_CACHE").as_deref() != Ok("0");
        let dir = match build {
            Some(b) if enabled && b.file_name().is_some_and(|n| n == "build") => b
                .parent()
                .and_then(Path::parent)
                .map(|t| t.join("replayssm-object-cache")),
            _ => None,
        };
        ObjectCache {
            dir,
            include_dirs: vec![root.join("csrc/include"), root.join("csrc/emu")],
        }
    }

    /// A source's key: its bytes and those of every file it includes with quotes, transitively
    /// (so a header change recompiles only its includers), the compiler's identity (path, flags,
    /// version: the whole command but the file names) and the target.
    fn key(&self, kind: &str, source: &Path, identity: &[String]) -> String {
        let mut seen = std::collections::BTreeSet::new();
        let mut todo = vec![source.to_path_buf()];
        while let Some(f) = todo.pop() {
            if !seen.insert(f.clone()) {
                continue;
            }
            let text = fs::read_to_string(&f).expect("read a build input");
            for line in text.lines() {
                let Some(name) = line
                    .trim_start()
                    .strip_prefix("#include \"")
                    .and_then(|r| r.split('"').next())
                else {
                    continue;
                };
                let here = f.parent().map(|d| d.join(name));
                let found = here
                    .into_iter()
                    .chain(self.include_dirs.iter().map(|d| d.join(name)))
                    .find(|p| p.is_file());
                // An include no folder holds is a system header (or an error nvcc reports).
                todo.extend(found);
            }
        }
        let mut h = DefaultHasher::new();
        for f in &seen {
            f.file_name().hash(&mut h);
            fs::read(f).expect("read a build input").hash(&mut h);
        }
        identity.hash(&mut h);
        env::var("TARGET").unwrap_or_default().hash(&mut h);
        format!("{kind}-{:016x}", h.finish())
    }

    /// The cached file, marked as used.
    fn load(&self, key: &str, ext: &str) -> Option<PathBuf> {
        let path = self.dir.as_ref()?.join(format!("{key}.{ext}"));
        let file = fs::File::options().append(true).open(&path).ok()?;
        let _ = file.set_modified(std::time::SystemTime::now());
        Some(path)
    }

    /// Copies `file` in; it appears by an atomic rename, so a reader never sees half of it.
    fn store(&self, key: &str, ext: &str, file: &Path) {
        let Some(dir) = &self.dir else { return };
        let tmp = dir.join(format!(".{key}.{ext}.{}", std::process::id()));
        if fs::create_dir_all(dir).is_err()
            || fs::copy(file, &tmp).is_err()
            || fs::rename(&tmp, dir.join(format!("{key}.{ext}"))).is_err()
        {
            let _ = fs::remove_file(&tmp);
            return;
        }
        let mut entries: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(dir)
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok())
            .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
            .collect();
        if entries.len() > Self::KEEP {
            entries.sort();
            for (_, p) in entries.iter().take(entries.len() - Self::KEEP) {
                let _ = fs::remove_file(p);
            }
        }
    }
}
