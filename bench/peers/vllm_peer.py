"""vLLM's buffered speculative verify for GDN as a peer: runs vLLM's own
`gdn_replayssm_spec_decode` (verify and flush launches), `commit_gdn_replayssm_spec` and
`reset_gdn_replayssm_spec_cursors`, loaded from the vLLM source file given with --source, on the
CPU under the Triton interpreter, over one deterministic chain of speculative steps, and writes
the golden tests/cases/vllm/gdn_bf16_chain.golden.safetensors that tests/vllm_peer.rs replays
through our kernel VB, the buffered commit and F. Run through scripts/vllm-peer (it sets up torch
and triton and TRITON_INTERPRET=1). Nothing of vLLM's is copied here: its file is loaded by path
at run time; `vllm.triton_utils` and `vllm.platforms` (which its two files import) are stubs (no
GPU: not Blackwell), and vLLM's replayssm_config.py is loaded from --config (default: beside
--source in the same source tree).

One step of the chain, in vLLM's engine order (vllm/v1/attention/backends/gdn_attn.py: the commit
of the previous step's accept counts and the first-decode resets run in the metadata build,
before the layer's verify):
  1. rows handed to a new request: `reset_gdn_replayssm_spec_cursors` with do_reset = 1, and the
     block's checkpoint set to a fresh state (its prefill's);
  2. `gdn_replayssm_spec_decode(..., launch_mode="both")`: the verify launch (rows whose block is
     not flagged) and the flush launch (flagged rows: the history folded into the checkpoint,
     stored as bf16 values, then the window verified from it);
  3. accept counts drawn (0..T, the bonus token included, as vLLM's num_accepted and our
     accept_lens count it; 0 on null rows) and `commit_gdn_replayssm_spec`.
Recorded per step: vLLM's outputs, its cursors (write_pos, cache_base, is_flush) after the
commit, and for every block the flush launch folded, its checkpoint after the step.

Two interpreter defects are corrected at run time (checked on probe kernels first):
  - its f32 -> bf16 conversion truncates where the GPU rounds to nearest even: patched as
    bench/peers/sglang_peer.py does (`--truncating-bf16` leaves the truncation);
  - its `tl.dot` multiplies bf16 operands as their raw 16-bit patterns (Triton 3.8.0's
    `InterpreterBuilder.create_dot` widens only fp8 operands; the interpreter stores bf16 as
    uint16), which vLLM's kernel, all of whose dots take bf16 operands, hits on every call:
    patched to widen bf16 operands to f32 (exact) before the f32-accumulating matmul, as the
    GPU's bf16 MMA multiplies exactly and accumulates in f32 (in another order).
"""

import argparse
import hashlib
import importlib.util
import math
import os
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

# The safetensors writer and the bf16 rounding patch are sglang_peer's.
from sglang_peer import _interpreter_bf16_rounds_to_nearest_even, save  # noqa: E402

KERNEL_MODULE = "vllm.model_executor.layers.fla.ops.gdn_replayssm_spec_decode"
CONFIG_MODULE = "vllm.model_executor.layers.mamba.ops.replayssm_config"
CONFIG_REL = Path("../../mamba/ops/replayssm_config.py")

# The chain. H < HV (GQA), K = 64 (vLLM's kernel needs K/nk >= 16 for its tl.dot tiles, nk = 2
# for T < 6), V = 32 (a masked half of vLLM's BV = 64 block); T = 4 (max_spec_len: 3 drafts +
# the bonus token); our cache length L = vLLM's replayssm buffer length B = 16, vLLM's logical
# flush threshold B + T = 20 on a 32-position circular buffer, as vLLM's metadata builder sizes
# them. Rows: blocks 2, 4, 1 (our slots 1, 3, 0) and block 0 (vLLM's null block: a padding row);
# each live row is a null row one step in eight. Block 3 (our slot 2) is never used.
CHAIN = dict(H=1, HV=2, K=64, V=32, T=4, B=16, steps=256, seed=32,
             rows=[2, 4, 1, 0], num_blocks=5, p_null=1 / 8, p_reset=1 / 40)


def _interpreter_bf16_dot_widens():
    """Triton 3.8.0's interpreter runs `tl.dot` as `np.matmul(a.data, b.data)` on the stored data,
    which for bf16 is the uint16 bit pattern (it widens fp8 operands only): a bf16 dot comes out
    as a product of integers. Replaced by a dot that widens bf16 operands to f32 first (exact: a
    bf16 value is an f32 with 16 zero low bits), the accumulation as before (in the
    accumulator's f32). Checked here against torch on a probe kernel."""
    import numpy as np
    import triton.runtime.interpreter as interp

    builtin = interp.InterpreterBuilder.create_dot

    def widen(h):
        if h.dtype == tl.bfloat16:
            f = (h.data.astype(np.uint32) << np.uint32(16)).view(np.float32)
            return interp.TensorHandle(f, tl.float32)
        return h

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return builtin(self, widen(a), widen(b), d, input_precision, max_num_imprecise_acc)

    interp.InterpreterBuilder.create_dot = create_dot
    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, generator=g).to(torch.bfloat16)
    y = torch.randn(32, 16, generator=g).to(torch.bfloat16)
    got = torch.empty(16, 16)
    _bf16_dot_probe[(1,)](x, y, got, M=16, N=16, K=32)
    want = x.double() @ y.double()
    err = (got.double() - want).abs().max().item()
    if not err <= 1e-5 * want.abs().max().item():
        raise SystemExit("the bf16 tl.dot patch did not take: max error %g" % err)


@triton.jit
def _bf16_dot_probe(x_ptr, y_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    m, n, k = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    x = tl.load(x_ptr + m[:, None] * K + k[None, :])
    y = tl.load(y_ptr + k[:, None] * N + n[None, :])
    tl.store(o_ptr + m[:, None] * N + n[None, :], tl.dot(x, y))


def _stub_vllm(config_path):
    """The modules vLLM's two files import, without vLLM: `vllm.triton_utils` (triton and tl as
    they are), `vllm.platforms` / `vllm.backends.platform` (a platform with no device capability,
    so vLLM's config takes its non-Blackwell branch), and vLLM's replayssm_config.py itself,
    loaded from `config_path`."""
    def module(name, **attrs):
        m = sys.modules.get(name) or types.ModuleType(name)
        m.__path__ = getattr(m, "__path__", [])
        for k, v in attrs.items():
            setattr(m, k, v)
        sys.modules[name] = m
        return m

    class NoGpu:
        def is_device_capability_family(self, *_):
            raise RuntimeError("no GPU (vllm-peer runs under the Triton interpreter)")

    parts = KERNEL_MODULE.split(".")
    for i in range(1, len(parts)):
        module(".".join(parts[:i]))
    for p in ("vllm.backends", "vllm.backends.compute", "vllm.backends.compute.dsl",
              "vllm.model_executor.layers.mamba", "vllm.model_executor.layers.mamba.ops"):
        module(p)
    for name in ("vllm.triton_utils", "vllm.backends.compute.dsl.triton_utils"):
        module(name, triton=triton, tl=tl)
    for name in ("vllm.platforms", "vllm.backends.platform"):
        module(name, current_platform=NoGpu())
    return _load(CONFIG_MODULE, config_path)


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def bf16_exact(t):
    """Whether every f32 value of `t` is a bf16 value (so storing it as bf16 loses nothing)."""
    return torch.equal(t.to(torch.bfloat16).to(torch.float32), t)


def run_chain(vk, c):
    """vLLM's chain (see the module doc); returns the golden's tensors and a summary."""
    g = torch.Generator().manual_seed(c["seed"])
    H, HV, K, V, T, B, S = (c[x] for x in ("H", "HV", "K", "V", "T", "B", "steps"))
    rows, NB = c["rows"], c["num_blocks"]
    R = len(rows)
    N = R * T
    L_v = B + T
    buf = 1 << (L_v - 1).bit_length()
    qkv = 2 * H * K + HV * V
    randn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float32)  # noqa: E731
    uni = lambda *s: torch.rand(*s, generator=g, dtype=torch.float32)  # noqa: E731
    # Head 0 decays slowly (exp(A_log) = 0.02: about 0.99 per token, so a flush's rounding is
    # still in the state tens of steps later), head 1 at exp(A_log) ~ U(1, 16) (FLA's init).
    A_log = torch.tensor([math.log(0.02), math.log(1.0 + 15.0 * float(uni(1)))], dtype=torch.float32)[:HV]
    dt_bias = 0.1 * randn(HV)
    state = torch.zeros(NB, HV, V, K, dtype=torch.float32)
    state[1:] = 0.1 * randn(NB - 1, HV, V, K)
    state_in = state.clone()
    d_cache = torch.zeros(NB, HV, buf, V, dtype=torch.bfloat16)  # activation dtype, as vLLM allocates
    k_cache = torch.zeros(NB, H, buf, K, dtype=torch.bfloat16)
    g_cache = torch.zeros(NB, HV, buf, dtype=torch.float32)
    write_pos = torch.zeros(NB, dtype=torch.int32)
    cache_base = torch.zeros(NB, dtype=torch.int32)
    is_flush = torch.zeros(NB, dtype=torch.int8)
    cu = torch.arange(0, N + 1, T, dtype=torch.int32)
    t = {k: [] for k in ("mixed_qkv", "a", "b", "slots", "accept", "reset", "o", "write_pos", "cache_base",
                         "is_flush")}
    resets, flush_step, flush_block, flush_len, flush_state = [], [], [], [], []
    for step in range(S):
        live = [blk if blk > 0 and float(uni(1)) >= c["p_null"] else 0 for blk in rows]
        slots = torch.tensor(live, dtype=torch.int32)
        # 1. first-decode rows: cursors reset, the checkpoint a fresh prefill state.
        do_reset = torch.tensor([int(blk > 0 and step > 0 and float(uni(1)) < c["p_reset"]) for blk in live],
                                dtype=torch.int32)
        for blk, d in zip(live, do_reset.tolist()):
            if d:
                state[blk] = 0.1 * randn(HV, V, K)
                resets.append(state[blk].clone())
        vk.reset_gdn_replayssm_spec_cursors(write_pos, cache_base, is_flush, do_reset, slots,
                                            max_cache_len=L_v, max_spec_len=T)
        # 2. the verify (and flush) launches.
        x = randn(N, qkv).to(torch.bfloat16)
        a = randn(N, HV).to(torch.bfloat16)
        b = randn(N, HV).to(torch.bfloat16)
        flagged = [blk for blk in live if blk > 0 and is_flush[blk] != 0]
        before = [int(write_pos[blk]) for blk in flagged]
        for blk in live:
            if blk > 0:
                assert int(write_pos[blk]) + T <= L_v, "step %d block %d: the window overflows" % (step, blk)
        o = torch.full((N, HV, V), float("nan"), dtype=torch.bfloat16)
        vk.gdn_replayssm_spec_decode(x, a, b, A_log, dt_bias, state, d_cache, k_cache, g_cache, o, cu, slots,
                                     write_pos, cache_base, is_flush, max_cache_len=L_v, max_spec_len=T,
                                     scale=K ** -0.5, use_qk_l2norm_in_kernel=True)
        assert not torch.isnan(o.float()).any(), "step %d: an output vLLM did not write" % step
        for blk, h in zip(flagged, before):
            assert bf16_exact(state[blk]), "step %d block %d: the flushed checkpoint is not bf16 values" % (step, blk)
            flush_step.append(step)
            flush_block.append(blk)
            flush_len.append(h)
            flush_state.append(state[blk].to(torch.bfloat16))
        # 3. accept counts and the commit.
        acc = []
        for blk in live:
            u = int(torch.randint(0, 6, (1,), generator=g))
            n = 0 if u == 0 else T if u == 1 else int(torch.randint(1, T + 1, (1,), generator=g))
            acc.append(n if blk > 0 else 0)
        vk.commit_gdn_replayssm_spec(write_pos, cache_base, is_flush, torch.tensor(acc, dtype=torch.int32), slots,
                                     max_cache_len=L_v, max_spec_len=T, cache_buf_len=buf)
        for k, v in (("mixed_qkv", x), ("a", a), ("b", b), ("slots", slots), ("accept", torch.tensor(acc)),
                     ("reset", do_reset), ("o", o), ("write_pos", write_pos.clone()),
                     ("cache_base", cache_base.clone()), ("is_flush", is_flush.clone())):
            t[k].append(v)
    out = {k: torch.stack(v) for k, v in t.items()}
    for k in ("slots", "accept", "reset", "write_pos", "cache_base", "is_flush"):
        out[k] = out[k].to(torch.int32)
    out.update(A_log=A_log, dt_bias=dt_bias, state_in=state_in,
               reset_state=torch.stack(resets) if resets else torch.zeros(0, HV, V, K),
               flush_step=torch.tensor(flush_step, dtype=torch.int32),
               flush_block=torch.tensor(flush_block, dtype=torch.int32),
               flush_len=torch.tensor(flush_len, dtype=torch.int32),
               flush_state=torch.stack(flush_state))
    geometry = dict(max_cache_len=L_v, cache_buf_len=buf)
    return out, geometry


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True,
                    help="vLLM's vllm/model_executor/layers/fla/ops/gdn_replayssm_spec_decode.py")
    ap.add_argument("--config", help="vLLM's vllm/model_executor/layers/mamba/ops/replayssm_config.py "
                                     "(default: beside --source in its source tree)")
    ap.add_argument("--source-rev", default="unknown", help="where the source came from (recorded)")
    ap.add_argument("--out", default=str(ROOT / "tests/cases/vllm"))
    ap.add_argument("--steps", type=int, default=CHAIN["steps"])
    ap.add_argument("--command", default="scripts/vllm-peer")
    ap.add_argument("--truncating-bf16", action="store_true",
                    help="leave the interpreter's truncating f32 -> bf16 casts (to measure what they did)")
    args = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise SystemExit("run with TRITON_INTERPRET=1 (scripts/vllm-peer sets it)")
    source = Path(args.source).resolve()
    config = Path(args.config).resolve() if args.config else (source.parent / CONFIG_REL).resolve()
    for p in (source, config):
        if not p.is_file():
            raise SystemExit("vllm-peer: %s not found" % p)
    if args.truncating_bf16:
        rounding = "truncated (the interpreter's own casts)"
    else:
        _interpreter_bf16_rounds_to_nearest_even()
        rounding = "nearest even (the interpreter patched to the GPU's rounding)"
    _interpreter_bf16_dot_widens()
    torch.use_deterministic_algorithms(True)
    _stub_vllm(config)
    vk = _load(KERNEL_MODULE, source)
    c = dict(CHAIN, steps=args.steps)
    print("vLLM %s (%s, sha256 %s), torch %s, triton %s" % (args.source_rev, source, sha256(source)[:16],
                                                           torch.__version__, triton.__version__))
    t0 = time.time()
    tensors, geo = run_chain(vk, c)
    n_flush = len(tensors["flush_step"])
    print("  %d steps in %.1f s: %d flushes (%d records folded), %d resets, %d tokens accepted" % (
        c["steps"], time.time() - t0, n_flush, int(tensors["flush_len"].sum()), len(tensors["reset_state"]),
        int(tensors["accept"].sum())))
    meta = dict(format="replayssm-vllm-golden-1", vllm_source=args.source_rev,
                source_sha256=sha256(source), config_sha256=sha256(config),
                torch_version=torch.__version__, triton_version=triton.__version__, bf16_rounding=rounding,
                command=args.command, variant="gdn", act_dtype="bf16", scale=repr(c["K"] ** -0.5),
                use_qk_l2norm="true", null_block_id="0", softplus_threshold="20.0",
                **{k: str(c[k]) for k in ("H", "HV", "K", "V", "T", "B", "steps", "seed", "num_blocks")},
                **{k: str(v) for k, v in geo.items()})
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gdn_bf16_chain.golden.safetensors"
    save(path, tensors, meta)
    print("  wrote %s (%.2f MB)" % (path, path.stat().st_size / 1e6))


if __name__ == "__main__":
    main()
