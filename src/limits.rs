//! The limits the kernels are compiled for, read from the C header's defines
//! (`csrc/include/replayssm/replayssm.h`): the one list the checks, the gates, the C ABI and the
//! bindings all use, and the words of a range rule over them ([`outside`]).

use crate::ffi;

/// Longest verify window the V kernel is compiled for (`RSSM_MAX_VERIFY_WINDOW`).
pub const MAX_VERIFY_WINDOW: usize = ffi::RSSM_MAX_VERIFY_WINDOW as usize;
/// Most nodes of one draft tree (tree verify and path fold): one verify window.
pub const MAX_TREE_NODES: usize = MAX_VERIFY_WINDOW;
/// Longest buffered-decode ring, records per slot and layer (`RSSM_MAX_CACHE_LEN`).
pub const MAX_CACHE_LEN: usize = ffi::RSSM_MAX_CACHE_LEN as usize;
/// Longest spec ring of the buffered speculative mode (`RSSM_MAX_BUFFERED_CACHE_LEN`): VB stages
/// a slot's history in shared memory.
pub const MAX_BUFFERED_CACHE_LEN: usize = ffi::RSSM_MAX_BUFFERED_CACHE_LEN as usize;
/// Largest value head dim a launch accepts (`RSSM_MAX_V`).
pub const MAX_V: usize = ffi::RSSM_MAX_V as usize;
/// Most requests of one launch, and most value heads (`RSSM_MAX_BATCH`: a grid dimension).
pub const MAX_BATCH: usize = ffi::RSSM_MAX_BATCH as usize;

const HEAD_DIMS_MASK32: u32 = ffi::RSSM_HEAD_DIMS_MASK32;

/// Key head dims K the CUDA and emulated kernels are compiled for (`RSSM_HEAD_DIMS_MASK32`: bit i
/// is K = 32 (i + 1)), ascending.
pub const KERNEL_HEAD_DIMS: [usize; HEAD_DIMS_MASK32.count_ones() as usize] = {
    let mut out = [0usize; HEAD_DIMS_MASK32.count_ones() as usize];
    let (mut bit, mut i) = (0, 0);
    while bit < 32 {
        if HEAD_DIMS_MASK32 & (1 << bit) != 0 {
            out[i] = 32 * (bit + 1);
            i += 1;
        }
        bit += 1;
    }
    out
};

/// `name = v, must be in lo..=hi` when `v` is outside `lo..=hi`: the words of every range rule,
/// written once for the params checks (`checks::params`) and the capability gates (`config`),
/// which sit below the error type.
pub fn outside(name: &str, v: i64, lo: i64, hi: i64) -> Option<String> {
    (v < lo || v > hi).then(|| format!("{name} = {v}, must be in {lo}..={hi}"))
}

/// The decode ring's length rule (the A4 gate and the cursors' params): `1..=MAX_CACHE_LEN`.
pub fn cache_len_outside(cache_len: i64) -> Option<String> {
    outside("cache_len", cache_len, 1, MAX_CACHE_LEN as i64)
}

/// Why the buffered speculative mode refuses cache length `cache_len` (L) for draft windows of
/// `window` (T) tokens, or `None`: the cache-length rule, and L >= 2 T (a policy: below it the
/// history holds fewer than T records, so a commit of more than L - T tokens flushes, at L = T
/// every commit: V + F at more cost). The E7 gate and the kernels' checks word the same rule.
pub fn buffered_cache_len_outside(cache_len: i64, window: i64) -> Option<String> {
    outside("cache_len", cache_len, 1, MAX_BUFFERED_CACHE_LEN as i64)
        .map(|why| format!("{why} (the buffered speculative ring: VB stages a slot's history in shared memory)"))
        .or_else(|| {
            (cache_len < 2 * window).then(|| {
                format!(
                "cache_len = {cache_len} is below 2 T = {}: the buffered ring keeps room for a history of at least T \
                 records before the next window of T = {window} draft tokens (use --linear-replayssm-spec without \
                 buffering)",
                2 * window
            )
            })
        })
}

/// `true` when the kernels are compiled for key head dim `k`.
pub fn supported_head_dim(k: usize) -> bool {
    KERNEL_HEAD_DIMS.contains(&k)
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_header_mask_spells_the_compiled_head_dims() {
        assert_eq!(super::KERNEL_HEAD_DIMS, [32, 64, 96, 128, 256]);
        assert!(super::supported_head_dim(96) && !super::supported_head_dim(48) && !super::supported_head_dim(16));
        assert!(!super::supported_head_dim(160) && !super::supported_head_dim(512));
        assert_eq!(
            (super::MAX_VERIFY_WINDOW, super::MAX_CACHE_LEN, super::MAX_BATCH),
            (16, 65536, 65535)
        );
    }
}
