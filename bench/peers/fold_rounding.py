"""Why replayssm's GDN fold and SGLang 0.5.23's differ in the last bits, and which is closer to the
f64 recurrence (docs/sglang.md, "The fold's rounding"). Emulates one token update of a state row in
NumPy float32 both ways, step by step: the key's L2 norm (replayssm: per-lane fma chain and a warp
butterfly, `device/delta_rule.cuh`; SGLang's fold under the Triton interpreter: rounded squares
and NumPy's pairwise sum), exp(g) (glibc expf, as the emulator calls it; NumPy's float32 exp, as
the interpreter calls it), the dot k.h (fma chains and a butterfly; rounded products summed in
order) and the update (fmaf; a rounded product added). Both emulations are first checked bit for
bit against the real kernels (SGLang's fold under the interpreter, replayssm's on the emulator),
then each difference is switched on its own, and every variant is measured against an f64
recurrence of the same f32 inputs.

Run with the venv scripts/sglang-peer installs (torch, triton, the sglang wheel) and a built
libreplayssm.so:
    TRITON_INTERPRET=1 .toolchain/sglang-peer/venv/bin/python bench/peers/fold_rounding.py
(NSEEDS=16 problems of 4 heads x 8 tokens per case by default.)
"""
import ctypes
import glob
import importlib.util
import os
import re
import sys
import sysconfig
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
F32, F64 = np.float32, np.float64
K = V = 128
T = 8
HV = 4
EPL = 4

libm = ctypes.CDLL("libm.so.6")
libm.expf.restype = ctypes.c_float; libm.expf.argtypes = [ctypes.c_float]
libm.fmaf.restype = ctypes.c_float; libm.fmaf.argtypes = [ctypes.c_float] * 3

def fma32(a, b, c):
    """exact float32 fma: a*b exact in f64, a*b+c round-to-odd in f64, then RN to f32."""
    a, b, c = np.broadcast_arrays(np.asarray(a, F64), np.asarray(b, F64), np.asarray(c, F64))
    p = a * b; s = p + c
    bb = s - p; e = (p - (s - bb)) + (c - bb)
    need = (e != 0) & ((s.view(np.int64) & 1) == 0)
    s = np.where(need, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return s.astype(F32)

def butterfly(a):  # common.cuh:87-93 warp_sum, xor 16,8,4,2,1 (float32 adds)
    idx = np.arange(32)
    for off in (16, 8, 4, 2, 1):
        a = (a + a[..., idx ^ off]).astype(F32)
    return a

# ---- the four differing pieces, each in both flavours --------------------------------------
def norm_rs(x):  # delta_rule.cuh:21-29: per-lane fma over 4 consecutive channels, butterfly, sqrt, divide
    x4 = x.reshape(32, EPL); acc = np.zeros(32, F32)
    for j in range(EPL): acc = fma32(x4[:, j], x4[:, j], acc)
    ss = butterfly(acc)[0]
    return (x / np.sqrt(F32(ss + F32(1e-6)))).astype(F32)
def norm_np(x):  # fold.py:124: squares rounded, np.sum 1-D (pairwise, 8 accumulators), sqrt, divide
    ss = np.sum(x * x)
    return (x / np.sqrt(ss + F32(1e-6))).astype(F32)
def norm_np_recip(x):  # recurrent.py:441-446: same sum, then x * (1/sqrt)
    ss = np.sum(x * x)
    return (x * (F32(1.0) / np.sqrt(ss + F32(1e-6)))).astype(F32)
def exp_glibc(g): return F32(libm.expf(float(g)))          # emulator: <cmath> expf (simt.h:181)
def exp_numpy(g): return np.exp(np.asarray(g, F32))         # interpreter: np.exp on float32
def dot_rs(s, k):  # delta_rule.cuh:101-107: per-lane fma chain over channels 4l..4l+3, then butterfly
    s4 = s.reshape(V, 32, EPL); k4 = k.reshape(32, EPL); acc = np.zeros((V, 32), F32)
    for j in range(EPL): acc = fma32(s4[:, :, j], k4[:, j], acc)
    return butterfly(acc)[:, 0]
def dot_seq(s, k):  # fold.py:126 under interpreter: products rounded, np.sum axis 0 = sequential k=0..127
    p = (s * k[None, :]).astype(F32); acc = p[:, 0].copy()
    for i in range(1, K): acc = (acc + p[:, i]).astype(F32)
    return acc
def upd_fma(s, k, u): return fma32(u[:, None], k[None, :], s)        # delta_rule.cuh:112
def upd_muladd(s, k, u): return (s + (k[None, :] * u[:, None]).astype(F32)).astype(F32)  # fold.py:128

FLAV = dict(norm=dict(rs=norm_rs, np=norm_np, recip=norm_np_recip), exp=dict(rs=exp_glibc, np=exp_numpy),
            dot=dict(rs=dot_rs, np=dot_seq), upd=dict(rs=upd_fma, np=upd_muladd))

def run_f32(S, rk, rv, g, beta, cfg):
    S = S.copy()
    for t in range(T):
        k = FLAV["norm"][cfg["norm"]](rk[t]); d = FLAV["exp"][cfg["exp"]](g[t])
        s = (S * d).astype(F32)                                   # both: h*exp(g) rounded, before the dot
        u = ((rv[t] - FLAV["dot"][cfg["dot"]](s, k)).astype(F32) * beta[t]).astype(F32)  # both
        S = FLAV["upd"][cfg["upd"]](s, k, u)
    return S

def run_f64(S, rk, rv, g, beta):
    S = S.astype(F64)
    for t in range(T):
        k = rk[t].astype(F64); k = k / np.sqrt((k * k).sum() + F64(F32(1e-6)))
        S = S * np.exp(F64(g[t])); u = (rv[t] - S @ k) * F64(beta[t]); S = S + u[:, None] * k[None, :]
    return S

def problem(seed, sstd, alog=(0.0, np.log(16))):
    r = np.random.default_rng(seed)
    S0 = (r.standard_normal((HV, V, K)) * sstd).astype(F32)
    rk = r.standard_normal((HV, T, K)).astype(F32); rv = r.standard_normal((HV, T, V)).astype(F32)
    A_log = r.uniform(alog[0], alog[1], HV); dtb = r.normal(0, 0.1, HV); a = r.standard_normal((HV, T))
    g = (-np.exp(A_log)[:, None] * np.log1p(np.exp(a + dtb[:, None]))).astype(F32)
    beta = (1 / (1 + np.exp(-r.standard_normal((HV, T))))).astype(F32)
    return S0, rk, rv, g, beta

RS = dict(norm="rs", exp="rs", dot="rs", upd="rs"); SG = dict(norm="np", exp="np", dot="np", upd="np")

# ---- validation against the real kernels (bitwise) -----------------------------------------
def validate(seed, sstd, alog):
    S0, rk, rv, g, beta = problem(seed, sstd, alog)
    site = sysconfig.get_paths()["purelib"]
    path = glob.glob(site + "/sglang/kernels/ops/attention/linear/gdn_replayssm_spec_fold.py")[0]
    # As scripts/sglang-peer does: the interpreter's loop index is a plain int, with no .to().
    src, n = re.subn(r"phys = t\.to\(tl\.int64\)", "phys = t", open(path).read())
    assert n == 1, "the loop-index cast to patch is gone (SGLang changed?)"
    tmp = Path(tempfile.mkdtemp()) / "sgfold_patched.py"
    tmp.write_text(src)
    spec = importlib.util.spec_from_file_location("sgfold", tmp)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    st = torch.from_numpy(S0[None, None].copy())
    m.commit_gdn_replayssm_fold_all_layers(
        st, torch.from_numpy(rv[None, None].copy()), torch.from_numpy(rk[None, None].copy()),
        torch.from_numpy(g[None, None].copy()), torch.from_numpy(beta[None, None].copy()), torch.tensor([0]),
        torch.tensor([T]), T, HV)
    sg_real = st.numpy()[0, 0]
    sys.path.insert(0, str(ROOT / "python"))
    import replayssm.sglang as rsg
    st2 = S0[None, None].copy()
    rsg.commit_gdn_replayssm_fold_all_layers(st2, rv[None, None].copy(), rk[None, None].copy(), g[None, None].copy(),
        beta[None, None].copy(), np.array([0], np.int64), np.array([T], np.int64), T, HV)
    rs_real = st2[0, 0]
    for name, real, cfg in (("SGLang fold (interp)", sg_real, SG), ("replayssm fold (emulator)", rs_real, RS)):
        em = np.stack([run_f32(S0[h], rk[h], rv[h], g[h], beta[h], cfg) for h in range(HV)])
        print("validate %-26s emulation bit-identical: %s (elements differing: %d)" % (name, np.array_equal(em, real), (em != real).sum()))
    print("validate real-vs-real max|diff| = %.3g" % np.abs(sg_real - rs_real).max())

def fma_selftest(n=200000):
    r = np.random.default_rng(7); a, b, c = (r.standard_normal((3, n)) * r.uniform(0.01, 10, (3, n))).astype(F32)
    idx = r.choice(n, 3000, replace=False); mine = fma32(a, b, c)
    ok = all(mine[i] == F32(libm.fmaf(float(a[i]), float(b[i]), float(c[i]))) for i in idx)
    print("fma32 vs libm fmaf on 3000 samples:", ok)

def measure(seeds, sstd, cfgs, alog):
    out = {n: [] for n in cfgs}; ref = []
    for sd in seeds:
        S0, rk, rv, g, beta = problem(sd, sstd, alog)
        for h in range(HV):
            ref.append(run_f64(S0[h], rk[h], rv[h], g[h], beta[h]))
            for n, c in cfgs.items(): out[n].append(run_f32(S0[h], rk[h], rv[h], g[h], beta[h], c))
    ref = np.stack(ref); return {n: np.stack(v) for n, v in out.items()}, ref

def ulp(x): return np.spacing(np.abs(x).astype(F32)).astype(F64)

def exp_accuracy(n=20000):
    """How far each f32 exp is from exp(g) (f64), in ulps of the correctly rounded f32 value, over
    the decays a gate forms."""
    r = np.random.default_rng(0)
    for lo, hi in ((-0.1, -1e-3), (-1, -0.1), (-5, -1), (-40, -5)):
        g = r.uniform(lo, hi, n).astype(F32)
        exact = np.exp(g.astype(F64))
        rounded = exact.astype(F32).astype(F64)
        spacing = np.spacing(rounded.astype(F32)).astype(F64)
        npv = np.exp(g).astype(F64)
        gl = np.array([libm.expf(float(x)) for x in g], F64)
        print("exp, g in [%g, %g]: numpy float32 exp != correctly rounded %.1f %%, max %.2f ulp; glibc expf %.2f %%, "
              "max %.2f ulp" % (lo, hi, 100 * (npv != rounded).mean(), (np.abs(npv - exact) / spacing).max(),
                                100 * (gl != rounded).mean(), (np.abs(gl - exact) / spacing).max()))


if __name__ == "__main__":
    fma_selftest()
    exp_accuracy()
    cfgs = {"RS": RS, "SG": SG}
    for part in ("norm", "exp", "dot", "upd"):
        cfgs["RS+sg_" + part] = dict(RS, **{part: "np"})
    for part in ("norm", "exp", "dot", "upd"):
        cfgs["SG+rs_" + part] = dict(SG, **{part: "rs"})
    cfgs["SG_recur_norm"] = dict(SG, norm="recip")
    cases = [(128, 128, 0.1, (0.0, np.log(16)), "strong decay"), (128, 128, 1.0, (0.0, np.log(16)), "strong decay"),
             (128, 128, 1.0, (np.log(1e-3), np.log(3e-2)), "weak decay"), (32, 32, 0.1, (0.0, np.log(16)), "golden-like K=32")]
    for (k_, v_, sstd, alog, label) in cases:
        globals().update(K=k_, V=v_, EPL=k_ // 32)

        validate(1, sstd, alog)
        out, ref = measure(range(10, 10 + int(os.environ.get("NSEEDS", 16))), sstd, cfgs, alog)
        print("== K=V=%d S0 std %.1f %s: %d heads x %d tokens; max|ref| %.2f ==" % (K, sstd, label, ref.shape[0], T, np.abs(ref).max()))
        print("%-14s %9s %9s %9s %6s %9s %10s" % ("config", "max|-RS|", "max|-SG|", "rms|-SG|", "%!=SG", "maxerr64", "meanerr64"))
        for n, x in out.items():
            d = np.abs(x.astype(F64) - out["SG"]); e = np.abs(x.astype(F64) - ref)
            print("%-14s %9.3e %9.3e %9.3e %6.2f %9.3e %10.4e" % (n, np.abs(x - out["RS"]).max(), d.max(), np.sqrt((d ** 2).mean()),
                  100 * (d > 0).mean(), e.max(), e.mean()))
        big = (np.abs(ref) >= 2) & (np.abs(ref) < 4)
        if big.any():
            for n in ("RS", "SG"):
                e = np.abs(out[n].astype(F64) - ref)[big]
                print("  2<=|ref|<4 (%d elems): %s maxerr %.3e meanerr %.3e; max|RS-SG| there %.3e" % (big.sum(), n, e.max(), e.mean(),
                      np.abs(out["RS"] - out["SG"])[big].max()))
