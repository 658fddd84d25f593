#!/usr/bin/env python3
"""SGLang 0.5.23's ReplaySSM Triton kernels timed beside replayssm's, through replayssm.sglang, on
identical inputs, in one process, on one GPU.

For every (shape, B, T) the script draws one set of SGLang-shaped inputs (q, k, v, a, b in bf16,
A_log and dt_bias in f32, an fp32 checkpoint pool of one layer, B slots) and runs, with the same
arguments:

  verify  SGLang's `fused_sigmoid_gating_delta_rule_update(cache_ring=True,
          disable_state_update=True)` and `replayssm.sglang`'s (kernel V): T outputs per request
          from the checkpoint, the raw inputs written to the ring;
  fold    SGLang's all-layer fold (GDN `commit_gdn_replayssm_fold_all_layers`, KDA
          `commit_kda_replayssm_spec_all_layers`) and ours (kernel F), every token accepted.

It checks the two agree (outputs, raw ring records, folded state: max abs differences stored)
and times each with triton.testing.do_bench (median, CUDA events, L2 flushed between runs).
Ratios are SGLang's time over ours (> 1: ours is faster). SGLang's kernels are loaded from the
wheel's files as bench/peers/sglang_peer.py loads them (GPU probes stubbed: no PDL launch).

Run on the device machine, with the sglang wheel carried in .whl/ (scripts/device-check does):
  pip install --no-deps --target /tmp/sglang-site .whl/sglang-0.5.23-*.whl
  REPLAYSSM_LIB=target/device-bundle/libreplayssm.so PYTHONPATH=python \
    python3 bench/peers/sglang_timing.py --site /tmp/sglang-site --out $OUT/sglang-peer.json
"""

import argparse
import datetime
import json
import pathlib
import sys
import tempfile

# Name -> (H, HV, K, V, variant), as tools/src/floor.rs's MODEL_SHAPES.
SHAPES = {
    "Qwen3-Next": (16, 32, 128, 128, "gdn"),
    "Qwen3.5-122B": (16, 64, 128, 128, "gdn"),
    "Qwen3.5-397B-TP4": (4, 16, 128, 128, "gdn"),
    "Kimi-K3-TP8": (12, 12, 128, 128, "kda"),
}
KERNELS = ("fused_sigmoid_gating_recurrent.py", "gdn_replayssm_spec_fold.py", "kda_replayssm_spec_decode.py")


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--site", required=True, help="a directory holding the sglang 0.5.23 package")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    ap.add_argument("--batches", default="1,64,128")
    ap.add_argument("--windows", default="2,4,8", help="T, draft tokens per request (2..16)")
    ap.add_argument("--out", help="write the results JSON here")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    a.shapes = [s for s in a.shapes.split(",") if s]
    unknown = [s for s in a.shapes if s not in SHAPES]
    if unknown:
        ap.error("unknown shape(s) %s" % ", ".join(unknown))
    try:
        a.batches = [int(x) for x in a.batches.split(",")]
        a.windows = [int(x) for x in a.windows.split(",")]
    except ValueError as e:
        ap.error(str(e))
    if any(t < 2 or t > 16 for t in a.windows) or any(b < 1 for b in a.batches):
        ap.error("windows must be in 2..16 and batches positive")
    if not (pathlib.Path(a.site) / "sglang" / "kernels" / "ops" / "attention" / "linear").is_dir():
        ap.error("--site %s holds no sglang/kernels/ops/attention/linear" % a.site)
    return a


def run(a, mods):
    import torch
    import triton

    import replayssm.sglang as ours

    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    bench = lambda fn: triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median") * 1e3  # noqa: E731
    rec = mods["fused_sigmoid_gating_recurrent.py"]
    rows = []
    for name in a.shapes:
        H, HV, K, V, variant = SHAPES[name]
        kda = variant == "kda"
        for B in a.batches:
            for T in a.windows:
                row = {"shape": name, "variant": variant, "B": B, "T": T}
                rows.append(row)
                n = B * T
                bf = dict(device=dev, dtype=torch.bfloat16)
                q, k = torch.randn(1, n, H, K, **bf), torch.randn(1, n, H, K, **bf)
                v = torch.randn(1, n, HV, V, **bf)
                a_ = torch.randn(n, HV * K if kda else HV, **bf)
                b = torch.randn(n, HV, **bf)
                A_log = torch.rand(HV, device=dev) * 2.7
                dt_bias = torch.randn(HV * K if kda else HV, device=dev) * 0.1
                cu = torch.arange(0, n + 1, T, device=dev, dtype=torch.int32)
                slots = torch.arange(B, device=dev, dtype=torch.int32)
                accept = torch.full((B,), T, device=dev, dtype=torch.int32)
                pool0 = torch.randn(1, B, HV, V, K, device=dev) * 0.1

                def ring():
                    return [torch.zeros(1, B, HV, T, V, **bf), torch.zeros(1, B, H, T, K, **bf),
                            torch.zeros(*((1, B, HV, T, K) if kda else (1, B, HV, T)), device=dev),
                            torch.zeros(1, B, HV, T, device=dev)]

                def verify(fn, r, **extra):
                    return lambda: fn(A_log, a_, dt_bias, 1.0, 20.0, q, k, v, b, pool0[0], slots,
                                      use_qk_l2norm_in_kernel=True, cu_seqlens=cu, is_kda=kda,
                                      disable_state_update=True, cache_ring=True, replayssm_rawv=r[0][0],
                                      replayssm_rawk=r[1][0], replayssm_g=r[2][0], replayssm_beta=r[3][0], **extra)

                fold_name = "commit_kda_replayssm_spec_all_layers" if kda else "commit_gdn_replayssm_fold_all_layers"
                fold_mod = mods["kda_replayssm_spec_decode.py" if kda else "gdn_replayssm_spec_fold.py"]

                def fold(fn, pool, r):
                    return lambda: fn(pool, *r, slots, accept, T, H, null_block_id=-1)

                r_sg, r_us = ring(), ring()
                sg_verify = verify(rec.fused_sigmoid_gating_delta_rule_update, r_sg)
                us_verify = verify(ours.fused_sigmoid_gating_delta_rule_update, r_us, max_seqlen=T)
                o_sg, o_us = sg_verify(), us_verify()
                p_sg, p_us = pool0.clone(), pool0.clone()
                sg_fold = fold(getattr(fold_mod, fold_name), p_sg, r_sg)
                us_fold = fold(getattr(ours, fold_name), p_us, r_us)
                sg_fold()
                us_fold()
                torch.cuda.synchronize()
                row["max_abs_diff_o"] = (o_sg.float() - o_us.float()).abs().max().item()
                row["ring_v_k_equal"] = bool(torch.equal(r_sg[0], r_us[0]) and torch.equal(r_sg[1], r_us[1]))
                row["max_abs_diff_state"] = (p_sg - p_us).abs().max().item()
                row["sglang_verify_us"] = bench(sg_verify)
                row["ours_verify_us"] = bench(us_verify)
                row["sglang_fold_us"] = bench(sg_fold)
                row["ours_fold_us"] = bench(us_fold)
                row["verify_speedup"] = row["sglang_verify_us"] / row["ours_verify_us"]
                row["fold_speedup"] = row["sglang_fold_us"] / row["ours_fold_us"]
                print(json.dumps(row), flush=True)
    return rows


def main(argv=None):
    a = parse_args(argv)
    try:
        import torch
        import triton
    except ImportError as e:
        print("sglang_timing: skipped: %s (needs torch and triton on a GPU machine)" % e, file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sglang_timing: skipped: torch sees no CUDA device", file=sys.stderr)
        return 2
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    import sglang_peer
    sglang_peer._stub_gpu_probes()
    with tempfile.TemporaryDirectory() as tmp:
        mods = {f: sglang_peer._load_kernel(pathlib.Path(a.site), f, tmp)[0] for f in KERNELS}
        rows = run(a, mods)
    result = {
        "format": "replayssm-peer/1",
        "peer": "sglang %s" % sglang_peer.SGLANG_VERSION,
        "date": datetime.date.today().isoformat(),
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "command": " ".join(sys.argv),
        "timing": "triton.testing.do_bench median (CUDA events, L2 flushed), warmup 25 ms, rep 100 ms",
        "rows": rows,
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(result, f, indent=1)
    print("%-17s %4s %2s %10s %10s %7s %10s %10s %7s" % ("shape", "B", "T", "sgl_V_us", "our_V_us", "V x",
                                                       "sgl_F_us", "our_F_us", "F x"))
    for r in rows:
        print("%-17s %4d %2d %10.2f %10.2f %7.2f %10.2f %10.2f %7.2f" % (
            r["shape"], r["B"], r["T"], r["sglang_verify_us"], r["ours_verify_us"], r["verify_speedup"],
            r["sglang_fold_us"], r["ours_fold_us"], r["fold_speedup"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
