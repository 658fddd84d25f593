//! Case files (`replayssm-case/1`, design §7): one safetensors file per case with inputs and the
//! expected outputs, run on any backend and judged by the §6 rule with the file's tolerances.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use safetensors::tensor::{Dtype, SafeTensors, TensorView};

use crate::staged::{fold, recurrent, verify, verify_fold, DeviceTokens};
use crate::workload::{GateData, RecurrentData};
use replayssm::backend::Backend;
use replayssm::config::{resolve, EngineFlags};
use replayssm::dtype::{bytes_of, ActBuffer, DType};
use replayssm::kernels::recurrent::RecurrentOutputs;
use replayssm::memory::{DeviceAct, DeviceVec, Stream};
use replayssm::numerics::{compare, Comparison, Tolerance};
use replayssm::pool::CheckpointPool;
use replayssm::problem::{HeadDims, Variant};
use replayssm::ring::SpecRing;
use replayssm::spec::MAX_VERIFY_WINDOW;
use replayssm::tree::{AcceptedPaths, DraftTree};
use replayssm::{BufferedFold, BufferedRing, DeferredRing, GateForm};

pub const FORMAT: &str = "replayssm-case/1";

/// Largest case file [`load`] reads: cases are test vectors of a few MB; the cap keeps a wrong
/// path (a disk image, `/dev/zero`) from taking all memory.
pub const MAX_CASE_FILE_BYTES: u64 = 1 << 30;

/// Largest safetensors header (the JSON after the 8-byte length) [`load`] accepts: a case's is a
/// few KB; refused before the rest of the file is read.
pub const MAX_HEADER_BYTES: u64 = 16 << 20;

/// Largest buffered-decode ring a `decode` case may need (records of every slot, f32): the ring
/// is sized by requests x records, which a small file can make huge.
pub const MAX_DECODE_RING_BYTES: u64 = 1 << 30;

/// Most steps a `verify_fold_steps` case may hold (the leading extent of its token tensors):
/// a test vector needs a few; the bound keeps a file from asking for unbounded per-step work.
pub const MAX_CASE_STEPS: usize = 64;

/// `s` with control and bidirectional-format characters escaped (`\u{202e}`, `\u{1b}`), so a
/// string from a case file cannot drive the terminal or reorder what is printed around it.
pub fn escape_untrusted(s: &str) -> Cow<'_, str> {
    let risky = |c: char| {
        c.is_control()
            || matches!(c, '\u{061c}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    if !s.chars().any(risky) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        if risky(c) {
            out.extend(c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Operations a case can describe (design §7); this build runs them all. `make-case --op` takes
/// their names (clap's `ValueEnum`).
///
/// `verify_fold_steps` is the deferred fold over S steps: step s runs kernel VF on its window
/// (folding step s-1's accepted records, then verifying), then commits `accept[s]`; after the
/// last step every request is flushed. `o [S, N, HV, V]` holds each step's outputs and
/// `state_out` the flushed checkpoint, both from the f64 reference of V then F per step.
/// `verify_buffered_steps` is the same file (the same reference) with a cache length L
/// (metadata `cache_len`, 2 T..=64): step s runs kernel VB on its window, then the buffered
/// commit of `accept[s]` (a row whose next window would not fit flushes); after the last step
/// every request is flushed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum Op {
    Recurrent,
    Verify,
    Fold,
    Decode,
    VerifyTree,
    FoldTree,
    VerifyFoldSteps,
    VerifyBufferedSteps,
}

impl Op {
    pub fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "recurrent" => Op::Recurrent,
            "verify" => Op::Verify,
            "fold" => Op::Fold,
            "decode" => Op::Decode,
            "verify_tree" => Op::VerifyTree,
            "fold_tree" => Op::FoldTree,
            "verify_fold_steps" => Op::VerifyFoldSteps,
            "verify_buffered_steps" => Op::VerifyBufferedSteps,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Op::Recurrent => "recurrent",
            Op::Verify => "verify",
            Op::Fold => "fold",
            Op::Decode => "decode",
            Op::VerifyTree => "verify_tree",
            Op::FoldTree => "fold_tree",
            Op::VerifyFoldSteps => "verify_fold_steps",
            Op::VerifyBufferedSteps => "verify_buffered_steps",
        }
    }

    /// The ops whose file holds S steps (`verify_fold_steps`, `verify_buffered_steps`).
    pub fn has_steps(self) -> bool {
        matches!(self, Op::VerifyFoldSteps | Op::VerifyBufferedSteps)
    }
}

/// Why a case file could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum CaseError {
    #[error("{path}: cannot read: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: not a safetensors file: {msg}")]
    NotSafetensors { path: PathBuf, msg: String },
    #[error("{path}: format is {}, this build reads \"{FORMAT}\"", quoted(.found))]
    Format { path: PathBuf, found: Option<String> },
    #[error("{path}: metadata key '{key}': {msg}")]
    Metadata {
        path: PathBuf,
        key: &'static str,
        msg: String,
    },
    #[error("{path}: missing tensor '{name}'")]
    MissingTensor { path: PathBuf, name: &'static str },
    #[error("{path}: tensor '{name}': {msg}")]
    BadTensor {
        path: PathBuf,
        name: &'static str,
        msg: String,
    },
    #[error("{path}: {source}")]
    Run { path: PathBuf, source: replayssm::Error },
    #[error("{path}: not a regular file ({kind}); a case file must be a regular file")]
    NotRegularFile { path: PathBuf, kind: &'static str },
    #[error("{path}: {what} is {value}, over the limit of {limit}")]
    Limit {
        path: PathBuf,
        what: &'static str,
        value: u64,
        limit: u64,
    },
    #[error("{path}: cannot allocate {bytes} bytes for {buffer}")]
    Alloc {
        path: PathBuf,
        buffer: &'static str,
        bytes: u64,
    },
}

/// `found` in quotes with control and bidi characters escaped, or `missing`.
fn quoted(found: &Option<String>) -> String {
    found
        .as_deref()
        .map_or("missing".into(), |f| format!("\"{}\"", escape_untrusted(f)))
}

/// An empty vector with room for `len` elements, or [`CaseError::Alloc`] naming `buffer`: every
/// buffer sized from a file is reserved this way, so a failed allocation is an error, not an
/// abort.
fn try_vec<T>(path: &Path, buffer: &'static str, len: usize) -> Result<Vec<T>, CaseError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| CaseError::Alloc {
        path: path.to_path_buf(),
        buffer,
        bytes: (len as u64).saturating_mul(std::mem::size_of::<T>() as u64),
    })?;
    Ok(v)
}

/// `bytes` decoded as little-endian `N`-byte elements into a fallibly reserved vector.
fn decode_le<T, const N: usize>(
    path: &Path,
    buffer: &'static str,
    bytes: &[u8],
    from: impl Fn([u8; N]) -> T,
) -> Result<Vec<T>, CaseError> {
    let mut v = try_vec(path, buffer, bytes.len() / N)?;
    v.extend(bytes.chunks_exact(N).map(|c| {
        let mut a = [0u8; N];
        a.copy_from_slice(c);
        from(a)
    }));
    Ok(v)
}

/// What a path that is not a regular file is, for the message.
fn file_kind(ft: std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO";
        } else if ft.is_char_device() {
            return "a character device";
        } else if ft.is_block_device() {
            return "a block device";
        } else if ft.is_socket() {
            return "a socket";
        }
    }
    if ft.is_dir() {
        "a directory"
    } else {
        "not a plain file"
    }
}

/// The bytes of a case file, read with bounds: a regular file (not a FIFO, device or directory,
/// which could block or never end) of at most [`MAX_CASE_FILE_BYTES`], whose 8-byte header length
/// is at most [`MAX_HEADER_BYTES`] and within the file, checked before the rest is read.
pub fn read_case_file(path: &Path) -> Result<Vec<u8>, CaseError> {
    let io = |source| CaseError::Io {
        path: path.to_path_buf(),
        source,
    };
    // stat before open: opening a FIFO for reading blocks until a writer appears.
    let meta = std::fs::metadata(path).map_err(io)?;
    if !meta.is_file() {
        return Err(CaseError::NotRegularFile {
            path: path.to_path_buf(),
            kind: file_kind(meta.file_type()),
        });
    }
    let mut file = std::fs::File::open(path).map_err(io)?;
    // Again on the open file, which is what is read (the path may have changed since).
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(CaseError::NotRegularFile {
            path: path.to_path_buf(),
            kind: file_kind(meta.file_type()),
        });
    }
    let len = meta.len();
    if len > MAX_CASE_FILE_BYTES {
        return Err(CaseError::Limit {
            path: path.to_path_buf(),
            what: "file size (bytes)",
            value: len,
            limit: MAX_CASE_FILE_BYTES,
        });
    }
    let not_st = |msg: String| CaseError::NotSafetensors {
        path: path.to_path_buf(),
        msg,
    };
    if len < 8 {
        return Err(not_st(format!(
            "the file is {len} bytes, shorter than the 8-byte header length"
        )));
    }
    let mut head = [0u8; 8];
    file.read_exact(&mut head).map_err(io)?;
    let header_len = u64::from_le_bytes(head);
    if header_len > MAX_HEADER_BYTES {
        return Err(not_st(format!(
            "the header length is {header_len} bytes, over the limit of {MAX_HEADER_BYTES}"
        )));
    }
    if header_len > len - 8 {
        return Err(not_st(format!(
            "the header length is {header_len} bytes but only {} bytes follow it",
            len - 8
        )));
    }
    let mut bytes = try_vec::<u8>(path, "the case file", len as usize)?;
    bytes.extend_from_slice(&head);
    // At most the stat'ed length: a file that grows meanwhile cannot make this unbounded.
    file.take(len - 8).read_to_end(&mut bytes).map_err(io)?;
    Ok(bytes)
}

/// A loaded case: the inputs as a workload (the pool holds one slot per request, request r in
/// slot r) and the expected tensors. For `verify_fold_steps`, `data` is step 0's window (with
/// `state_in`) and [`Case::steps`] the rest.
#[derive(Clone, Debug)]
pub struct Case {
    pub path: PathBuf,
    pub op: Op,
    pub tolerance: Tolerance,
    pub data: RecurrentData,
    pub expected_o: Vec<f32>,
    /// `recurrent`: after all tokens; `fold`: after `accept[r]`; `verify` (optional): unchanged.
    pub expected_state: Option<Vec<f32>>,
    /// `fold` only: tokens to commit per request.
    pub accept: Option<Vec<i32>>,
    /// `verify_tree` and `fold_tree`: the draft tree (tensor `parent`).
    pub tree: Option<DraftTree>,
    /// `fold_tree` only: the accepted root paths (tensor `accept_path [R, P]`).
    pub accept_path: Option<AcceptedPaths>,
    /// `decode` only: the ring's cache length L (metadata `cache_len`).
    pub cache_len: Option<usize>,
    /// `verify_fold_steps` only: steps 1.. and every step's accept lengths.
    pub steps: Option<Steps>,
}

/// The steps of a `verify_fold_steps` case after the first (which is [`Case::data`]).
#[derive(Clone, Debug)]
pub struct Steps {
    /// Windows of steps 1..S: the same requests (`cu_seqlens`, slots), dims, dtype, gate kind and
    /// gate parameters as step 0; their `state` is empty (the run carries the checkpoint).
    pub rest: Vec<RecurrentData>,
    /// `[S, R]` row-major: tokens request r commits after step s, 0..=its window.
    pub accept: Vec<i32>,
}

impl Steps {
    /// Step `s`'s accept lengths, one per request.
    pub fn accept_of(&self, s: usize, requests: usize) -> replayssm::Result<&[i32]> {
        self.accept
            .get(s * requests..(s + 1) * requests)
            .ok_or_else(|| replayssm::Error::Shape {
                tensor: "accept",
                expected: format!("[{}, {requests}]", self.count()),
                got: format!("[{}]", self.accept.len()),
            })
    }

    /// S, step 0 included.
    pub fn count(&self) -> usize {
        self.rest.len() + 1
    }
}

/// Per-tensor comparisons of one run.
#[derive(Clone, Debug)]
pub struct CaseReport {
    pub o: Comparison,
    /// `None` when the case has no `state_out` (allowed for `verify`).
    pub state_out: Option<Comparison>,
}

impl CaseReport {
    pub fn passed(&self) -> bool {
        self.o.passed() && self.state_out.is_none_or(|c| c.passed())
    }
    pub fn max_err(&self) -> f64 {
        self.o.max_abs_err.max(self.state_out.map_or(0.0, |c| c.max_abs_err))
    }
}

struct Reader<'a> {
    path: &'a Path,
    st: SafeTensors<'a>,
}

impl Reader<'_> {
    fn has(&self, name: &str) -> bool {
        self.st.names().iter().any(|n| n.as_str() == name)
    }

    fn tensor(&self, name: &'static str) -> Result<TensorView<'_>, CaseError> {
        self.st.tensor(name).map_err(|_| CaseError::MissingTensor {
            path: self.path.to_path_buf(),
            name,
        })
    }

    fn bad(&self, name: &'static str, msg: String) -> CaseError {
        CaseError::BadTensor {
            path: self.path.to_path_buf(),
            name,
            msg,
        }
    }

    /// Checks the shape (`None` = any extent) and returns it.
    fn shape(
        &self,
        name: &'static str,
        t: &TensorView<'_>,
        expected: &[Option<usize>],
    ) -> Result<Vec<usize>, CaseError> {
        let s = t.shape().to_vec();
        let ok = s.len() == expected.len() && s.iter().zip(expected).all(|(a, e)| e.is_none_or(|e| e == *a));
        if !ok {
            let want: Vec<String> = expected
                .iter()
                .map(|e| e.map_or("_".to_string(), |v| v.to_string()))
                .collect();
            return Err(self.bad(name, format!("shape {s:?}, expected [{}]", want.join(", "))));
        }
        Ok(s)
    }

    fn f32s(&self, name: &'static str, expected: &[Option<usize>]) -> Result<Vec<f32>, CaseError> {
        let t = self.tensor(name)?;
        self.shape(name, &t, expected)?;
        if t.dtype() != Dtype::F32 {
            return Err(self.bad(name, format!("dtype {:?}, expected F32", t.dtype())));
        }
        decode_le(self.path, name, t.data(), f32::from_le_bytes)
    }

    fn i32s(&self, name: &'static str, expected: &[Option<usize>]) -> Result<Vec<i32>, CaseError> {
        let t = self.tensor(name)?;
        self.shape(name, &t, expected)?;
        if t.dtype() != Dtype::I32 {
            return Err(self.bad(name, format!("dtype {:?}, expected I32", t.dtype())));
        }
        decode_le(self.path, name, t.data(), i32::from_le_bytes)
    }

    /// The activation dtype of `t`, which must be `want` (q's) when given.
    fn act_dtype(&self, name: &'static str, t: &TensorView<'_>, want: Option<DType>) -> Result<DType, CaseError> {
        let got = match t.dtype() {
            Dtype::F32 => DType::F32,
            Dtype::F16 => DType::F16,
            Dtype::BF16 => DType::BF16,
            other => return Err(self.bad(name, format!("dtype {other:?}, expected BF16, F16 or F32"))),
        };
        if let Some(d) = want {
            if d != got {
                return Err(self.bad(name, format!("dtype {got}, but q is {d}")));
            }
        }
        Ok(got)
    }

    fn decode_act(&self, name: &'static str, dtype: DType, data: &[u8]) -> Result<ActBuffer, CaseError> {
        let p = self.path;
        Ok(match dtype {
            DType::F32 => ActBuffer::F32(decode_le(p, name, data, f32::from_le_bytes)?),
            DType::F16 => ActBuffer::F16(decode_le(p, name, data, half::f16::from_le_bytes)?),
            DType::BF16 => ActBuffer::BF16(decode_le(p, name, data, half::bf16::from_le_bytes)?),
        })
    }

    fn act(
        &self,
        name: &'static str,
        expected: &[Option<usize>],
        dtype: Option<DType>,
    ) -> Result<(ActBuffer, Vec<usize>), CaseError> {
        let t = self.tensor(name)?;
        let shape = self.shape(name, &t, expected)?;
        let got = self.act_dtype(name, &t, dtype)?;
        Ok((self.decode_act(name, got, t.data())?, shape))
    }

    /// `data` cut into `steps` equal slices, one per step (the tensor's leading extent).
    fn step_bytes<'d>(&self, name: &'static str, data: &'d [u8], steps: usize) -> Result<Vec<&'d [u8]>, CaseError> {
        if steps == 0 || data.len() % steps != 0 {
            return Err(self.bad(name, format!("{} bytes do not split into {steps} steps", data.len())));
        }
        let per = data.len() / steps;
        Ok((0..steps).map(|s| &data[s * per..(s + 1) * per]).collect())
    }

    /// An activation tensor `[S, ...]` as one buffer per step, decoded step by step (one copy of
    /// the file's bytes, as [`Reader::act`]).
    fn act_steps(
        &self,
        name: &'static str,
        expected: &[Option<usize>],
        dtype: Option<DType>,
    ) -> Result<(Vec<ActBuffer>, Vec<usize>), CaseError> {
        let t = self.tensor(name)?;
        let shape = self.shape(name, &t, expected)?;
        let got = self.act_dtype(name, &t, dtype)?;
        let steps = self
            .step_bytes(name, t.data(), shape.first().copied().unwrap_or(0))?
            .into_iter()
            .map(|b| self.decode_act(name, got, b))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((steps, shape))
    }

    /// An f32 tensor `[S, ...]` as one vector per step.
    fn f32s_steps(&self, name: &'static str, expected: &[Option<usize>]) -> Result<Vec<Vec<f32>>, CaseError> {
        let t = self.tensor(name)?;
        let shape = self.shape(name, &t, expected)?;
        if t.dtype() != Dtype::F32 {
            return Err(self.bad(name, format!("dtype {:?}, expected F32", t.dtype())));
        }
        self.step_bytes(name, t.data(), shape.first().copied().unwrap_or(0))?
            .into_iter()
            .map(|b| decode_le(self.path, name, b, f32::from_le_bytes))
            .collect()
    }
}

fn meta<'m>(path: &Path, m: &'m HashMap<String, String>, key: &'static str) -> Result<&'m str, CaseError> {
    m.get(key).map(String::as_str).ok_or_else(|| CaseError::Metadata {
        path: path.to_path_buf(),
        key,
        msg: "missing".into(),
    })
}

fn meta_parse<T: std::str::FromStr>(
    path: &Path,
    m: &HashMap<String, String>,
    key: &'static str,
) -> Result<T, CaseError> {
    let s = meta(path, m, key)?;
    s.parse().map_err(|_| CaseError::Metadata {
        path: path.to_path_buf(),
        key,
        msg: format!("cannot parse '{}'", escape_untrusted(s)),
    })
}

/// Reads and checks a case file ([`read_case_file`], then [`parse`]).
pub fn load(path: &Path) -> Result<Case, CaseError> {
    let bytes = read_case_file(path)?;
    parse(path, &bytes)
}

/// Checks the bytes of a case file (named `path` in errors) and builds the case: every tensor
/// of the op with consistent shapes and dtypes, metadata parsed, tolerances finite, sizes within
/// the limits the run needs. Runs no kernel.
pub fn parse(path: &Path, bytes: &[u8]) -> Result<Case, CaseError> {
    let not_st = |e: safetensors::SafeTensorError| CaseError::NotSafetensors {
        path: path.to_path_buf(),
        // Tensor names in these messages come from the file.
        msg: escape_untrusted(&format!("{e:?}")).into_owned(),
    };
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(not_st)?;
    let m = header.metadata().clone().unwrap_or_default();
    let format = m.get("format").cloned();
    if format.as_deref() != Some(FORMAT) {
        return Err(CaseError::Format {
            path: path.to_path_buf(),
            found: format,
        });
    }
    let op_name = meta(path, &m, "op")?;
    let op = Op::parse(op_name).ok_or_else(|| CaseError::Metadata {
        path: path.to_path_buf(),
        key: "op",
        msg: format!("unknown op '{}'", escape_untrusted(op_name)),
    })?;
    let variant: Variant = meta_parse::<String>(path, &m, "variant")?
        .parse()
        .map_err(|msg: String| CaseError::Metadata {
            path: path.to_path_buf(),
            key: "variant",
            msg: escape_untrusted(&msg).into_owned(),
        })?;
    let scale: f32 = meta_parse(path, &m, "scale")?;
    let qk_l2norm: bool = meta_parse(path, &m, "qk_l2norm")?;
    // Optional (absent: the softplus gate); the library's rule, its words.
    let gate_form = match m.contains_key("lower_bound") {
        false => GateForm::Softplus,
        true => GateForm::from_lower_bound(meta_parse(path, &m, "lower_bound")?).map_err(|e| CaseError::Metadata {
            path: path.to_path_buf(),
            key: "lower_bound",
            msg: e.to_string(),
        })?,
    };
    if variant == Variant::Gdn && gate_form != GateForm::Softplus {
        return Err(CaseError::Metadata {
            path: path.to_path_buf(),
            key: "lower_bound",
            msg: format!("{}: the safe gate is KDA's, this case is GDN", gate_form.lower_bound()),
        });
    }
    let tolerance = Tolerance {
        atol: meta_parse(path, &m, "atol")?,
        rtol: meta_parse(path, &m, "rtol")?,
    };
    // A NaN or infinite tolerance would pass any error.
    tolerance.validate().map_err(|e| CaseError::Metadata {
        path: path.to_path_buf(),
        key: e.name,
        msg: e.to_string(),
    })?;
    // The ring's cache length: D's, or VB's (whose 2 T bound the gates check when it runs).
    let max_len = match op {
        Op::Decode => Some(replayssm::limits::MAX_CACHE_LEN),
        Op::VerifyBufferedSteps => Some(replayssm::limits::MAX_BUFFERED_CACHE_LEN),
        _ => None,
    };
    let cache_len = match max_len {
        Some(max) => {
            let l: usize = meta_parse(path, &m, "cache_len")?;
            if l == 0 || l > max {
                return Err(CaseError::Metadata {
                    path: path.to_path_buf(),
                    key: "cache_len",
                    msg: format!("{l} is outside 1..={max}"),
                });
            }
            Some(l)
        }
        None => None,
    };

    let st = SafeTensors::deserialize(bytes).map_err(not_st)?;
    let r = Reader { path, st };
    if op.has_steps() {
        let case = parse_steps(&r, variant, scale, qk_l2norm, gate_form, tolerance)?;
        return Ok(Case { op, cache_len, ..case });
    }
    let (q, qs) = r.act("q", &[None, None, None], None)?;
    let dtype = q.dtype();
    let (n, h, kd) = (qs[0], qs[1], qs[2]);
    let (k, _) = r.act("k", &[Some(n), Some(h), Some(kd)], Some(dtype))?;
    let (v, vs) = r.act("v", &[Some(n), None, None], Some(dtype))?;
    let (hv, vd) = (vs[1], vs[2]);
    let dims = HeadDims { h, hv, k: kd, v: vd };
    dims.validate().map_err(|e| r.bad("v", e.to_string()))?;
    let gw = dims.gate_width(variant);
    let gate_shape: Vec<Option<usize>> = match variant {
        Variant::Gdn => vec![Some(n), Some(hv)],
        Variant::Kda => vec![Some(n), Some(hv), Some(kd)],
    };
    let precomputed = r.has("g") || r.has("beta");
    check_gate_form(path, precomputed, gate_form)?;
    let gate = if precomputed {
        GateData::Precomputed {
            g: r.f32s("g", &gate_shape)?,
            beta: r.f32s("beta", &[Some(n), Some(hv)])?,
        }
    } else {
        let dt_shape: Vec<Option<usize>> = if gw == 1 {
            vec![Some(hv)]
        } else {
            vec![Some(hv), Some(kd)]
        };
        GateData::Raw {
            a: r.act("a", &gate_shape, Some(dtype))?.0,
            b: r.act("b", &[Some(n), Some(hv)], Some(dtype))?.0,
            a_log: r.f32s("A_log", &[Some(hv)])?,
            dt_bias: r.f32s("dt_bias", &dt_shape)?,
            form: gate_form,
        }
    };
    let cu_seqlens = r.i32s("cu_seqlens", &[None])?;
    let requests = cu_seqlens.len().saturating_sub(1);
    if requests == 0 {
        return Err(r.bad("cu_seqlens", "needs at least 2 entries".into()));
    }
    // Before anything is sized from it: cu_seqlens must describe exactly the N tokens of q.
    let (_, max_len) =
        replayssm::checks::check_seqlens(&cu_seqlens, n).map_err(|e| r.bad("cu_seqlens", e.to_string()))?;
    // Before the run sizes its ring by requests x window: the verify kernel's window limit.
    if matches!(op, Op::Verify | Op::Fold) && max_len > MAX_VERIFY_WINDOW {
        return Err(r.bad(
            "cu_seqlens",
            format!("a request has {max_len} tokens; verify and fold take at most {MAX_VERIFY_WINDOW} per request"),
        ));
    }
    if let Some(l) = cache_len {
        let bytes = decode_ring_bytes(dims, variant, requests, decode_ring_len(l, max_len));
        if bytes > MAX_DECODE_RING_BYTES {
            return Err(CaseError::Limit {
                path: path.to_path_buf(),
                what: "the decode ring (bytes: requests x records x record size)",
                value: bytes,
                limit: MAX_DECODE_RING_BYTES,
            });
        }
    }
    let state_shape = [Some(requests), Some(hv), Some(vd), Some(kd)];
    let state = r.f32s("state_in", &state_shape)?;
    let expected_o = r.f32s("o", &[Some(n), Some(hv), Some(vd)])?;
    let expected_state = if matches!(op, Op::Verify | Op::VerifyTree) && !r.has("state_out") {
        None
    } else {
        Some(r.f32s("state_out", &state_shape)?)
    };
    let accept = if op == Op::Fold {
        let a = r.i32s("accept", &[Some(requests)])?;
        for (i, &n) in a.iter().enumerate() {
            let len = cu_seqlens[i + 1] - cu_seqlens[i];
            if n < 0 || n > len {
                return Err(r.bad(
                    "accept",
                    format!("accept[{i}] = {n} outside 0..={len} (the request's window)"),
                ));
            }
        }
        Some(a)
    } else {
        None
    };
    let tree = if matches!(op, Op::VerifyTree | Op::FoldTree) {
        let parent = r.i32s("parent", &[Some(n)])?;
        Some(DraftTree::new(parent, &cu_seqlens).map_err(|e| r.bad("parent", e.to_string()))?)
    } else {
        None
    };
    let accept_path = match (&tree, op) {
        (Some(tree), Op::FoldTree) => {
            let t = r.tensor("accept_path")?;
            let width = r.shape("accept_path", &t, &[Some(requests), None])?[1];
            let paths = r.i32s("accept_path", &[Some(requests), Some(width)])?;
            Some(AcceptedPaths::new(tree, paths, width).map_err(|e| r.bad("accept_path", e.to_string()))?)
        }
        _ => None,
    };
    Ok(Case {
        path: path.to_path_buf(),
        op,
        tolerance,
        data: RecurrentData {
            variant,
            dims,
            dtype,
            q,
            k,
            v,
            gate,
            cu_seqlens,
            slots: (0..requests as i32).collect(),
            state,
            scale,
            qk_l2norm,
        },
        expected_o,
        expected_state,
        accept,
        tree,
        accept_path,
        cache_len,
        steps: None,
    })
}

/// The tensors of a `verify_fold_steps` case: `q`, `k`, `v` and the per-token gate tensors with a
/// leading step extent S (1..=[`MAX_CASE_STEPS`]; `A_log`, `dt_bias` shared), `cu_seqlens [R+1]`
/// (every step's windows, each 1..=[`MAX_VERIFY_WINDOW`] tokens), `state_in`, `accept [S, R]`
/// i32 (0..=the request's window), `o [S, N, HV, V]` and `state_out` (required).
/// A `lower_bound` forms `g` from a raw gate: with a precomputed one it would be ignored.
fn check_gate_form(path: &Path, precomputed: bool, form: GateForm) -> Result<(), CaseError> {
    if precomputed && form != GateForm::Softplus {
        return Err(CaseError::Metadata {
            path: path.to_path_buf(),
            key: "lower_bound",
            msg: format!(
                "{}: the safe gate is formed from a raw gate (a, b, A_log, dt_bias), this case has g and beta",
                form.lower_bound()
            ),
        });
    }
    Ok(())
}

fn parse_steps(
    r: &Reader<'_>,
    variant: Variant,
    scale: f32,
    qk_l2norm: bool,
    gate_form: GateForm,
    tolerance: Tolerance,
) -> Result<Case, CaseError> {
    let path = r.path;
    let qt = r.tensor("q")?;
    let qs = r.shape("q", &qt, &[None, None, None, None])?;
    let (steps, n, h, kd) = (qs[0], qs[1], qs[2], qs[3]);
    // S is bounded before anything is sized from it.
    if steps == 0 {
        return Err(r.bad(
            "q",
            "the leading (step) extent is 0; a verify_fold_steps case has at least 1 step".into(),
        ));
    }
    if steps > MAX_CASE_STEPS {
        return Err(CaseError::Limit {
            path: path.to_path_buf(),
            what: "steps (the leading extent of q)",
            value: steps as u64,
            limit: MAX_CASE_STEPS as u64,
        });
    }
    // N >= 1 also bounds the per-step copies of A_log and dt_bias below by the size of `a`.
    if n == 0 {
        return Err(r.bad(
            "q",
            "no tokens per step; every step verifies at least one token per request".into(),
        ));
    }
    let dtype = r.act_dtype("q", &qt, None)?;
    let s = Some(steps);
    let (q, _) = r.act_steps("q", &[s, Some(n), Some(h), Some(kd)], Some(dtype))?;
    let (k, _) = r.act_steps("k", &[s, Some(n), Some(h), Some(kd)], Some(dtype))?;
    let (v, vs) = r.act_steps("v", &[s, Some(n), None, None], Some(dtype))?;
    let (hv, vd) = (vs[2], vs[3]);
    let dims = HeadDims { h, hv, k: kd, v: vd };
    dims.validate().map_err(|e| r.bad("v", e.to_string()))?;
    let cu_seqlens = r.i32s("cu_seqlens", &[None])?;
    let requests = cu_seqlens.len().saturating_sub(1);
    if requests == 0 {
        return Err(r.bad("cu_seqlens", "needs at least 2 entries".into()));
    }
    let (_, max_len) =
        replayssm::checks::check_seqlens(&cu_seqlens, n).map_err(|e| r.bad("cu_seqlens", e.to_string()))?;
    // The deferred ring holds two windows of at most V's limit.
    if max_len > MAX_VERIFY_WINDOW {
        return Err(r.bad(
            "cu_seqlens",
            format!("a request has {max_len} tokens; verify_fold_steps takes at most {MAX_VERIFY_WINDOW} per request and step"),
        ));
    }
    if let Some(i) = cu_seqlens.windows(2).position(|w| w[1] == w[0]) {
        return Err(r.bad(
            "cu_seqlens",
            format!("request {i} has no tokens; every step verifies at least one per request"),
        ));
    }
    let gw = dims.gate_width(variant);
    let gate_shape: Vec<Option<usize>> = match variant {
        Variant::Gdn => vec![s, Some(n), Some(hv)],
        Variant::Kda => vec![s, Some(n), Some(hv), Some(kd)],
    };
    let precomputed = r.has("g") || r.has("beta");
    check_gate_form(path, precomputed, gate_form)?;
    let gates: Vec<GateData> = if precomputed {
        let g = r.f32s_steps("g", &gate_shape)?;
        let beta = r.f32s_steps("beta", &[s, Some(n), Some(hv)])?;
        g.into_iter()
            .zip(beta)
            .map(|(g, beta)| GateData::Precomputed { g, beta })
            .collect()
    } else {
        let dt_shape: Vec<Option<usize>> = if gw == 1 {
            vec![Some(hv)]
        } else {
            vec![Some(hv), Some(kd)]
        };
        let (a, _) = r.act_steps("a", &gate_shape, Some(dtype))?;
        let (b, _) = r.act_steps("b", &[s, Some(n), Some(hv)], Some(dtype))?;
        let a_log = r.f32s("A_log", &[Some(hv)])?;
        let dt_bias = r.f32s("dt_bias", &dt_shape)?;
        // Model parameters, the same every step: each window carries its own copy.
        a.into_iter()
            .zip(b)
            .map(|(a, b)| GateData::Raw {
                a,
                b,
                a_log: a_log.clone(),
                dt_bias: dt_bias.clone(),
                form: gate_form,
            })
            .collect()
    };
    let state_shape = [Some(requests), Some(hv), Some(vd), Some(kd)];
    let state = r.f32s("state_in", &state_shape)?;
    let expected_o = r.f32s("o", &[s, Some(n), Some(hv), Some(vd)])?;
    let expected_state = r.f32s("state_out", &state_shape)?;
    let accept = r.i32s("accept", &[s, Some(requests)])?;
    for (i, &a) in accept.iter().enumerate() {
        let (step, req) = (i / requests, i % requests);
        let len = cu_seqlens[req + 1] - cu_seqlens[req];
        if !(0..=len).contains(&a) {
            return Err(r.bad(
                "accept",
                format!("accept[{step}][{req}] = {a} outside 0..={len} (request {req}'s window)"),
            ));
        }
    }
    let slots: Vec<i32> = (0..requests as i32).collect();
    let window = |q, k, v, gate, state| RecurrentData {
        variant,
        dims,
        dtype,
        q,
        k,
        v,
        gate,
        cu_seqlens: cu_seqlens.clone(),
        slots: slots.clone(),
        state,
        scale,
        qk_l2norm,
    };
    let mut windows = q.into_iter().zip(k).zip(v).zip(gates);
    let (((q0, k0), v0), g0) = windows.next().ok_or_else(|| r.bad("q", "no step".into()))?;
    let data = window(q0, k0, v0, g0, state);
    let rest = windows
        .map(|(((q, k), v), gate)| window(q, k, v, gate, Vec::new()))
        .collect();
    Ok(Case {
        path: path.to_path_buf(),
        op: Op::VerifyFoldSteps,
        tolerance,
        data,
        expected_o,
        expected_state: Some(expected_state),
        accept: None,
        tree: None,
        accept_path: None,
        cache_len: None,
        steps: Some(Steps { rest, accept }),
    })
}

/// The ring length a decode case runs with: its `cache_len` L, but at most one more than the
/// longest request. A ring longer than `steps + 1` is never reached (the periodic flush comes at
/// record L - 1, after `steps` tokens at most `steps - 1`), so the run is the same, flushes
/// included, without allocating records no token can fill.
pub fn decode_ring_len(cache_len: usize, steps: usize) -> usize {
    cache_len.min(steps.saturating_add(1)).max(1)
}

/// Bytes of the one-layer decode ring of `slots` slots with `len` records each (f32 `d`, `k`,
/// `g`; see [`replayssm::state::decode_ring::DecodeRing`]).
pub fn decode_ring_bytes(dims: HeadDims, variant: Variant, slots: usize, len: usize) -> u64 {
    let per_record = (dims.hv as u64)
        .saturating_mul(dims.v as u64)
        .saturating_add((dims.h as u64).saturating_mul(dims.k as u64))
        .saturating_add((dims.hv as u64).saturating_mul(dims.gate_width(variant) as u64));
    (slots as u64)
        .saturating_mul(len as u64)
        .saturating_mul(per_record)
        .saturating_mul(4)
}

/// Runs a case on `backend` and compares with its expected tensors: `recurrent` through kernel
/// R, `verify` through kernel V (ring written), `fold` through V then F with `accept`, `decode`
/// through kernel D one token per request and step (then materialised), `verify_tree` through VT
/// (ring written), `fold_tree` through VT then FT with `accept_path`, and `verify_fold_steps`
/// through VF and the commit per step, then a flush of every request.
pub fn run(case: &Case, backend: Backend) -> Result<CaseReport, CaseError> {
    let d = case.data.dims;
    let n = case.data.num_tokens();
    let mut o = ActBuffer::nan(case.data.dtype, n * d.hv * d.v);
    let mut state = case.data.state.clone();
    let run_err = |source| CaseError::Run {
        path: case.path.clone(),
        source,
    };
    match case.op {
        Op::Recurrent => {
            let mut out = RecurrentOutputs {
                o: o.dense_mut(n, d.hv * d.v),
                state: &mut state[..],
                write_state: true,
                snapshots: None,
            };
            recurrent(backend, &case.data.inputs(), &mut out).map_err(run_err)?;
        }
        Op::Verify | Op::Fold | Op::VerifyTree | Op::FoldTree => {
            let requests = case.data.cu_seqlens.len() - 1;
            let window = case
                .data
                .cu_seqlens
                .windows(2)
                .map(|w| (w[1] - w[0]) as usize)
                .max()
                .unwrap_or(1)
                .max(1);
            let cfg = resolve(&EngineFlags::spec_ring(case.data.variant)).map_err(|e| run_err(e.into()))?;
            let mut pool = CheckpointPool::new(&cfg, d, 1, requests).map_err(run_err)?;
            pool.state_mut().copy_from_slice(&case.data.state);
            let mut ring = SpecRing::for_pool(&pool, window, case.data.dtype, case.data.qk_l2norm).map_err(run_err)?;
            let inp = case.data.inputs();
            let mut ov = o.dense_mut(n, d.hv * d.v);
            verify(backend, &inp, case.tree.as_ref(), &pool, 0, &mut ov, Some(&mut ring)).map_err(run_err)?;
            if let Some(accept) = &case.accept {
                fold(backend, &mut pool, &ring, &case.data.slots, accept, None).map_err(run_err)?;
            }
            if let Some(paths) = &case.accept_path {
                fold(backend, &mut pool, &ring, &case.data.slots, paths, None).map_err(run_err)?;
            }
            state = pool.state().to_vec();
        }
        Op::Decode => {
            let steps = case
                .data
                .cu_seqlens
                .windows(2)
                .map(|w| (w[1] - w[0]).max(0) as usize)
                .max()
                .unwrap_or(0);
            let l = decode_ring_len(case.cache_len.unwrap_or(1), steps);
            let res = crate::sequence::decode_sequence(backend, &case.data, l, None, |_, _, _| {}).map_err(run_err)?;
            o = res.o;
            state = res.state;
        }
        Op::VerifyFoldSteps => {
            let steps = case.steps.as_ref().ok_or_else(|| CaseError::MissingTensor {
                path: case.path.clone(),
                name: "accept",
            })?;
            let (outs, s) = run_steps(&case.data, steps, backend).map_err(run_err)?;
            // Each step's outputs, widened (exact) to compare as one tensor.
            o = ActBuffer::F32(outs);
            state = s;
        }
        Op::VerifyBufferedSteps => {
            let (steps, l) = case
                .steps
                .as_ref()
                .zip(case.cache_len)
                .ok_or_else(|| CaseError::MissingTensor {
                    path: case.path.clone(),
                    name: "accept",
                })?;
            // The reference backend has no device memory: it computes what VB must equal, the
            // outputs from the committed state and the state after every commit (the deferred
            // fold's reference path), after the gates accept the ring.
            let (outs, s) = match backend {
                Backend::Reference => check_buffered_ring(&case.data, l)
                    .and_then(|()| run_steps(&case.data, steps, backend))
                    .map_err(run_err)?,
                _ => run_buffered_steps(&case.data, steps, backend, l).map_err(run_err)?,
            };
            o = ActBuffer::F32(outs);
            state = s;
        }
    }
    let widen = |x: &[f32]| x.iter().map(|&v| v as f64).collect::<Vec<f64>>();
    Ok(CaseReport {
        o: compare(&o.to_f32(), &widen(&case.expected_o), case.tolerance),
        state_out: case
            .expected_state
            .as_ref()
            .map(|e| compare(&state, &widen(e), case.tolerance)),
    })
}

/// The deferred fold over a case's steps: per step VF then the commit of its accept lengths, then
/// a flush of every request. Returns every step's outputs (widened to f32) and the checkpoints.
fn run_steps(data: &RecurrentData, steps: &Steps, backend: Backend) -> replayssm::Result<(Vec<f32>, Vec<f32>)> {
    let d = data.dims;
    let n = data.num_tokens();
    let (mut pool, window, requests) = steps_pool(
        data,
        &EngineFlags {
            linear_replayssm_spec_deferred_fold: true,
            ..EngineFlags::spec_ring(data.variant)
        },
    )?;
    let mut dring = DeferredRing::for_pool(&pool, window, data.dtype, data.qk_l2norm)?;
    let row = d.hv * d.v;
    let mut outs = Vec::with_capacity(steps.count() * n * row);
    for (s, w) in std::iter::once(data).chain(&steps.rest).enumerate() {
        let accept = steps.accept_of(s, requests)?;
        let mut o = ActBuffer::nan(data.dtype, n * row);
        verify_fold(
            backend,
            &w.inputs(),
            &mut pool,
            0,
            &mut o.dense_mut(n, row),
            &mut dring,
            None,
        )?;
        outs.extend(o.to_f32());
        dring.commit(&data.slots, accept)?;
    }
    crate::staged::defer_flush(backend, &mut pool, &mut dring, &data.slots)?;
    Ok((outs, pool.state().to_vec()))
}

/// The one-layer pool of a steps case (one slot per request, `state_in` in it) resolved from
/// `flags`, the case's draft window T (its longest request) and its request count.
fn steps_pool(data: &RecurrentData, flags: &EngineFlags) -> replayssm::Result<(CheckpointPool, usize, usize)> {
    let requests = data.cu_seqlens.len().saturating_sub(1);
    let window = data
        .cu_seqlens
        .windows(2)
        .map(|w| (w[1] - w[0]).max(0) as usize)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut pool = CheckpointPool::new(&resolve(flags)?, data.dims, 1, requests)?;
    if data.state.len() != pool.state().len() {
        return Err(replayssm::Error::Shape {
            tensor: "state_in",
            expected: format!("[{}] (requests x HV x V x K)", pool.state().len()),
            got: format!("[{}]", data.state.len()),
        });
    }
    pool.state_mut().copy_from_slice(&data.state);
    Ok((pool, window, requests))
}

/// The gates' resolution of the buffered speculative mode at cache length `cache_len` for the
/// case's longest window (L in 2 T..=64), and the error they name.
fn check_buffered_ring(data: &RecurrentData, cache_len: usize) -> replayssm::Result<()> {
    let t = data
        .cu_seqlens
        .windows(2)
        .map(|w| (w[1] - w[0]).max(0))
        .max()
        .unwrap_or(1)
        .max(1);
    match replayssm::limits::buffered_cache_len_outside(cache_len as i64, i64::from(t)) {
        Some(why) => Err(replayssm::Error::InvalidValue { what: "cache_len", why }),
        None => Ok(()),
    }
}

/// The buffered speculative verify over a case's steps on device memory and the backend's
/// stream: per step VB then the buffered commit of its accept lengths (flushing the rows whose
/// next window would not fit), then a flush of every request. Returns every step's outputs
/// (widened to f32) and the checkpoints.
fn run_buffered_steps(
    data: &RecurrentData,
    steps: &Steps,
    backend: Backend,
    cache_len: usize,
) -> replayssm::Result<(Vec<f32>, Vec<f32>)> {
    let d = data.dims;
    let n = data.num_tokens();
    // The gates refuse what VB cannot serve (L < 2 T, L past the ring's capacity).
    let (host, window, requests) = steps_pool(
        data,
        &EngineFlags {
            linear_replayssm_spec_buffered: true,
            linear_replayssm_cache_len: Some(cache_len as i64),
            ..EngineFlags::spec_ring(data.variant)
        },
    )?;
    let stream = Stream::new(backend)?;
    let mut pool = host.to_device(&stream)?;
    let mut bring = BufferedRing::for_pool(&pool, window, data.dtype, data.qk_l2norm)?;
    let slots = DeviceVec::from_host(&stream, &data.slots)?;
    let mut flush_lens = DeviceVec::<i32>::zeros(backend, requests)?;
    let row = d.hv * d.v;
    let mut outs = Vec::with_capacity(steps.count() * n * row);
    for (s, w) in std::iter::once(data).chain(&steps.rest).enumerate() {
        let accept = steps.accept_of(s, requests)?;
        let tokens = DeviceTokens::upload(&stream, &w.inputs())?;
        let mut o = DeviceAct::from_host(&stream, &ActBuffer::nan(data.dtype, n * row))?;
        stream.verify_buffered(&tokens.inputs(), &pool, 0, &mut o.view_mut(0, n, row, row), &mut bring)?;
        outs.extend(o.to_host(&stream)?.to_f32());
        let accept = DeviceVec::from_host(&stream, accept)?;
        stream.buffered_fold(
            &mut pool,
            &mut bring,
            slots.as_slice(),
            BufferedFold::Commit {
                accept_lens: accept.as_slice(),
            },
            flush_lens.as_mut_slice(),
        )?;
    }
    stream.buffered_fold(
        &mut pool,
        &mut bring,
        slots.as_slice(),
        BufferedFold::Flush,
        flush_lens.as_mut_slice(),
    )?;
    stream.check_errors()?;
    Ok((outs, pool.to_host(&stream)?.state().to_vec()))
}

/// What a written case asks for: its op with the op's extra inputs.
#[derive(Clone, Copy, Debug)]
pub enum CaseKind<'a> {
    Recurrent,
    Verify,
    /// Tokens committed per request.
    Fold {
        accept: &'a [i32],
    },
    /// Buffered decode with cache length L (1..=[`replayssm::limits::MAX_CACHE_LEN`]).
    Decode {
        cache_len: usize,
    },
    VerifyTree {
        tree: &'a DraftTree,
    },
    FoldTree {
        tree: &'a DraftTree,
        accepted: &'a AcceptedPaths,
    },
    /// The deferred fold over steps: `data` is step 0, `rest` the windows of steps 1.. (same
    /// requests, dims, dtype, gate kind and gate parameters; their state and slots are not used),
    /// `accept` `[S, R]` row-major.
    VerifyFoldSteps {
        rest: &'a [RecurrentData],
        accept: &'a [i32],
    },
    /// The buffered speculative verify over the same steps, cache length `cache_len` (2 T..=64).
    VerifyBufferedSteps {
        rest: &'a [RecurrentData],
        accept: &'a [i32],
        cache_len: usize,
    },
}

impl CaseKind<'_> {
    pub fn op(&self) -> Op {
        match self {
            CaseKind::Recurrent => Op::Recurrent,
            CaseKind::Verify => Op::Verify,
            CaseKind::Fold { .. } => Op::Fold,
            CaseKind::Decode { .. } => Op::Decode,
            CaseKind::VerifyTree { .. } => Op::VerifyTree,
            CaseKind::FoldTree { .. } => Op::FoldTree,
            CaseKind::VerifyFoldSteps { .. } => Op::VerifyFoldSteps,
            CaseKind::VerifyBufferedSteps { .. } => Op::VerifyBufferedSteps,
        }
    }
}

/// Writes a case whose expected tensors come from the f64 reference: `recurrent` and `decode`
/// (state after all tokens; `decode` also records `cache_len`), `verify` (outputs; `state_out`
/// = the unchanged checkpoint), `fold` (outputs, and the state after `accept[r]` tokens),
/// `verify_tree` (outputs along each node's root path; unchanged checkpoint), `fold_tree`
/// (tree outputs, and the state after replaying each accepted path) or `verify_fold_steps`
/// (every step's outputs and the state after every step's commit: V then F per step, the
/// checkpoint kept in f32 between steps as the pool keeps it).
pub fn write_case(path: &Path, kind: CaseKind<'_>, data: &RecurrentData, tolerance: Tolerance) -> std::io::Result<()> {
    let op = kind.op();
    let invalid = |why: String| std::io::Error::other(format!("cannot write op {}: {why}", op.name()));
    match kind {
        CaseKind::VerifyFoldSteps { rest, accept } => {
            return write_steps(path, op, None, data, rest, accept, tolerance).map_err(invalid)
        }
        CaseKind::VerifyBufferedSteps {
            rest,
            accept,
            cache_len,
        } => return write_steps(path, op, Some(cache_len), data, rest, accept, tolerance).map_err(invalid),
        _ => {}
    }
    let requests = data.cu_seqlens.len() - 1;
    match kind {
        CaseKind::Fold { accept } if accept.len() != requests => {
            return Err(invalid(format!(
                "accept has {} entries for {requests} requests",
                accept.len()
            )))
        }
        CaseKind::Fold { accept } => {
            // The expected state is the snapshot after accept[r] tokens: it must exist.
            for (r, (&a, w)) in accept.iter().zip(data.cu_seqlens.windows(2)).enumerate() {
                let len = w[1] - w[0];
                if !(0..=len).contains(&a) {
                    return Err(invalid(format!(
                        "accept[{r}] = {a} is outside 0..={len} (request {r}'s tokens)"
                    )));
                }
            }
        }
        CaseKind::Decode { cache_len } if !(1..=replayssm::limits::MAX_CACHE_LEN).contains(&cache_len) => {
            return Err(invalid(format!(
                "cache_len {cache_len} outside 1..={}",
                replayssm::limits::MAX_CACHE_LEN
            )))
        }
        CaseKind::VerifyTree { tree } | CaseKind::FoldTree { tree, .. } => {
            tree.check_matches(&data.cu_seqlens)
                .map_err(|e| invalid(e.to_string()))?;
            if let CaseKind::FoldTree { accepted, .. } = kind {
                if accepted.lens().len() != requests {
                    return Err(invalid(format!(
                        "accept_path has {} rows for {requests} requests",
                        accepted.lens().len()
                    )));
                }
            }
        }
        _ => {}
    }
    let d = data.dims;
    let n = data.num_tokens();
    // The case file's pool is one slot per request, in request order.
    let per_slot = d.state_elems();
    let mut pool = vec![0f32; requests * per_slot];
    if let Some(r) = data.slots.iter().position(|&s| s < 0) {
        return Err(invalid(format!("request {r} is null (slot -1): case files have none")));
    }
    for (r, &slot) in data.slots.iter().enumerate() {
        pool[r * per_slot..(r + 1) * per_slot]
            .copy_from_slice(&data.state[slot as usize * per_slot..(slot as usize + 1) * per_slot]);
    }
    let mut local = data.clone();
    local.state = pool;
    local.slots = (0..requests as i32).collect();
    let inp = local.inputs();
    let res = replayssm::reference::recurrent::<f64>(&inp, &local.state);
    let ckpt = |r: usize| &local.state[r * per_slot..(r + 1) * per_slot];
    let (o, state_out): (Vec<f32>, Vec<f32>) = match kind {
        CaseKind::VerifyTree { tree } | CaseKind::FoldTree { tree, .. } => {
            let o = replayssm::reference::tree_outputs::<f64>(&inp, tree.parent(), &local.state);
            let state = match kind {
                CaseKind::FoldTree { accepted, .. } => (0..requests)
                    .flat_map(|r| replayssm::reference::path_state::<f64>(&inp, r, accepted.path(r), ckpt(r)))
                    .map(|x| x as f32)
                    .collect(),
                _ => local.state.clone(),
            };
            (o.iter().map(|&x| x as f32).collect(), state)
        }
        CaseKind::Verify => (res.o.iter().map(|&x| x as f32).collect(), local.state.clone()),
        CaseKind::Fold { accept } => {
            // The state after accept[r] tokens: the snapshot at step accept[r] - 1.
            let state = (0..requests)
                .flat_map(|r| {
                    let n = accept[r] as usize;
                    let snaps = res.snapshots[r].as_ref().expect("live request");
                    if n == 0 {
                        ckpt(r).iter().map(|&x| x as f64).collect::<Vec<f64>>()
                    } else {
                        snaps[(n - 1) * per_slot..n * per_slot].to_vec()
                    }
                })
                .map(|x| x as f32)
                .collect();
            (res.o.iter().map(|&x| x as f32).collect(), state)
        }
        CaseKind::VerifyFoldSteps { .. } | CaseKind::VerifyBufferedSteps { .. } => {
            unreachable!("written by write_steps above")
        }
        CaseKind::Recurrent | CaseKind::Decode { .. } => (
            res.o.iter().map(|&x| x as f32).collect(),
            res.final_state
                .iter()
                .flat_map(|s| s.clone().expect("live request"))
                .map(|x| x as f32)
                .collect(),
        ),
    };

    let act = data.dtype;
    let gw = d.gate_width(data.variant);
    let gate_shape = if gw == 1 { vec![n, d.hv] } else { vec![n, d.hv, d.k] };
    let mut tensors: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = vec![
        (
            "q".into(),
            st_dtype(act),
            vec![n, d.h, d.k],
            local.q.as_bytes().to_vec(),
        ),
        (
            "k".into(),
            st_dtype(act),
            vec![n, d.h, d.k],
            local.k.as_bytes().to_vec(),
        ),
        (
            "v".into(),
            st_dtype(act),
            vec![n, d.hv, d.v],
            local.v.as_bytes().to_vec(),
        ),
        (
            "cu_seqlens".into(),
            Dtype::I32,
            vec![requests + 1],
            bytes_of(&local.cu_seqlens).to_vec(),
        ),
        (
            "state_in".into(),
            Dtype::F32,
            vec![requests, d.hv, d.v, d.k],
            bytes_of(&local.state).to_vec(),
        ),
        ("o".into(), Dtype::F32, vec![n, d.hv, d.v], bytes_of(&o).to_vec()),
        (
            "state_out".into(),
            Dtype::F32,
            vec![requests, d.hv, d.v, d.k],
            bytes_of(&state_out).to_vec(),
        ),
    ];
    match kind {
        CaseKind::Fold { accept } => {
            tensors.push(("accept".into(), Dtype::I32, vec![requests], bytes_of(accept).to_vec()));
        }
        CaseKind::VerifyTree { tree } => {
            tensors.push(("parent".into(), Dtype::I32, vec![n], bytes_of(tree.parent()).to_vec()));
        }
        CaseKind::FoldTree { tree, accepted } => {
            tensors.push(("parent".into(), Dtype::I32, vec![n], bytes_of(tree.parent()).to_vec()));
            tensors.push((
                "accept_path".into(),
                Dtype::I32,
                vec![requests, accepted.width()],
                bytes_of(accepted.as_slice()).to_vec(),
            ));
        }
        _ => {}
    }
    match &local.gate {
        GateData::Raw {
            a, b, a_log, dt_bias, ..
        } => {
            tensors.push(("a".into(), st_dtype(act), gate_shape, a.as_bytes().to_vec()));
            tensors.push(("b".into(), st_dtype(act), vec![n, d.hv], b.as_bytes().to_vec()));
            tensors.push(("A_log".into(), Dtype::F32, vec![d.hv], bytes_of(a_log).to_vec()));
            let dt_shape = if gw == 1 { vec![d.hv] } else { vec![d.hv, d.k] };
            tensors.push(("dt_bias".into(), Dtype::F32, dt_shape, bytes_of(dt_bias).to_vec()));
        }
        GateData::Precomputed { g, beta } => {
            tensors.push(("g".into(), Dtype::F32, gate_shape, bytes_of(g).to_vec()));
            tensors.push(("beta".into(), Dtype::F32, vec![n, d.hv], bytes_of(beta).to_vec()));
        }
    }
    let cache_len = match kind {
        CaseKind::Decode { cache_len } => Some(cache_len),
        _ => None,
    };
    save(path, op, data, tolerance, tensors, cache_len)
}

/// The safetensors dtype of an activation dtype.
fn st_dtype(t: DType) -> Dtype {
    match t {
        DType::F32 => Dtype::F32,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
    }
}

/// A tensor to write: name, dtype, shape, little-endian bytes.
type Tensor = (String, Dtype, Vec<usize>, Vec<u8>);

/// Writes `tensors` with the case metadata of `op` and `data`.
fn save(
    path: &Path,
    op: Op,
    data: &RecurrentData,
    tolerance: Tolerance,
    tensors: Vec<Tensor>,
    cache_len: Option<usize>,
) -> std::io::Result<()> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(name, dt, shape, bytes)| {
            (
                name.clone(),
                TensorView::new(*dt, shape.clone(), bytes).expect("consistent tensor"),
            )
        })
        .collect();
    let mut metadata: HashMap<String, String> = [
        ("format", FORMAT.to_string()),
        ("op", op.name().to_string()),
        ("variant", data.variant.name().to_string()),
        ("scale", format!("{:e}", data.scale)),
        ("qk_l2norm", data.qk_l2norm.to_string()),
        ("atol", format!("{:e}", tolerance.atol)),
        ("rtol", format!("{:e}", tolerance.rtol)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Some(l) = cache_len {
        metadata.insert("cache_len".into(), l.to_string());
    }
    if let GateData::Raw {
        form: GateForm::Bounded(b),
        ..
    } = data.gate
    {
        metadata.insert("lower_bound".into(), format!("{:e}", b.get()));
    }
    let bytes = safetensors::serialize(views, &Some(metadata)).map_err(|e| std::io::Error::other(format!("{e:?}")))?;
    std::fs::write(path, bytes)
}

/// The bytes of `bufs` one after the other (a `[S, ...]` tensor from its steps).
fn concat(bufs: impl Iterator<Item = impl AsRef<[u8]>>) -> Vec<u8> {
    let mut out = Vec::new();
    for b in bufs {
        out.extend_from_slice(b.as_ref());
    }
    out
}

/// [`write_case`] of `verify_fold_steps` and `verify_buffered_steps` (`op`, with its cache length):
/// checks that the steps fit together (the reader's rules), then writes the f64 reference of V
/// then F per step. Errors say why, without the op.
fn write_steps(
    path: &Path,
    op: Op,
    cache_len: Option<usize>,
    data: &RecurrentData,
    rest: &[RecurrentData],
    accept: &[i32],
    tolerance: Tolerance,
) -> Result<(), String> {
    let requests = data.cu_seqlens.len().saturating_sub(1);
    let steps = rest.len() + 1;
    if steps > MAX_CASE_STEPS {
        return Err(format!("{steps} steps, over the limit of {MAX_CASE_STEPS}"));
    }
    if requests == 0 {
        return Err("cu_seqlens has no request".into());
    }
    if accept.len() != steps * requests {
        return Err(format!(
            "accept has {} entries for {steps} steps x {requests} requests",
            accept.len()
        ));
    }
    let lens: Vec<i32> = data.cu_seqlens.windows(2).map(|w| w[1] - w[0]).collect();
    for (r, &len) in lens.iter().enumerate() {
        if len < 1 || len as usize > MAX_VERIFY_WINDOW {
            return Err(format!(
                "request {r} has {len} tokens per step, outside 1..={MAX_VERIFY_WINDOW} (the verify window)"
            ));
        }
    }
    for (i, &a) in accept.iter().enumerate() {
        let (s, r) = (i / requests, i % requests);
        if !(0..=lens[r]).contains(&a) {
            return Err(format!(
                "accept[{s}][{r}] = {a} is outside 0..={} (request {r}'s window)",
                lens[r]
            ));
        }
    }
    if let Some(r) = data.slots.iter().position(|&s| s < 0) {
        return Err(format!("request {r} is null (slot -1): case files have none"));
    }
    for (i, w) in rest.iter().enumerate() {
        let same_gate = match (&data.gate, &w.gate) {
            (
                GateData::Raw {
                    a_log, dt_bias, form, ..
                },
                GateData::Raw {
                    a_log: l,
                    dt_bias: b,
                    form: f,
                    ..
                },
            ) => a_log == l && dt_bias == b && form == f,
            (GateData::Precomputed { .. }, GateData::Precomputed { .. }) => true,
            _ => false,
        };
        let same = w.variant == data.variant
            && w.dims == data.dims
            && w.dtype == data.dtype
            && w.cu_seqlens == data.cu_seqlens
            && w.scale.to_bits() == data.scale.to_bits()
            && w.qk_l2norm == data.qk_l2norm
            && same_gate;
        if !same {
            return Err(format!(
                "step {}'s window differs from step 0's in variant, dims, dtype, cu_seqlens, scale, qk_l2norm, gate kind or A_log/dt_bias/lower_bound",
                i + 1
            ));
        }
    }
    let d = data.dims;
    let n = data.num_tokens();
    let per_slot = d.state_elems();
    // One slot per request, in request order, as every case file.
    let mut state = vec![0f32; requests * per_slot];
    for (r, &slot) in data.slots.iter().enumerate() {
        let at = slot as usize * per_slot;
        let src = data
            .state
            .get(at..at + per_slot)
            .ok_or_else(|| format!("request {r}'s slot {slot} is outside the state"))?;
        state[r * per_slot..(r + 1) * per_slot].copy_from_slice(src);
    }
    let state_in = state.clone();
    let local_slots: Vec<i32> = (0..requests as i32).collect();
    let mut o: Vec<f32> = Vec::with_capacity(steps * n * d.hv * d.v);
    for (s, w) in std::iter::once(data).chain(rest).enumerate() {
        let mut inp = w.inputs();
        inp.slots = &local_slots;
        // V: the outputs from the checkpoint; F: the checkpoint after accept[s][r] tokens (the
        // snapshot at accept - 1), stored in f32 as the pool stores it.
        let res = replayssm::reference::recurrent::<f64>(&inp, &state);
        o.extend(res.o.iter().map(|&x| x as f32));
        for r in 0..requests {
            let a = accept[s * requests + r] as usize;
            if a == 0 {
                continue;
            }
            let snaps = res.snapshots[r].as_ref().ok_or("a null request")?;
            let snap = &snaps[(a - 1) * per_slot..a * per_slot];
            for (x, &y) in state[r * per_slot..(r + 1) * per_slot].iter_mut().zip(snap) {
                *x = y as f32;
            }
        }
    }
    let all = || std::iter::once(data).chain(rest);
    let act = st_dtype(data.dtype);
    let gw = d.gate_width(data.variant);
    let gate_shape = if gw == 1 {
        vec![steps, n, d.hv]
    } else {
        vec![steps, n, d.hv, d.k]
    };
    let mut tensors: Vec<Tensor> = vec![
        (
            "q".into(),
            act,
            vec![steps, n, d.h, d.k],
            concat(all().map(|w| w.q.as_bytes())),
        ),
        (
            "k".into(),
            act,
            vec![steps, n, d.h, d.k],
            concat(all().map(|w| w.k.as_bytes())),
        ),
        (
            "v".into(),
            act,
            vec![steps, n, d.hv, d.v],
            concat(all().map(|w| w.v.as_bytes())),
        ),
        (
            "cu_seqlens".into(),
            Dtype::I32,
            vec![requests + 1],
            bytes_of(&data.cu_seqlens).to_vec(),
        ),
        (
            "state_in".into(),
            Dtype::F32,
            vec![requests, d.hv, d.v, d.k],
            bytes_of(&state_in).to_vec(),
        ),
        (
            "accept".into(),
            Dtype::I32,
            vec![steps, requests],
            bytes_of(accept).to_vec(),
        ),
        ("o".into(), Dtype::F32, vec![steps, n, d.hv, d.v], bytes_of(&o).to_vec()),
        (
            "state_out".into(),
            Dtype::F32,
            vec![requests, d.hv, d.v, d.k],
            bytes_of(&state).to_vec(),
        ),
    ];
    match &data.gate {
        GateData::Raw { a_log, dt_bias, .. } => {
            let raw = |pick: fn(&GateData) -> &[u8]| concat(all().map(|w| pick(&w.gate)));
            let a = raw(|g| match g {
                GateData::Raw { a, .. } => a.as_bytes(),
                GateData::Precomputed { .. } => &[],
            });
            let b = raw(|g| match g {
                GateData::Raw { b, .. } => b.as_bytes(),
                GateData::Precomputed { .. } => &[],
            });
            tensors.push(("a".into(), act, gate_shape, a));
            tensors.push(("b".into(), act, vec![steps, n, d.hv], b));
            tensors.push(("A_log".into(), Dtype::F32, vec![d.hv], bytes_of(a_log).to_vec()));
            let dt_shape = if gw == 1 { vec![d.hv] } else { vec![d.hv, d.k] };
            tensors.push(("dt_bias".into(), Dtype::F32, dt_shape, bytes_of(dt_bias).to_vec()));
        }
        GateData::Precomputed { .. } => {
            let pre = |pick: fn(&GateData) -> &[f32]| concat(all().map(|w| bytes_of(pick(&w.gate))));
            let g = pre(|g| match g {
                GateData::Precomputed { g, .. } => g,
                GateData::Raw { .. } => &[],
            });
            let beta = pre(|g| match g {
                GateData::Precomputed { beta, .. } => beta,
                GateData::Raw { .. } => &[],
            });
            tensors.push(("g".into(), Dtype::F32, gate_shape, g));
            tensors.push(("beta".into(), Dtype::F32, vec![steps, n, d.hv], beta));
        }
    }
    save(path, op, data, tolerance, tensors, cache_len).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::WorkloadSpec;

    #[test]
    fn a_decode_ring_cut_to_the_tokens_runs_the_same_as_the_full_one() {
        assert_eq!(decode_ring_len(65_536, 7), 8);
        assert_eq!(decode_ring_len(4, 7), 4);
        assert_eq!(decode_ring_len(1, 0), 1);
        let spec = WorkloadSpec {
            variant: Variant::Gdn,
            dims: HeadDims {
                h: 1,
                hv: 2,
                k: 32,
                v: 8,
            },
            dtype: DType::F32,
            seqlens: vec![5, 2, 7],
            null_requests: vec![],
            spare_slots: 0,
            raw_gate: true,
            gate_form: replayssm::GateForm::Softplus,
            qk_l2norm: true,
        };
        let data = RecurrentData::random(&spec, 3);
        let run = |l| crate::sequence::decode_sequence(Backend::Emulated, &data, l, None, |_, _, _| {}).unwrap();
        // L = 64 is never reached by 7 tokens; neither is L = 8 (no periodic flush either way).
        let (full, cut) = (run(64), run(decode_ring_len(64, 7)));
        assert_eq!(full.o.to_f32(), cut.o.to_f32());
        assert_eq!(full.state, cut.state);
        assert_eq!((full.flushes, full.steps), (cut.flushes, cut.steps));
        // The bytes bound the case reader checks: 3 slots x 8 records x (2*8 + 1*32 + 2) f32.
        assert_eq!(decode_ring_bytes(spec.dims, Variant::Gdn, 3, 8), 3 * 8 * 50 * 4);
    }
}
