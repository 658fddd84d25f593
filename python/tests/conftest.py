import math
import sys

import numpy as np
import pytest


def pytest_terminal_summary(terminalreporter):
    # test_hostile.py's tally of the bad inputs it fed the binding (issue 19), one line.
    mod = sys.modules.get("test_hostile")
    if mod is not None and mod.TALLY["inputs"]:
        t = mod.TALLY
        terminalreporter.write_line("python hostile inputs: %d inputs, %d crashes, %d silent accepts"
                                    % (t["inputs"], t["crashes"], t["silent"]))


def delta_rule_reference(q, k, v, g, beta, state, slots, cu_seqlens, scale, l2norm=True):
    """Kernel R's maths (design §3) in float64 with a precomputed gate, written independently
    of the crate: g is the log decay [T, HV] (GDN) or [T, HV, K] (KDA). Returns (o, final states)."""
    T, H, K = q.shape
    HV, V = v.shape[1], v.shape[2]
    o = np.zeros((T, HV, V))
    state = state.astype(np.float64).copy()
    for r in range(len(slots)):
        if slots[r] < 0:
            continue
        S = state[slots[r]]
        for t in range(cu_seqlens[r], cu_seqlens[r + 1]):
            for hv in range(HV):
                h = hv // (HV // H)
                kk = k[t, h].astype(np.float64)
                qq = q[t, h].astype(np.float64)
                if l2norm:
                    kk = kk / np.sqrt((kk * kk).sum() + 1e-6)
                    qq = qq / np.sqrt((qq * qq).sum() + 1e-6)
                qq = qq * scale
                S[hv] *= np.exp(g[t, hv].astype(np.float64))
                u = (v[t, hv].astype(np.float64) - S[hv] @ kk) * float(beta[t, hv])
                S[hv] += np.outer(u, kk)
                o[t, hv] = S[hv] @ qq
    return o, state


class Problem:
    """Fresh random inputs of kernel R with a precomputed gate (seeded per test)."""

    def __init__(self, rng, seqlens, H=2, HV=4, K=32, V=32, kda=False, dtype=np.float32, null=(), spare=1):
        T = sum(seqlens)
        self.H, self.HV, self.K, self.V, self.kda = H, HV, K, V, kda
        self.q = rng.uniform(-1, 1, (T, H, K)).astype(dtype)
        self.k = rng.uniform(-1, 1, (T, H, K)).astype(dtype)
        self.v = rng.uniform(-1, 1, (T, HV, V)).astype(dtype)
        self.g = rng.uniform(-1.0, -0.01, (T, HV, K) if kda else (T, HV)).astype(np.float32)
        self.beta = rng.uniform(0.05, 0.95, (T, HV)).astype(np.float32)
        self.cu_seqlens = np.concatenate([[0], np.cumsum(seqlens)]).astype(np.int32)
        ns = len(seqlens) + spare
        perm = rng.permutation(ns).astype(np.int32)
        self.slots = np.array([-1 if r in null else perm[r] for r in range(len(seqlens))], dtype=np.int32)
        self.state = rng.uniform(-0.5, 0.5, (ns, HV, V, K)).astype(np.float32)
        self.scale = K ** -0.5


@pytest.fixture
def rng(request):
    # A fresh, reproducible stream per test.
    return np.random.default_rng(abs(hash(request.node.name)) % (2 ** 32))


def envelope(packed, extra=3):
    """`packed` [NL, NS, HV, V, K] as SGLang's page-major "envelope" pool lays it out: one entry per
    slot holding every layer's checkpoint (and `extra` elements of other state, the conv state
    there), so a layer's view has a pitch of a whole entry. Returns the all-layer view."""
    NL, NS = packed.shape[:2]
    blk = math.prod(packed.shape[2:])
    entry = NL * blk + 4 * extra
    raw = np.full(NS * entry, np.nan, np.float32)
    view = np.lib.stride_tricks.as_strided(raw, shape=packed.shape,
                                           strides=(blk * 4, entry * 4) + packed.strides[2:])
    view[...] = packed
    return view, raw
