//! A peer's golden file (safetensors: `__metadata__` strings and the tensors), read with the
//! safetensors crate. A missing file, tensor or key panics: a golden never skips.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, SafeTensors};

pub struct Golden {
    pub name: String,
    bytes: Vec<u8>,
    meta: HashMap<String, String>,
}

impl Golden {
    pub fn load(path: &Path) -> Golden {
        let name = path.display().to_string();
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{name}: {e} (the golden must be checked in)"));
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap_or_else(|e| panic!("{name}: header: {e}"));
        let meta = header
            .metadata()
            .clone()
            .unwrap_or_else(|| panic!("{name}: no __metadata__"));
        Golden { name, bytes, meta }
    }

    pub fn meta_str(&self, key: &str) -> &str {
        self.meta
            .get(key)
            .unwrap_or_else(|| panic!("{}: no metadata {key}", self.name))
    }

    pub fn meta<T: std::str::FromStr>(&self, key: &str) -> T {
        let s = self.meta_str(key);
        s.parse()
            .unwrap_or_else(|_| panic!("{}: metadata {key} = {s:?} does not parse", self.name))
    }

    /// The tensor's bytes, its dtype and shape checked.
    fn raw(&self, name: &str, dtype: Dtype, shape: &[usize]) -> Vec<u8> {
        let st = SafeTensors::deserialize(&self.bytes).unwrap_or_else(|e| panic!("{}: {e}", self.name));
        let t = st
            .tensor(name)
            .unwrap_or_else(|e| panic!("{}: no tensor {name}: {e}", self.name));
        assert_eq!(t.dtype(), dtype, "{}: {name}'s dtype", self.name);
        assert_eq!(t.shape(), shape, "{}: {name}'s shape", self.name);
        t.data().to_vec()
    }

    pub fn f32s(&self, name: &str, shape: &[usize]) -> Vec<f32> {
        let b = self.raw(name, Dtype::F32, shape);
        b.chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A bf16 tensor widened to f32 (exact).
    pub fn bf16s(&self, name: &str, shape: &[usize]) -> Vec<f32> {
        let b = self.raw(name, Dtype::BF16, shape);
        b.chunks_exact(2)
            .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])).to_f32())
            .collect()
    }

    pub fn i32s(&self, name: &str, shape: &[usize]) -> Vec<i32> {
        let b = self.raw(name, Dtype::I32, shape);
        b.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    /// A tensor's shape (for the dimensions the peer chose, e.g. how many events it recorded).
    pub fn shape(&self, name: &str) -> Vec<usize> {
        let st = SafeTensors::deserialize(&self.bytes).unwrap_or_else(|e| panic!("{}: {e}", self.name));
        st.tensor(name)
            .unwrap_or_else(|e| panic!("{}: no tensor {name}: {e}", self.name))
            .shape()
            .to_vec()
    }
}
