//! What one block of a kernel executes, counted from its SASS: warp-instructions, shared-memory /
//! shuffle (MIO) cycles, state bytes requested before the first wait on them, and dependent
//! global round trips. Control flow is not simulated; the rules below weight each instruction
//! by how often the block runs it, and are the model's assumptions (bench/README.md, "The model").

use super::sass::{Cfg, Function, Instr};

/// How a kernel's code repeats per block (from its design; the SASS says where the code is).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Repeats {
    /// Times a loop that holds state arithmetic (FFMA) runs: the positions, records or tokens.
    pub per_position_loop: f64,
    /// Straight-line code after the first state load holds `unrolled` positions of which the
    /// block runs `executed` (V default and VF unroll the window to its 16-position maximum).
    pub unrolled: Option<(f64, f64)>,
    /// The kernel streams its rows in passes: the loop with the most FFMA runs this many times
    /// and holds `unrolled` positions (staged VF), instead of `per_position_loop`.
    pub passes: Option<f64>,
    /// With `passes`, the positions go by in chunks (staged V): the loop holding the
    /// reduce-scatter (the most FFMA among loops with shuffles) runs `passes x chunks` times, the
    /// loop around it `passes` times, and a loop with FFMA after it (the per-row solve) holds
    /// `unrolled` positions once.
    pub chunks: Option<f64>,
    /// With `chunks`, the kernel also applies a history of this many records (VB), in two
    /// regions. Before the pass loop, the code after staged V's window barriers
    /// ([`WINDOW_BARRIERS`]): an outermost loop runs `history / 4` times (a warp's share of the
    /// records, or a staging copy of 4 loads per thread over K = 128 channels or rows; KDA's
    /// per-channel decay sum, `history` per thread, is undercounted 4x) and a loop inside one
    /// `chunks` times (the window's chunks). After the passes, the first row loop (the per-row
    /// history pass, before the solve's): once, its chunk loop `chunks` times, its record loop
    /// `history` times.
    pub history: Option<f64>,
}

/// Barriers staged V's window code takes before its passes (verify_tree_ok 1, build_window 3,
/// stage_window_tile 1): VB's history staging starts after them.
pub const WINDOW_BARRIERS: usize = 5;

/// One block's counts, per warp (every warp of a row-tiled block runs the same code).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    /// Warp-instructions on the hot path, whole block lifetime.
    pub instructions: f64,
    /// The part of `instructions` from the first state load on (the state loop).
    pub hot_instructions: f64,
    /// MIO cycles (shared memory by width, shuffles) on the hot path.
    pub mio_cycles: f64,
    pub hot_mio_cycles: f64,
    /// Dependent global round trips before the first state load is issued.
    pub trips_before_state: f64,
    /// Dependent global round trips over the block's lifetime.
    pub trips: f64,
    /// State bytes one warp has requested before it first waits on any of them.
    pub state_bytes_in_flight: f64,
    /// Instructions in the listing (all paths), for reference.
    pub listing: usize,
}

/// MIO cycles of one warp-instruction: shared-memory accesses move 128 bytes per cycle (a 32-bit
/// access of 32 lanes is one cycle, a 128-bit one four), a shuffle is one cycle.
pub fn mio_cycles(ins: &Instr) -> f64 {
    let op = ins.opcode.as_str();
    if op.starts_with("LDS") || op.starts_with("STS") || op.starts_with("LDSM") || op.starts_with("ATOMS") {
        (32.0 * f64::from(ins.access_bytes()) / 128.0).max(1.0)
    } else if op.starts_with("SHFL") {
        1.0
    } else {
        0.0
    }
}

/// Index of the first global load `state_width` bytes wide per lane (the state rows).
fn first_state_load(instrs: &[Instr], state_width: u32) -> Option<usize> {
    instrs
        .iter()
        .position(|i| i.is_global_load() && i.access_bytes() == state_width)
}

/// Index of the last global access of the state's width (the last state store or load).
fn last_state_access(instrs: &[Instr], state_width: u32) -> Option<usize> {
    instrs
        .iter()
        .rposition(|i| (i.is_global_load() || i.opcode.starts_with("STG")) && i.access_bytes() == state_width)
}

/// Blocks on some path entry -> first state load -> last state access: the path every live
/// block takes. Paths that skip a request (zero its outputs and exit) are left out. When the last
/// state access is a load (a kernel that never writes the state), the work after it is the
/// block's too: every block reachable from it.
fn hot_blocks(cfg: &Cfg, from: usize, to: usize, after_last: bool) -> Vec<bool> {
    let n = cfg.blocks.len();
    let mut pred = vec![vec![]; n];
    for (u, ss) in cfg.succ.iter().enumerate() {
        for &v in ss {
            pred[v].push(u);
        }
    }
    let reach = |start: usize, edges: &Vec<Vec<usize>>| {
        let mut seen = vec![false; n];
        let mut work = vec![start];
        seen[start] = true;
        while let Some(u) = work.pop() {
            for &v in &edges[u] {
                if !seen[v] {
                    seen[v] = true;
                    work.push(v);
                }
            }
        }
        seen
    };
    let (from_entry, to_first) = (reach(0, &cfg.succ), reach(from, &pred));
    let (from_first, to_last) = (reach(from, &cfg.succ), reach(to, &pred));
    let from_last = reach(to, &cfg.succ);
    (0..n)
        .map(|b| (from_entry[b] && to_first[b]) || (from_first[b] && to_last[b]) || (after_last && from_last[b]))
        .collect()
}

/// The prologue: the path from the entry to the first state load with the fewest dependent
/// round trips (then the fewest instructions), loops taken once and skipped where the code can
/// skip them. Its instructions, MIO cycles and round trips, and the blocks on it.
///
/// The compiler emits several versions of a scan (unrolled by 16, by 4, the remainder) of which a
/// block runs some; counting every version once would charge the block for all of them. The
/// shortest path is the small-batch case (a scan of at most one entry per lane); a longer scan
/// costs about one more round trip per two entries a lane reads (the loads are issued in pairs).
fn prologue(ins: &[Instr], cfg: &Cfg, first: usize) -> (f64, f64, f64, Vec<usize>) {
    let n = cfg.blocks.len();
    let target = cfg.blocks.partition_point(|&(s, _)| s <= first) - 1;
    // Best (trips, instructions, mio, pending loads, path) reaching each block's start; blocks
    // are in address order and nvcc's loops branch backwards, so forward edges form a DAG.
    type State = (f64, f64, f64, Vec<u32>, Vec<usize>);
    let mut best: Vec<Option<State>> = vec![None; n];
    best[0] = Some((0.0, 0.0, 0.0, vec![], vec![]));
    for b in 0..=target {
        let Some((mut trips, mut count, mut mio, mut pending, mut path)) = best[b].clone() else {
            continue;
        };
        path.push(b);
        let (s, e) = cfg.blocks[b];
        let end = if b == target { first } else { e };
        for x in &ins[s..end] {
            count += 1.0;
            mio += mio_cycles(x);
            let srcs = x.src_regs();
            if pending.iter().any(|r| srcs.contains(r)) {
                trips += 1.0;
                pending.clear();
            }
            let dests = x.dest_regs();
            pending.retain(|r| !dests.contains(r));
            if x.is_global_load() {
                pending.extend(dests);
            }
        }
        if b == target {
            return (trips, count, mio, path);
        }
        for &v in &cfg.succ[b] {
            if v <= b || v > target {
                continue;
            }
            let better = best[v].as_ref().is_none_or(|o| (trips, count) < (o.0, o.1));
            if better {
                best[v] = Some((trips, count, mio, pending.clone(), path.clone()));
            }
        }
    }
    (0.0, 0.0, 0.0, vec![])
}

/// Counts one block of `f`; `state_width` is the bytes per lane of one state access
/// (16 at K >= 128, 8 at K = 64, 4 at K = 32).
pub fn count(f: &Function, state_width: u32, repeats: Repeats) -> Option<Counts> {
    count_traced(f, state_width, repeats, None)
}

/// [`count`], writing into `trace` every hot block with its weight and every round trip
/// (`replayssm model --explain`).
pub fn count_traced(
    f: &Function,
    state_width: u32,
    repeats: Repeats,
    mut trace: Option<&mut Vec<String>>,
) -> Option<Counts> {
    let ins = &f.instrs;
    let cfg = Cfg::build(ins);
    let block_of_instr = |i: usize| cfg.blocks.partition_point(|&(s, _)| s <= i) - 1;
    let first = first_state_load(ins, state_width)?;
    let last = last_state_access(ins, state_width)?;
    let hot = hot_blocks(
        &cfg,
        block_of_instr(first),
        block_of_instr(last),
        ins[last].is_global_load(),
    );
    let ffma = |b: usize| {
        let (s, e) = cfg.blocks[b];
        ins[s..e].iter().filter(|i| i.opcode.starts_with("FFMA")).count()
    };
    let loop_ffma: Vec<usize> = cfg.loops.iter().map(|l| l.iter().map(|&b| ffma(b)).sum()).collect();
    let shuffles = |b: usize| {
        let (s, e) = cfg.blocks[b];
        ins[s..e].iter().filter(|i| i.opcode.starts_with("SHFL")).count()
    };
    // Chunked passes: the chunk loop (most FFMA among loops with shuffles, innermost on ties,
    // inside the innermost loop that loads state rows where there is one: the window build's
    // loops can hold more FFMA, KDA's per-channel decays) and the smallest loop strictly around it.
    let loads_state = |b: usize| {
        let (s, e) = cfg.blocks[b];
        ins[s..e]
            .iter()
            .any(|i| i.is_global_load() && i.access_bytes() == state_width)
    };
    let state_loop = (0..cfg.loops.len())
        .filter(|&l| cfg.loops[l].iter().any(|&b| loads_state(b)))
        .min_by_key(|&l| cfg.loops[l].len());
    let chunk_loop = repeats.chunks.and_then(|_| {
        (0..cfg.loops.len())
            .filter(|&l| cfg.loops[l].iter().any(|&b| shuffles(b) > 0))
            .filter(|&l| state_loop.is_none_or(|p| p != l && cfg.loops[p].is_superset(&cfg.loops[l])))
            .max_by_key(|&l| (loop_ffma[l], std::cmp::Reverse(cfg.loops[l].len())))
    });
    let around_chunks = chunk_loop.and_then(|c| {
        (0..cfg.loops.len())
            .filter(|&l| l != c && cfg.loops[l].is_superset(&cfg.loops[c]) && cfg.loops[l].len() > cfg.loops[c].len())
            .min_by_key(|&l| cfg.loops[l].len())
    });
    let after_passes = around_chunks.map_or(usize::MAX, |l| cfg.loops[l].iter().copied().max().unwrap_or(0));
    let pass_loop = match repeats.chunks {
        Some(_) => around_chunks,
        None => repeats
            .passes
            .and_then(|_| (0..cfg.loops.len()).max_by_key(|&l| (loop_ffma[l], std::cmp::Reverse(l)))),
    };
    // A loop inside another (strictly smaller block set), and where the pass loop starts.
    let nested = |l: usize| {
        (0..cfg.loops.len())
            .any(|o| o != l && cfg.loops[o].is_superset(&cfg.loops[l]) && cfg.loops[o].len() > cfg.loops[l].len())
    };
    let holds_loops = |l: usize| {
        (0..cfg.loops.len())
            .any(|i| i != l && cfg.loops[l].is_superset(&cfg.loops[i]) && cfg.loops[l].len() > cfg.loops[i].len())
    };
    let pass_start = pass_loop.map_or(0, |l| cfg.loops[l].iter().copied().min().unwrap_or(0));
    // VB's history regions: from the block after the window's barriers to the pass loop, and
    // the first outermost loop after the passes.
    let barrier_blocks: Vec<usize> = (0..cfg.blocks.len())
        .filter(|&b| {
            let (s, e) = cfg.blocks[b];
            ins[s..e].iter().any(|i| i.opcode.starts_with("BAR.SYNC"))
        })
        .collect();
    let history_start = barrier_blocks.get(WINDOW_BARRIERS - 1).map_or(usize::MAX, |&b| b + 1);
    let history_pass = (0..cfg.loops.len())
        .filter(|&l| !nested(l) && cfg.loops[l].iter().all(|&b| b > after_passes))
        .min_by_key(|&l| cfg.loops[l].iter().copied().min().unwrap_or(usize::MAX));
    let in_history_pass = |b: usize| history_pass.is_some_and(|l| cfg.loops[l].contains(&b));
    let unrolled = repeats.unrolled.map_or(1.0, |(of, run)| run / of);
    // Per-position code starts after the last state load (every row is requested first).
    let rows_loaded = ins
        .iter()
        .rposition(|i| i.is_global_load() && i.access_bytes() == state_width)
        .map_or(0, block_of_instr);

    // Weight of each block: the product of its loops' repeats, and the unrolled fraction.
    let weight: Vec<f64> = (0..cfg.blocks.len())
        .map(|b| {
            let mut w = 1.0;
            let mut in_loop = false;
            for l in cfg.loops_of(b) {
                in_loop = true;
                if let Some(chunks) = repeats.chunks {
                    if Some(l) == chunk_loop {
                        w *= chunks;
                    } else if Some(l) == pass_loop {
                        w *= repeats.passes.unwrap_or(1.0);
                    } else if let Some(h) = repeats.history.filter(|_| in_history_pass(b)) {
                        // The per-row history pass: the row loop once, chunks, records.
                        if nested(l) {
                            w *= if holds_loops(l) { chunks } else { h };
                        }
                    } else if loop_ffma[l] >= 1 && b > after_passes {
                        w *= unrolled;
                    } else if let Some(h) = repeats.history.filter(|_| b >= history_start && b < pass_start) {
                        w *= if nested(l) { chunks } else { h / 4.0 };
                    }
                } else if Some(l) == pass_loop {
                    w *= repeats.passes.unwrap_or(1.0) * unrolled;
                } else if loop_ffma[l] >= 1 && pass_loop.is_none() {
                    w *= repeats.per_position_loop;
                }
            }
            if !in_loop && repeats.passes.is_none() && b > rows_loaded {
                w *= unrolled;
            }
            w
        })
        .collect();

    let (pro_trips, pro_instructions, pro_mio, pro_path) = prologue(ins, &cfg, first);
    let mut c = Counts {
        listing: ins.len(),
        instructions: pro_instructions,
        mio_cycles: pro_mio,
        trips_before_state: pro_trips,
        trips: pro_trips,
        ..Counts::default()
    };
    if let Some(t) = trace.as_deref_mut() {
        t.push(format!(
            "prologue (entry to the first state load, fewest round trips): blocks {pro_path:?}, \
             {pro_instructions} instructions, {pro_mio} MIO cycles, {pro_trips} round trips"
        ));
    }
    // Registers whose global load has not been waited for yet, with the weight of the block that
    // issued it: a wait inside a loop on a load issued before the loop happens once, not per trip.
    let mut pending: Vec<(u32, f64)> = vec![];
    let mut waited_after_state = false;
    for (b, &(s, e)) in cfg.blocks.iter().enumerate() {
        if !hot[b] {
            continue;
        }
        let w = weight[b];
        if let Some(t) = trace.as_deref_mut() {
            let loops: Vec<usize> = cfg.loops_of(b).collect();
            t.push(format!(
                "block {b} /*{:04x}*/..{} instructions, weight {w:.3}, loops {loops:?}",
                ins[s].addr,
                e - s
            ));
        }
        for (i, x) in ins.iter().enumerate().take(e).skip(s) {
            // The prologue is counted on its own path above; here its loads are only tracked.
            let after = i >= first;
            if after {
                c.instructions += w;
                c.mio_cycles += w * mio_cycles(x);
                c.hot_instructions += w;
                c.hot_mio_cycles += w * mio_cycles(x);
            }
            let srcs = x.src_regs();
            let waited = pending
                .iter()
                .filter(|(r, _)| srcs.contains(r))
                .map(|&(_, issued)| issued)
                .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
            if let Some(issued) = waited {
                // In-order issue: this warp stalls until the loads arrive (they were all issued
                // before, so they arrive together: one round trip).
                let n = if after { w.min(issued) } else { 0.0 };
                c.trips += n;
                if let (true, Some(t)) = (after, trace.as_deref_mut()) {
                    t.push(format!(
                        "  trip x{n:.3} at /*{:04x}*/ {} {}",
                        x.addr, x.opcode, x.operands
                    ));
                }
                if after {
                    waited_after_state = true;
                }
                pending.clear();
            }
            let dests = x.dest_regs();
            pending.retain(|(r, _)| !dests.contains(r));
            if x.is_global_load() {
                pending.extend(dests.iter().map(|&r| (r, w)));
                if after && !waited_after_state && x.access_bytes() == state_width {
                    c.state_bytes_in_flight += 32.0 * f64::from(state_width);
                }
            }
        }
    }
    // A block that never waits on the state after loading it still waits at its end.
    if !waited_after_state {
        c.trips += 1.0;
    }
    Some(c)
}

#[cfg(test)]
mod tests {
    use super::super::sass::parse;
    use super::*;

    const LISTING: &str = "\
\t\tFunction : _ZN4rssm11fold_kernelILi4E13__nv_bfloat16Lb0ELb1EEEv16rssm_fold_params
        /*0000*/                   LDG.E R2, desc[UR4][R4.64] ;
        /*0010*/                   LDG.E R3, desc[UR4][R2.64] ;
        /*0020*/                   ISETP.GE.AND P0, PT, R3, 0x1, PT ;
        /*0030*/               @P0 BRA 0x100 ;
        /*0040*/                   LDG.E.128 R8, desc[UR4][R6.64] ;
        /*0050*/                   LDG.E.128 R12, desc[UR4][R6.64+0x200] ;
        /*0060*/                   FFMA R8, R8, R9, R10 ;
        /*0070*/                   SHFL.BFLY PT, R3, R8, 0x1, 0x1f ;
        /*0080*/                   LDS.128 R16, [R3] ;
        /*0090*/               @P1 BRA 0x60 ;
        /*00a0*/                   STG.E.128 desc[UR4][R6.64], R8 ;
        /*00b0*/                   EXIT ;
        /*0100*/                   STG.E desc[UR4][R6.64], RZ ;
        /*0110*/                   EXIT ;
";

    /// Staged V's shape: a pass loop around a chunk loop (FFMA and a shuffle), then the per-row
    /// solve (a loop with FFMA) after the passes.
    const CHUNKED: &str = "\
\t\tFunction : _ZN4rssm20verify_staged_kernelILi4E13__nv_bfloat16Lb0EEEv18rssm_verify_params
        /*0000*/                   LDG.E.128 R8, desc[UR4][R6.64] ;
        /*0010*/                   IADD3 R1, R1, 0x1, RZ ;
        /*0020*/                   FFMA R8, R8, R9, R10 ;
        /*0030*/                   SHFL.BFLY PT, R3, R8, 0x1, 0x1f ;
        /*0040*/               @P1 BRA 0x20 ;
        /*0050*/                   LDG.E.128 R12, desc[UR4][R6.64+0x200] ;
        /*0060*/               @P2 BRA 0x10 ;
        /*0070*/                   FFMA R8, R8, R9, R10 ;
        /*0080*/               @P3 BRA 0x70 ;
        /*0090*/                   STG.E.128 desc[UR4][R6.64], R8 ;
        /*00a0*/                   EXIT ;
";

    #[test]
    fn chunked_passes_weigh_the_chunk_loop_the_pass_loop_and_the_solve() {
        let f = &parse(CHUNKED)[0];
        let r = Repeats {
            per_position_loop: 4.0,
            unrolled: Some((16.0, 4.0)),
            passes: Some(8.0),
            chunks: Some(1.0),
            history: None,
        };
        let c = count(f, 16, r).expect("state accesses");
        // Entry 1, pass loop header 1 x 8, chunk loop 3 x 8 x 1, the rest of the pass 2 x 8,
        // the solve 2 x 4/16, the store and exit 2.
        assert_eq!(c.instructions, 1.0 + 8.0 + 24.0 + 16.0 + 0.5 + 2.0);
        // Two chunks per pass: the chunk loop twice as often, nothing else moves.
        let c2 = count(f, 16, Repeats { chunks: Some(2.0), ..r }).expect("state accesses");
        assert_eq!(c2.instructions - c.instructions, 24.0);
        assert_eq!(c2.mio_cycles, 16.0);
    }

    #[test]
    fn a_block_is_counted_on_its_hot_path_with_its_loop_repeats() {
        let f = &parse(LISTING)[0];
        let r = Repeats {
            per_position_loop: 1.0,
            unrolled: None,
            passes: None,
            chunks: None,
            history: None,
        };
        let c = count(f, 16, r).expect("state accesses");
        // The skip path at 0x100 is not counted: 12 instructions.
        assert_eq!(c.instructions, 12.0);
        // The loop (FFMA, SHFL, LDS.128, BRA) is 4 instructions; 4 more at 4 repeats.
        let loop4 = Repeats {
            per_position_loop: 4.0,
            ..r
        };
        let c4 = count(f, 16, loop4).expect("state accesses");
        assert_eq!(c4.instructions, 24.0);
        // MIO: per repeat one shuffle + a 128-bit LDS (4 cycles).
        assert_eq!(c4.mio_cycles, 20.0);
        // The second load's address depends on the first (one trip), and the branch on the
        // second (another): two trips before the state load; then the FFMA waits on the state.
        assert_eq!(c.trips_before_state, 2.0);
        assert_eq!(c.trips, 3.0);
        // Two 16-byte loads per lane in flight before the first wait: 2 x 32 x 16 bytes.
        assert_eq!(c.state_bytes_in_flight, 1024.0);
    }
}
