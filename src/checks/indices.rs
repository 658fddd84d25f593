//! The kernels' rules for the device-side index arrays (slots, cu_seqlens, accept lengths, tracks,
//! paths, positions, cursors), checked on the host wherever they are host memory (the Rust API
//! always; the C ABI on the EMULATED backend), where they are host memory the library can read
//! before launching. A refusal here writes nothing: the caller's state is bit-identical after it.
//! On CUDA the host never reads them (graph replay); the kernels apply the same rules and flag
//! the error word instead. The rules are the kernels' (`device/*.cuh`), row for row.

use crate::error::{Error, Result};

type Check = Result<()>;

fn bad(message: String) -> Error {
    Error::BadIndex(message)
}

/// `n` i32 of caller memory, in place when aligned, else read one element at a time (a C
/// caller's pointer need not be aligned for a Rust slice); `n` is bounded by the batch limits
/// checked before.
///
/// # Safety
/// `p` points to `n` readable i32 (the params' documented extent).
pub(crate) unsafe fn host_ints<'a>(p: *const i32, n: usize) -> std::borrow::Cow<'a, [i32]> {
    if (p as usize) % std::mem::align_of::<i32>() == 0 {
        // Aligned (every Rust caller, most C callers): read in place, no copy.
        std::borrow::Cow::Borrowed(std::slice::from_raw_parts(p, n))
    } else {
        std::borrow::Cow::Owned((0..n).map(|i| std::ptr::read_unaligned(p.add(i))).collect())
    }
}

/// Reads `slots [batch]` from caller memory and checks them with the Rust API's own rule
/// ([`crate::checks::check_slots`]: each in -1..num_slots, every live slot used by one row only,
/// since two rows on one slot would race on its state, ring or cursor).
///
/// # Safety
/// `p` points to `batch` readable i32.
pub(crate) unsafe fn live_slots<'a>(p: *const i32, batch: i32, num_slots: i32) -> Result<std::borrow::Cow<'a, [i32]>> {
    let slots = host_ints(p, batch as usize);
    crate::checks::check_slots(&slots, slots.len(), num_slots as usize)?;
    Ok(slots)
}

/// cu_seqlens `[batch + 1]` as the kernels read it: every request's tokens inside
/// 0..num_tokens, in order, at most `max_seqlen` of them, and every token in a request (from 0
/// to num_tokens: a token outside every request would get no output).
pub fn seqlens(cu: &[i32], num_tokens: i32, max_seqlen: i32) -> Check {
    for (r, w) in cu.windows(2).enumerate() {
        let (bos, eos) = (w[0], w[1]);
        if bos < 0 || eos < bos || eos > num_tokens {
            return Err(bad(format!(
                "cu_seqlens[{r}..={}] = {bos}..{eos}: a request's tokens must satisfy 0 <= cu_seqlens[r] <= cu_seqlens[r+1] <= num_tokens = {num_tokens}",
                r + 1
            )));
        }
        if eos - bos > max_seqlen {
            return Err(bad(format!(
                "request {r} has {} tokens (cu_seqlens[{r}..={}] = {bos}..{eos}), more than max_seqlen = {max_seqlen}",
                eos - bos,
                r + 1
            )));
        }
    }
    if let (Some(&first), Some(&last)) = (cu.first(), cu.last()) {
        if first != 0 || last != num_tokens {
            return Err(bad(format!(
                "cu_seqlens[0] = {first} and cu_seqlens[{}] = {last}: they must be 0 and num_tokens = {num_tokens} \
                 (a token outside every request would get no output)",
                cu.len() - 1
            )));
        }
    }
    Ok(())
}

/// Tree parents of every live request's window: `parent[bos + i]` in -1..i (parents precede
/// children; the kernel builds no tree for a null row).
pub fn parents(parent: &[i32], cu: &[i32], slots: &[i32]) -> Check {
    for (r, w) in cu.windows(2).enumerate() {
        if slots[r] < 0 {
            continue;
        }
        for i in 0..(w[1] - w[0]) as usize {
            let p = parent[w[0] as usize + i];
            if p < -1 || p >= i as i32 {
                return Err(bad(format!(
                    "parent[{}] = {p} (request {r}, node {i}) must be -1 (child of the checkpoint) or an earlier node 0..{i}",
                    w[0] as usize + i
                )));
            }
        }
    }
    Ok(())
}

/// Per-row lengths (`accept_lens`, `counts`) of live rows in 0..=window.
pub fn lengths(field: &str, lens: &[i32], slots: &[i32], window: i32) -> Check {
    for (b, (&n, &s)) in lens.iter().zip(slots).enumerate() {
        if s >= 0 && (n < 0 || n > window) {
            return Err(bad(format!(
                "{field}[{b}] = {n} is outside 0..={window} (the ring window)"
            )));
        }
    }
    Ok(())
}

/// Accepted paths `[batch, width]` of live rows: window positions, increasing, -1 padded.
/// Returns each row's length.
pub fn paths(paths: &[i32], width: usize, slots: &[i32], window: i32) -> Result<Vec<i32>> {
    let mut lens = vec![0; slots.len()];
    for (b, &s) in slots.iter().enumerate() {
        let row = &paths[b * width..(b + 1) * width];
        let n = row.iter().position(|&x| x == -1).unwrap_or(width);
        lens[b] = n as i32;
        if s < 0 {
            continue;
        }
        for (t, &x) in row[..n].iter().enumerate() {
            if x < 0 || x >= window || (t > 0 && x <= row[t - 1]) {
                return Err(bad(format!(
                    "accept_paths[{b}][{t}] = {x}: a path lists increasing window positions 0..{window}, then -1"
                )));
            }
        }
    }
    Ok(lens)
}

/// Tracks of a fold: a track slot (-1 = none) in range, distinct from every live slot and every
/// other track slot, on a live row whose track step lies in 0..n (n the steps it commits).
pub fn tracks(track_slots: &[i32], track_steps: &[i32], slots: &[i32], lens: &[i32], num_slots: i32) -> Check {
    // (track slot, row) sorted in a per-thread scratch buffer: a row's earlier twin by binary
    // search, no allocation once the buffer has grown to the batch.
    TRACKS.with(|cell| {
        let mut pairs = cell.borrow_mut();
        pairs.clear();
        pairs.extend(
            track_slots
                .iter()
                .enumerate()
                .filter(|(_, &t)| t != -1)
                .map(|(b, &t)| (t, b)),
        );
        pairs.sort_unstable();
        tracks_in_order(track_slots, track_steps, slots, lens, num_slots, &pairs)
    })
}

thread_local! {
    static TRACKS: std::cell::RefCell<Vec<(i32, usize)>> = const { std::cell::RefCell::new(Vec::new()) };
}

fn tracks_in_order(
    track_slots: &[i32],
    track_steps: &[i32],
    slots: &[i32],
    lens: &[i32],
    num_slots: i32,
    pairs: &[(i32, usize)],
) -> Check {
    for (b, (&ts, &step)) in track_slots.iter().zip(track_steps).enumerate() {
        if ts == -1 {
            continue;
        }
        if ts < -1 || ts >= num_slots {
            return Err(bad(format!(
                "track_slots[{b}] = {ts} is out of range: -1 (no track) or 0..{num_slots} (num_slots)"
            )));
        }
        if let Some(r) = slots.iter().position(|&s| s == ts) {
            return Err(bad(format!(
                "track_slots[{b}] = {ts} is also slots[{r}], a live checkpoint: a track slot must differ from every live slot"
            )));
        }
        let a = pairs[pairs.partition_point(|p| p.0 < ts)].1;
        if a < b {
            return Err(bad(format!(
                "track_slots[{a}] and track_slots[{b}] are both {ts}: track slots in one launch must be distinct"
            )));
        }
        let n = if slots[b] < 0 { 0 } else { lens[b] };
        if step < 0 || step >= n {
            return Err(bad(format!(
                "track_steps[{b}] = {step} is outside 0..{n}: row {b} commits {n} steps{} (set track_slots[{b}] = -1 when no snapshot is due)",
                if slots[b] < 0 { " (a null row)" } else { "" }
            )));
        }
    }
    Ok(())
}

/// Cursor snapshots (`positions`) or cursors of live rows in 0..cache_len.
pub fn positions(field: &str, values: &[i32], slots: &[i32], cache_len: i32) -> Check {
    for (b, (&m, &s)) in values.iter().zip(slots).enumerate() {
        if s >= 0 {
            position(field, b, m, s, cache_len)?;
        }
    }
    Ok(())
}

/// One live row's cursor `m` (row `b`, slot `s`) in 0..cache_len.
pub fn position(field: &str, b: usize, m: i32, s: i32, cache_len: i32) -> Check {
    if m < 0 || m >= cache_len {
        return Err(bad(format!(
            "{field}[{b}] = {m} (slot {s}) is outside 0..{cache_len} (cache_len)"
        )));
    }
    Ok(())
}

/// One live row's buffered history `h` (row `b`, slot `s`): it must leave room for a window of
/// `len` records after it in a ring of `cache_len` positions (`0..=cache_len - len`).
pub fn history(field: &str, b: usize, h: i32, s: i32, cache_len: i32, len: i32) -> Check {
    if h < 0 || h > cache_len - len {
        return Err(bad(format!(
            "{field}[{b}] = {h} (slot {s}) is outside 0..={} (cache_len {cache_len} - window {len}: the next \
             window must fit after the history)",
            cache_len - len
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(c: Check) -> String {
        c.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn each_rule_names_the_field_its_index_value_and_limit() {
        // SAFETY (live_slots): each array holds the batch given.
        let live = |s: &[i32]| msg(unsafe { live_slots(s.as_ptr(), s.len() as i32, 4) }.map(|_| ()));
        assert!(live(&[1, 1]).contains("slots[0] and slots[1] are both 1"));
        assert!(live(&[0, 4]).contains("slots[1] = 4 is out of range"));
        assert!(live(&[-1, -1, 2]).is_empty());
        assert!(msg(seqlens(&[0, 3, 2], 3, 4)).contains("cu_seqlens[1..=2] = 3..2"));
        assert!(msg(seqlens(&[1, 3], 3, 4)).contains("cu_seqlens[0] = 1"));
        assert!(msg(seqlens(&[0, 2], 3, 4)).contains("cu_seqlens[1] = 2"));
        assert!(seqlens(&[0, 2, 3], 3, 4).is_ok());
        assert!(msg(seqlens(&[0, 5], 5, 4)).contains("more than max_seqlen = 4"));
        assert!(msg(parents(&[-1, 1], &[0, 2], &[0])).contains("parent[1] = 1"));
        assert!(parents(&[-1, 1], &[0, 2], &[-1]).is_ok(), "a null row builds no tree");
        assert!(msg(lengths("accept_lens", &[2, 9], &[0, 1], 4)).contains("accept_lens[1] = 9 is outside 0..=4"));
        assert!(
            lengths("accept_lens", &[2, 9], &[0, -1], 4).is_ok(),
            "null rows' lengths are not read"
        );
        assert!(paths(&[0, 2, -1, 1, 0, -1], 3, &[0, 1], 4).is_err());
        assert_eq!(paths(&[0, 2, -1, 1, 3, -1], 3, &[0, 1], 4).ok(), Some(vec![2, 2]));
        let t = |ts: &[i32], st: &[i32]| msg(tracks(ts, st, &[1, 2], &[3, 0], 8));
        assert!(t(&[2, -1], &[0, -1]).contains("also slots[1]"));
        assert!(t(&[5, 5], &[0, 0]).contains("both 5"));
        assert!(t(&[5, -1], &[3, -1]).contains("track_steps[0] = 3 is outside 0..3"));
        assert!(t(&[-1, 5], &[-1, 0]).contains("row 1 commits 0 steps"));
        assert!(t(&[5, -1], &[2, -1]).is_empty());
        assert!(msg(positions("positions", &[0, 3], &[0, 1], 3)).contains("positions[1] = 3 (slot 1) is outside 0..3"));
    }
}
