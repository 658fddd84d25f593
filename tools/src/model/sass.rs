//! The compiled sm_90 code as the model reads it: `cuobjdump --dump-sass` text parsed into
//! kernels, instructions, basic blocks and natural loops.

use std::collections::BTreeSet;

/// One SASS instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instr {
    pub addr: u32,
    /// Guarded by a predicate (`@P0`, `@!P1`): may not execute, and a branch may fall through.
    pub predicated: bool,
    /// `LDG.E.128`, `FFMA`, ...
    pub opcode: String,
    /// Everything after the opcode, `R4, desc[UR6][R32.64+0x400]`.
    pub operands: String,
}

impl Instr {
    /// A branch's target address.
    pub fn target(&self) -> Option<u32> {
        if !self.opcode.starts_with("BRA") {
            return None;
        }
        let hex = self.operands.split("0x").nth(1)?;
        let digits: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
        u32::from_str_radix(&digits, 16).ok()
    }

    fn ends_block(&self) -> bool {
        ["BRA", "BRX", "EXIT", "RET", "JMP"]
            .iter()
            .any(|p| self.opcode.starts_with(p))
    }

    /// Whether control can reach the next instruction.
    fn falls_through(&self) -> bool {
        !self.ends_block() || self.predicated
    }

    /// Registers written (the first operand, except for stores, which only read).
    pub fn dest_regs(&self) -> Vec<u32> {
        if [
            "ST", "RED", "BAR", "BRA", "EXIT", "BSYNC", "BSSY", "WARPSYNC", "CALL", "RET",
        ]
        .iter()
        .any(|p| self.opcode.starts_with(p))
        {
            return vec![];
        }
        let first = self.operands.split(',').next().unwrap_or("");
        regs_of(first, self.width_regs())
    }

    /// Registers read.
    pub fn src_regs(&self) -> Vec<u32> {
        let skip_first = !self.dest_regs().is_empty();
        let mut out = vec![];
        for (i, op) in self.operands.split(',').enumerate() {
            if i == 0 && skip_first {
                continue;
            }
            // A store's data operand covers as many registers as the access is wide.
            let width = if self.opcode.starts_with("ST") && !op.contains('[') {
                self.width_regs()
            } else {
                1
            };
            out.extend(regs_of(op, width));
        }
        out
    }

    /// 32-bit registers one access of this instruction covers (`.128` = 4, `.64` = 2).
    fn width_regs(&self) -> u32 {
        if self.opcode.contains(".128") {
            4
        } else if self.opcode.contains(".64") {
            2
        } else {
            1
        }
    }

    /// A global-memory load whose result the warp waits for (`LDG`, generic `LD`, atomics with
    /// a result).
    pub fn is_global_load(&self) -> bool {
        self.opcode.starts_with("LDG") || self.opcode.starts_with("LD.") || self.opcode.starts_with("ATOMG")
    }

    /// Bytes one lane moves: `.128` 16, `.64` 8, `.U16`/`.S16` 2, `.U8` 1, else 4.
    pub fn access_bytes(&self) -> u32 {
        let o = &self.opcode;
        if o.contains(".128") {
            16
        } else if o.contains(".64") {
            8
        } else if o.contains("16") {
            2
        } else if o.contains("U8") || o.contains("S8") {
            1
        } else {
            4
        }
    }
}

/// `R12`, `R12.64` -> [12] or [12, 13]; `RZ`, `UR4`, `P0` -> [].
fn regs_of(operand: &str, width: u32) -> Vec<u32> {
    let mut out = vec![];
    let bytes = operand.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if bytes[i] == b'R' && boundary && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            let digits: String = operand[i + 1..].chars().take_while(char::is_ascii_digit).collect();
            let end = i + 1 + digits.len();
            if let Ok(r) = digits.parse::<u32>() {
                let pair = operand[end..].starts_with(".64");
                let n = if pair { width.max(2) } else { width };
                out.extend(r..r + n);
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// One kernel instantiation's code.
#[derive(Clone, Debug)]
pub struct Function {
    /// `verify_fold_kernel`.
    pub family: String,
    /// Template arguments as ptxas's demangled names print them: `4`, `__nv_bfloat16`, `false`.
    pub args: Vec<String>,
    pub instrs: Vec<Instr>,
}

/// `_ZN4rssm18verify_fold_kernelILi4E13__nv_bfloat16Lb0EEEv23rssm_verify_fold_params` ->
/// (`verify_fold_kernel`, [`4`, `__nv_bfloat16`, `false`]).
pub fn demangle(name: &str) -> Option<(String, Vec<String>)> {
    let rest = name.strip_prefix("_ZN4rssm")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let len: usize = digits.parse().ok()?;
    let family = rest.get(digits.len()..digits.len() + len)?.to_string();
    let mut s = rest.get(digits.len() + len..)?.strip_prefix('I')?;
    let mut args = vec![];
    while !s.starts_with('E') {
        if let Some(r) = s.strip_prefix("Li") {
            let n: String = r.chars().take_while(char::is_ascii_digit).collect();
            args.push(n.clone());
            s = r.get(n.len()..)?.strip_prefix('E')?;
        } else if let Some(r) = s.strip_prefix("Lb") {
            args.push(if r.starts_with('1') { "true" } else { "false" }.to_string());
            s = r.get(1..)?.strip_prefix('E')?;
        } else if let Some(r) = s.strip_prefix('f') {
            args.push("float".to_string());
            s = r;
        } else {
            let n: String = s.chars().take_while(char::is_ascii_digit).collect();
            let len: usize = n.parse().ok()?;
            args.push(s.get(n.len()..n.len() + len)?.to_string());
            s = s.get(n.len() + len..)?;
        }
    }
    Some((family, args))
}

/// Every `rssm::` kernel in a `cuobjdump --dump-sass` listing.
pub fn parse(text: &str) -> Vec<Function> {
    let mut out: Vec<Function> = vec![];
    let mut current: Option<Function> = None;
    for line in text.lines() {
        if let Some(name) = line.split("Function : ").nth(1) {
            out.extend(current.take());
            current = demangle(name.trim()).map(|(family, args)| Function {
                family,
                args,
                instrs: vec![],
            });
            continue;
        }
        let Some(f) = current.as_mut() else { continue };
        // `        /*0070*/  @!P0 LDG.E.128 R4, desc[UR4][R2.64] ;   /* 0x... */`
        let Some(rest) = line.trim_start().strip_prefix("/*") else {
            continue;
        };
        let Some((addr, code)) = rest.split_once("*/") else {
            continue;
        };
        let Ok(addr) = u32::from_str_radix(addr, 16) else {
            continue;
        };
        let Some(code) = code.split(';').next() else { continue };
        let mut words = code.split_whitespace().peekable();
        let predicated = words.peek().is_some_and(|w| w.starts_with('@'));
        if predicated {
            words.next();
        }
        let Some(opcode) = words.next() else { continue };
        if !opcode.starts_with(|c: char| c.is_ascii_uppercase()) {
            continue;
        }
        f.instrs.push(Instr {
            addr,
            predicated,
            opcode: opcode.to_string(),
            operands: words.collect::<Vec<_>>().join(" "),
        });
    }
    out.extend(current);
    out
}

/// Basic blocks `[start, end)` of instruction indices, their successors, and the natural loops.
#[derive(Clone, Debug)]
pub struct Cfg {
    pub blocks: Vec<(usize, usize)>,
    pub succ: Vec<Vec<usize>>,
    /// Each natural loop as its set of blocks (loops sharing a header merged), outermost first.
    pub loops: Vec<BTreeSet<usize>>,
}

impl Cfg {
    pub fn build(instrs: &[Instr]) -> Cfg {
        let index_of = |addr: u32| instrs.binary_search_by_key(&addr, |i| i.addr).ok();
        let mut leaders = BTreeSet::from([0usize]);
        for (i, ins) in instrs.iter().enumerate() {
            if ins.ends_block() && i + 1 < instrs.len() {
                leaders.insert(i + 1);
            }
            if let Some(t) = ins.target().and_then(index_of) {
                leaders.insert(t);
            }
        }
        let starts: Vec<usize> = leaders.into_iter().filter(|&s| s < instrs.len()).collect();
        let blocks: Vec<(usize, usize)> = starts
            .iter()
            .enumerate()
            .map(|(j, &s)| (s, starts.get(j + 1).copied().unwrap_or(instrs.len())))
            .collect();
        let block_of = |i: usize| starts.binary_search(&i).ok();
        let succ: Vec<Vec<usize>> = blocks
            .iter()
            .enumerate()
            .map(|(j, &(_, e))| {
                let last = &instrs[e - 1];
                let mut s = vec![];
                // `BRA.DIV` jumps to a collective's fallback only when the warp has diverged; a
                // converged warp (every kernel's collectives run converged) falls through, and
                // that is the path counted.
                if last.opcode.starts_with("BRA.DIV") {
                    if j + 1 < blocks.len() {
                        s.push(j + 1);
                    }
                    return s;
                }
                if let Some(t) = last.target().and_then(index_of).and_then(block_of) {
                    s.push(t);
                }
                if last.falls_through() && j + 1 < blocks.len() {
                    s.push(j + 1);
                }
                s
            })
            .collect();
        let loops = natural_loops(&succ);
        Cfg { blocks, succ, loops }
    }

    /// The loops that contain block `b`.
    pub fn loops_of(&self, b: usize) -> impl Iterator<Item = usize> + '_ {
        self.loops
            .iter()
            .enumerate()
            .filter(move |(_, l)| l.contains(&b))
            .map(|(i, _)| i)
    }
}

/// Natural loops of a graph whose entry is block 0: for every edge u -> h where h dominates u,
/// the blocks that reach u without passing h. Loops with one header are merged.
fn natural_loops(succ: &[Vec<usize>]) -> Vec<BTreeSet<usize>> {
    let n = succ.len();
    let mut pred = vec![vec![]; n];
    for (u, ss) in succ.iter().enumerate() {
        for &v in ss {
            pred[v].push(u);
        }
    }
    // Reachable blocks in reverse postorder, then the iterative dominator algorithm
    // (Cooper, Harvey, Kennedy) on that order.
    let mut order = vec![];
    let mut seen = vec![false; n];
    let mut stack = vec![(0usize, 0usize)];
    if n > 0 {
        seen[0] = true;
    }
    while let Some((u, k)) = stack.pop() {
        if let Some(&v) = succ[u].get(k) {
            stack.push((u, k + 1));
            if !seen[v] {
                seen[v] = true;
                stack.push((v, 0));
            }
        } else {
            order.push(u);
        }
    }
    order.reverse();
    let mut rpo = vec![usize::MAX; n];
    for (i, &b) in order.iter().enumerate() {
        rpo[b] = i;
    }
    let mut idom = vec![usize::MAX; n];
    if n > 0 {
        idom[0] = 0;
    }
    let intersect = |idom: &[usize], mut a: usize, mut b: usize| {
        while a != b {
            while rpo[a] > rpo[b] {
                a = idom[a];
            }
            while rpo[b] > rpo[a] {
                b = idom[b];
            }
        }
        a
    };
    let mut changed = true;
    while changed {
        changed = false;
        for &b in order.iter().skip(1) {
            let mut new = usize::MAX;
            for &p in &pred[b] {
                if idom[p] == usize::MAX {
                    continue;
                }
                new = if new == usize::MAX { p } else { intersect(&idom, p, new) };
            }
            if new != usize::MAX && idom[b] != new {
                idom[b] = new;
                changed = true;
            }
        }
    }
    let dominates = |h: usize, mut u: usize| loop {
        if u == h {
            return true;
        }
        if idom[u] == u || idom[u] == usize::MAX {
            return false;
        }
        u = idom[u];
    };
    let mut by_header: std::collections::BTreeMap<usize, BTreeSet<usize>> = Default::default();
    for &u in &order {
        for &h in &succ[u] {
            if !dominates(h, u) {
                continue;
            }
            let body = by_header.entry(h).or_default();
            body.insert(h);
            let mut work = vec![u];
            while let Some(x) = work.pop() {
                if body.insert(x) {
                    work.extend(pred[x].iter().copied().filter(|&p| rpo[p] != usize::MAX));
                }
            }
        }
    }
    let mut loops: Vec<BTreeSet<usize>> = by_header.into_values().collect();
    loops.sort_by_key(|l| std::cmp::Reverse(l.len()));
    loops
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
\t\tFunction : _ZN4rssm11fold_kernelILi4E13__nv_bfloat16Lb0ELb1EEEv16rssm_fold_params
        /*0000*/                   LDC R1, c[0x0][0x28] ;                 /* 0x0 */
        /*0010*/                   LDG.E R2, desc[UR4][R4.64] ;           /* 0x0 */
        /*0020*/                   ISETP.GE.AND P0, PT, R2, 0x1, PT ;     /* 0x0 */
        /*0030*/               @P0 EXIT ;                                 /* 0x0 */
        /*0040*/                   LDG.E.128 R8, desc[UR4][R6.64] ;       /* 0x0 */
        /*0050*/                   FFMA R8, R8, R9, R10 ;                 /* 0x0 */
        /*0060*/                   SHFL.BFLY PT, R3, R8, 0x1, 0x1f ;      /* 0x0 */
        /*0070*/               @P1 BRA 0x50 ;                             /* 0x0 */
        /*0080*/                   STG.E.128 desc[UR4][R6.64], R8 ;       /* 0x0 */
        /*0090*/                   EXIT ;                                 /* 0x0 */
";

    #[test]
    fn names_demangle_to_ptxas_template_arguments() {
        let (f, a) = demangle("_ZN4rssm18verify_fold_kernelILi4E13__nv_bfloat16Lb0EEEv23rssm_verify_fold_params")
            .expect("demangles");
        assert_eq!(
            (f.as_str(), a),
            (
                "verify_fold_kernel",
                vec!["4".into(), "__nv_bfloat16".into(), "false".into()]
            )
        );
        let (f, a) = demangle("_ZN4rssm11fold_kernelILi8EfLb1ELb0EEEv16rssm_fold_params").expect("demangles");
        assert_eq!(
            (f.as_str(), a.join(",")),
            ("fold_kernel", "8,float,true,false".to_string())
        );
        let (_, a) = demangle("_ZN4rssm13decode_kernelILi2E6__halfLb0EEEv18rssm_decode_params").expect("demangles");
        assert_eq!(a.join(","), "2,__half,false");
        assert_eq!(demangle("_Z3foov"), None);
    }

    #[test]
    fn a_listing_gives_instructions_blocks_and_the_loop() {
        let f = parse(LISTING);
        assert_eq!(f.len(), 1);
        let ins = &f[0].instrs;
        assert_eq!(ins.len(), 10);
        assert_eq!(ins[1].opcode, "LDG.E");
        assert!(ins[3].predicated && ins[3].opcode == "EXIT");
        assert_eq!(ins[7].target(), Some(0x50));
        assert_eq!(ins[4].dest_regs(), vec![8, 9, 10, 11]);
        assert_eq!(ins[4].src_regs(), vec![6, 7]);
        assert_eq!(ins[8].src_regs(), vec![6, 7, 8, 9, 10, 11]);
        let cfg = Cfg::build(ins);
        // [0,4) [4,5) [5,8) [8,10): the predicated EXIT and the branch fall through.
        assert_eq!(cfg.blocks, vec![(0, 4), (4, 5), (5, 8), (8, 10)]);
        assert_eq!(cfg.succ[2], vec![2, 3]);
        assert_eq!(cfg.loops, vec![BTreeSet::from([2])]);
    }

    #[test]
    fn a_divergence_fallback_is_off_the_converged_path() {
        // BRA.DIV to the shuffle's fallback (after EXIT), which branches back: the converged warp
        // falls through, so the fallback has no predecessor.
        let listing = "\
\t\tFunction : _ZN4rssm11fold_kernelILi4E13__nv_bfloat16Lb0ELb1EEEv16rssm_fold_params
        /*0000*/                   BRA.DIV UR4, 0x40 ;                    /* 0x0 */
        /*0010*/                   SHFL.BFLY PT, R3, R8, 0x1, 0x1f ;      /* 0x0 */
        /*0020*/                   FADD R8, R8, R3 ;                      /* 0x0 */
        /*0030*/                   EXIT ;                                 /* 0x0 */
        /*0040*/                   WARPSYNC.COLLECTIVE R50, 0x60 ;        /* 0x0 */
        /*0050*/                   SHFL.BFLY P6, R3, R8, R52, R51 ;       /* 0x0 */
        /*0060*/                   ENDCOLLECTIVE ;                        /* 0x0 */
        /*0070*/                   BRA 0x20 ;                             /* 0x0 */
";
        let f = parse(listing);
        let cfg = Cfg::build(&f[0].instrs);
        assert_eq!(cfg.succ[0], vec![1]);
        assert!(cfg
            .succ
            .iter()
            .all(|s| !s.contains(&cfg.blocks.iter().position(|b| b.0 == 4).unwrap())));
    }

    #[test]
    fn nested_loops_are_found_outermost_first() {
        // 0 -> 1 -> 2 -> 2 (inner) ; 2 -> 3 -> 1 (outer) ; 3 -> 4
        let succ = vec![vec![1], vec![2], vec![2, 3], vec![1, 4], vec![]];
        let loops = natural_loops(&succ);
        assert_eq!(loops, vec![BTreeSet::from([1, 2, 3]), BTreeSet::from([2])]);
    }
}
