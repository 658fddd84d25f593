//! `cfg(replayssm_cuda)` exactly when the replayssm library was built with its CUDA backend
//! (its build script says so through `links` metadata): the bench's device buffers and events
//! exist only then.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(replayssm_cuda)");
    println!("cargo:rerun-if-env-changed=DEP_REPLAYSSM_CUDA");
    if std::env::var("DEP_REPLAYSSM_CUDA").as_deref() == Ok("1") {
        println!("cargo:rustc-cfg=replayssm_cuda");
    }
}
