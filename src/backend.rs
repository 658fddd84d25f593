//! Where a kernel runs: the Rust reference, the SIMT emulator, or a CUDA device.

/// The implementation that executes a kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// Plain Rust, f32, in the exact operation order of design §3 (the "naive" baseline of §6).
    Reference,
    /// The CUDA kernel source compiled for the CPU against the SIMT emulator.
    Emulated,
    /// The CUDA kernel on the first CUDA device.
    Cuda,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Reference, Backend::Emulated, Backend::Cuda];

    pub fn name(self) -> &'static str {
        match self {
            Backend::Reference => "reference",
            Backend::Emulated => "emulated",
            Backend::Cuda => "cuda",
        }
    }
}

text_enum!(Backend, "backend", "reference, emulated or cuda", {
    "reference" => Reference,
    "emulated" | "emu" => Emulated,
    "cuda" => Cuda,
});
