#!/usr/bin/env python3
"""The performance peer: FLA's Triton `fused_recurrent_gated_delta_rule` against replayssm's kernel
R and its V + F (one layer) on identical inputs, in one process, on one GPU, timed the same way.

For every (shape, B, T) the script draws one set of inputs (q, k, v in bf16, precomputed log
decays g and betas in f32, a random fp32 initial state) and runs, from copies of that state:

  fla    fused_recurrent_gated_delta_rule(q, k, v, g, beta, initial_state, final state out,
         in-kernel q/k L2 norm, cu_seqlens): T tokens of each request, final state written;
  R      replayssm.recurrent on the same tensors (state transposed to replayssm's [HV, V, K]);
  V+F    replayssm.verify (all T outputs from the checkpoint, ring write) then replayssm.fold
         (every token accepted) on a one-layer pool: the same commit, the ReplaySSM way (T >= 2).

It checks the three agree (outputs and final states, max abs difference printed and stored)
and times each with triton.testing.do_bench (median, CUDA events, L2 flushed between runs).
Ratios are FLA time over ours (> 1: ours is faster).

Run on the device machine, with the fla-core wheel carried (see bench/README.md):
  REPLAYSSM_LIB=target/device-bundle/libreplayssm.so PYTHONPATH=python \
    python3 bench/peers/fla_peer.py --out $OUT/fla-peer.json
"""

import argparse
import datetime
import json
import sys

# Name -> (H, HV, K, V, variant), as tools/src/floor.rs's MODEL_SHAPES.
SHAPES = {
    "Qwen3-Next": (16, 32, 128, 128, "gdn"),
    "Qwen3.5-122B": (16, 64, 128, 128, "gdn"),
    "Qwen3.5-397B-TP4": (4, 16, 128, 128, "gdn"),
    "Kimi-K3-TP8": (12, 12, 128, 128, "kda"),
}


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    ap.add_argument("--batches", default="1,64,128")
    ap.add_argument("--windows", default="1,4", help="T; 1 is the decode step (V+F needs T >= 2)")
    ap.add_argument("--out", help="write the results JSON here")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    a.shapes = [s for s in a.shapes.split(",") if s]
    unknown = [s for s in a.shapes if s not in SHAPES]
    if unknown:
        ap.error("unknown shape(s) %s" % ", ".join(unknown))
    a.batches = [int(x) for x in a.batches.split(",")]
    a.windows = [int(x) for x in a.windows.split(",")]
    if any(t < 1 or t > 16 for t in a.windows) or any(b < 1 for b in a.batches):
        ap.error("windows must be in 1..16 and batches positive")
    return a


def run(a):
    import torch
    import torch.nn.functional as F
    import triton
    from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule as fla_recurrent

    import replayssm

    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731
    rows = []
    for name in a.shapes:
        H, HV, K, V, variant = SHAPES[name]
        for B in a.batches:
            for T in a.windows:
                row = {"shape": name, "variant": variant, "B": B, "T": T}
                rows.append(row)
                n = B * T
                q = torch.randn(1, n, H, K, device=dev, dtype=torch.bfloat16)
                k = torch.randn(1, n, H, K, device=dev, dtype=torch.bfloat16)
                v = torch.randn(1, n, HV, V, device=dev, dtype=torch.bfloat16)
                gshape = (1, n, HV, K) if variant == "kda" else (1, n, HV)
                g = F.logsigmoid(torch.rand(*gshape, device=dev, dtype=torch.float32)) * 0.1
                beta = torch.rand(1, n, HV, device=dev, dtype=torch.float32).sigmoid()
                h0 = torch.randn(B, HV, K, V, device=dev, dtype=torch.float32) * 0.1
                cu64 = torch.arange(0, n + 1, T, device=dev, dtype=torch.long)
                cu32 = cu64.to(torch.int32)
                slots = torch.arange(B, device=dev, dtype=torch.int32)
                gate = {"gk": g} if variant == "kda" else {"g": g}

                def fla(h):
                    return fla_recurrent(q, k, v, beta=beta, initial_state=h, output_final_state=True,
                                         use_qk_l2norm_in_kernel=True, cu_seqlens=cu64, **gate)

                try:
                    o_fla, ht_fla = fla(h0.clone())
                except TypeError as e:  # an fla-core without per-key decays (gk)
                    row["fla_error"] = "%s: %s" % (type(e).__name__, e)
                    o_fla = ht_fla = None

                s_r = h0.transpose(-1, -2).contiguous()  # replayssm: [HV, V, K], K contiguous
                o_r = torch.empty(n, HV, V, device=dev, dtype=torch.bfloat16)

                def ours_r(state):
                    return replayssm.recurrent(q[0], k[0], v[0], state=state, slots=slots, cu_seqlens=cu32,
                                               o=o_r, write_state=True, max_seqlen=T, g=g[0], beta=beta[0])

                ours_r(s_r)
                torch.cuda.synchronize()
                if o_fla is not None:
                    row["max_abs_diff_o_r_vs_fla"] = (o_r.float() - o_fla[0].float()).abs().max().item()
                    row["max_abs_diff_state_r_vs_fla"] = (s_r - ht_fla.transpose(-1, -2)).abs().max().item()
                    row["fla_us"] = bench(lambda: fla(h0))
                row["ours_r_us"] = bench(lambda: ours_r(s_r))
                if o_fla is not None:
                    row["r_speedup_vs_fla"] = row["fla_us"] / row["ours_r_us"]

                if T >= 2:
                    pool = h0.transpose(-1, -2).contiguous()[None]  # [1 layer, B slots, HV, V, K]
                    ring = (torch.empty(1, B, HV, T, V, device=dev, dtype=torch.bfloat16),
                            torch.empty(1, B, H, T, K, device=dev, dtype=torch.bfloat16),
                            torch.empty(*((1, B, HV, T, K) if variant == "kda" else (1, B, HV, T)),
                                        device=dev, dtype=torch.float32),
                            torch.empty(1, B, HV, T, device=dev, dtype=torch.float32))
                    accept = torch.full((B,), T, device=dev, dtype=torch.int32)
                    o_v = torch.empty(n, HV, V, device=dev, dtype=torch.bfloat16)

                    def ours_vf(p):
                        replayssm.verify(q[0], k[0], v[0], state=p, slots=slots, cu_seqlens=cu32, layer=0,
                                         ring=ring, o=o_v, max_seqlen=T, g=g[0], beta=beta[0])
                        replayssm.fold(state=p, ring=ring, slots=slots, accept_lens=accept)

                    ours_vf(pool)
                    torch.cuda.synchronize()
                    row["max_abs_diff_o_v_vs_r"] = (o_v.float() - o_r.float()).abs().max().item()
                    # fold replays the same records in the same order as R: bit-identical states.
                    row["state_vf_equals_r_bitwise"] = bool(torch.equal(pool[0], s_r))
                    row["ours_vf_us"] = bench(lambda: ours_vf(pool))
                    if o_fla is not None:
                        row["vf_speedup_vs_fla"] = row["fla_us"] / row["ours_vf_us"]
                print(json.dumps(row), flush=True)
    return rows


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
        import fla  # noqa: F401
    except ImportError as e:
        print("fla_peer: skipped: %s (needs torch, triton and fla-core on a GPU machine)" % e, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("fla_peer: skipped: torch sees no CUDA device", file=sys.stderr)
        return 2
    rows = run(a)
    import fla
    import triton
    result = {
        "format": "replayssm-peer/1",
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "fla": getattr(fla, "__version__", "unknown"),
        "command": " ".join(sys.argv),
        "timing": "triton.testing.do_bench median (CUDA events, L2 flushed), warmup 25 ms, rep 100 ms",
        "rows": rows,
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print("%-17s %4s %2s %10s %10s %10s %7s %7s" % ("shape", "B", "T", "fla_us", "R_us", "V+F_us", "R/fla", "VF/fla"))
    for r in rows:
        f = lambda key: ("%.2f" % r[key]) if key in r else "-"  # noqa: E731
        print("%-17s %4d %2d %10s %10s %10s %7s %7s" % (r["shape"], r["B"], r["T"], f("fla_us"), f("ours_r_us"),
                                                       f("ours_vf_us"), f("r_speedup_vs_fla"), f("vf_speedup_vs_fla")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
