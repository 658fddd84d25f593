// SIMT emulator runtime: fibers, the per-block scheduler, warp collectives, launches.
#include "simt.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace rssm_emu {
namespace {

constexpr size_t kStackBytes = 256 * 1024;
constexpr unsigned kMaxThreadsPerBlock = 1024;
constexpr size_t kMaxDynamicSmem = 227 * 1024;  // sm_90 opt-in maximum per block

#if defined(__x86_64__)
// Minimal context switch: saves the callee-saved registers on the old stack, stores its stack
// pointer, loads the new one and restores the same set from it. The floating-point environment
// (MXCSR, x87 control word) is shared by all fibers: kernels never change it.
extern "C" void rssm_emu_switch(void **save_sp, void *load_sp);
asm(R"(
  .text
  .globl rssm_emu_switch
  .type rssm_emu_switch,@function
rssm_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size rssm_emu_switch, .-rssm_emu_switch
  .section .note.GNU-stack,"",@progbits
  .text
)");
#endif

enum class Wait { Runnable, Barrier, Warp, Done };

struct Fiber {
  ThreadCtx ctx{};
  Wait wait = Wait::Runnable;
  Collective op = Collective::SyncWarp;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0;
  int width = 32;
  uint64_t result = 0;
  void *stack = nullptr;
#if defined(__x86_64__)
  void *sp = nullptr;
#else
  ucontext_t uc;
#endif
};

struct Worker;
thread_local Worker *tl_worker = nullptr;
thread_local Fiber *tl_fiber = nullptr;
thread_local std::string tl_last_error;
ThreadCtx g_no_fiber_ctx{};  // ctx() outside a kernel: all zeros

struct Worker {
  std::vector<std::unique_ptr<Fiber>> fibers;
  std::vector<unsigned char> smem;
  const KernelBody *body = nullptr;
#if defined(__x86_64__)
  void *sched_sp = nullptr;
#else
  ucontext_t sched_uc;
#endif
  std::string error;
  uint64_t rng = 0;
  // The lanes of the current round, resumed in this order: a fiber that blocks switches
  // straight to the next one (one switch per lane instead of two through the scheduler).
  Fiber *chain[32];
  unsigned chain_len = 0, chain_pos = 0;

  ~Worker() {
    for (auto &f : fibers)
      if (f->stack) munmap(f->stack, kStackBytes);
  }

  uint64_t next_random() {  // xorshift64*
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
  }

  // Uniform in [0, n) without a division.
  unsigned below(unsigned n) { return static_cast<unsigned>(((next_random() >> 32) * n) >> 32); }

  void fail(const std::string &msg) {
    if (error.empty()) error = msg;
  }
};

[[noreturn]] void fiber_exit();

void fiber_entry() {
  Worker *w = tl_worker;
  (*w->body)();
  fiber_exit();
}

#if !defined(__x86_64__)
void fiber_entry_uc() { fiber_entry(); }
#endif

// The running fiber blocked (or exited): run the next fiber of the round, or return to the
// scheduler after the last one.
void switch_to_scheduler() {
  Worker *w = tl_worker;
  Fiber *f = tl_fiber;
  if (++w->chain_pos < w->chain_len) {
    Fiber *next = w->chain[w->chain_pos];
    tl_fiber = next;
#if defined(__x86_64__)
    rssm_emu_switch(&f->sp, next->sp);
#else
    swapcontext(&f->uc, &next->uc);
#endif
    return;
  }
#if defined(__x86_64__)
  rssm_emu_switch(&f->sp, w->sched_sp);
#else
  swapcontext(&f->uc, &w->sched_uc);
#endif
}

[[noreturn]] void fiber_exit() {
  tl_fiber->wait = Wait::Done;
  switch_to_scheduler();
  std::abort();  // a finished fiber is never resumed
}

// Runs chain[0..len) one after another, each until it blocks; returns when the last blocks.
void run_chain(Worker *w, unsigned len) {
  if (len == 0) return;
  w->chain_len = len;
  w->chain_pos = 0;
  Fiber *f = w->chain[0];
  tl_fiber = f;
#if defined(__x86_64__)
  rssm_emu_switch(&w->sched_sp, f->sp);
#else
  swapcontext(&w->sched_uc, &f->uc);
#endif
  tl_fiber = nullptr;
}

void reset_fiber(Fiber *f, unsigned index) {
  if (!f->stack) {
    f->stack = mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (f->stack == MAP_FAILED) {
      std::fprintf(stderr, "rssm_emu: cannot map a fiber stack\n");
      std::abort();
    }
  }
  f->wait = Wait::Runnable;
#if defined(__x86_64__)
  // Initial frame as rssm_emu_switch expects it; on entry rsp % 16 == 8 as after a call.
  // Stacks are page aligned; staggering their tops keeps the hot top lines of 1024 fibers from
  // all landing in the same cache sets (which made every switch a cache miss).
  const size_t stagger = (index % 61) * 1088;
  auto *top = reinterpret_cast<uint64_t *>(static_cast<char *>(f->stack) + kStackBytes - stagger);
  top[-1] = 0;                                          // fake return address of fiber_entry
  top[-2] = reinterpret_cast<uint64_t>(&fiber_entry);  // popped by ret
  for (int i = 3; i <= 8; ++i) top[-i] = 0;            // rbp rbx r12 r13 r14 r15
  f->sp = &top[-8];
#else
  getcontext(&f->uc);
  f->uc.uc_stack.ss_sp = f->stack;
  f->uc.uc_stack.ss_size = kStackBytes;
  f->uc.uc_link = nullptr;
  makecontext(&f->uc, fiber_entry_uc, 0);
#endif
}

const char *op_name(Collective op) {
  switch (op) {
    case Collective::Shfl: return "__shfl_sync";
    case Collective::ShflXor: return "__shfl_xor_sync";
    case Collective::ShflDown: return "__shfl_down_sync";
    case Collective::ShflUp: return "__shfl_up_sync";
    case Collective::All: return "__all_sync";
    case Collective::Any: return "__any_sync";
    case Collective::Ballot: return "__ballot_sync";
    case Collective::SyncWarp: return "__syncwarp";
  }
  return "?";
}

// Completes the collective of one warp whose 32 lanes have all arrived.
bool resolve_warp(Worker *w, Fiber **lanes, const char *kernel) {
  const Collective op = lanes[0]->op;
  const int width = lanes[0]->width;
  for (int l = 0; l < 32; ++l) {
    Fiber *f = lanes[l];
    if (f->op != op || f->mask != 0xffffffffu || f->width != width) {
      char buf[256];
      std::snprintf(buf, sizeof buf,
                    "%s: divergent or partial warp collective in warp %u of block (%u,%u,%u): lane 0 at %s, "
                    "lane %d at %s with mask 0x%x",
                    kernel, f->ctx.thread_idx.x / 32, f->ctx.block_idx.x, f->ctx.block_idx.y, f->ctx.block_idx.z,
                    op_name(op), l, op_name(f->op), f->mask);
      w->fail(buf);
      return false;
    }
  }
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    w->fail(std::string(kernel) + ": shuffle width must be a power of two <= 32");
    return false;
  }
  uint64_t vote = 0;
  for (int l = 0; l < 32; ++l) vote |= (lanes[l]->value & 1u) << l;
  for (int l = 0; l < 32; ++l) {
    Fiber *f = lanes[l];
    const int seg = l & ~(width - 1), in_seg = l & (width - 1);
    int src = l;
    switch (op) {
      case Collective::Shfl: src = seg + (((f->arg % width) + width) % width); break;
      case Collective::ShflXor: {
        const int t = l ^ f->arg;
        src = (t >= seg && t < seg + width && t < 32 && t >= 0) ? t : l;
        break;
      }
      case Collective::ShflDown: src = in_seg + f->arg < width ? l + f->arg : l; break;
      case Collective::ShflUp: src = in_seg - f->arg >= 0 ? l - f->arg : l; break;
      default: break;
    }
    switch (op) {
      case Collective::All: f->result = vote == 0xffffffffull; break;
      case Collective::Any: f->result = vote != 0; break;
      case Collective::Ballot: f->result = vote; break;
      case Collective::SyncWarp: f->result = 0; break;
      default: f->result = lanes[src]->value; break;
    }
  }
  for (int l = 0; l < 32; ++l) lanes[l]->wait = Wait::Runnable;
  return true;
}

// Runs one block to completion (or to the first error) on this host thread.
void run_block(Worker *w, const char *kernel, dim3 grid, dim3 block, uint3 bidx, size_t smem_bytes) {
  const unsigned n = block.x * block.y * block.z;
  while (w->fibers.size() < n) w->fibers.push_back(std::make_unique<Fiber>());
  if (smem_bytes) std::memset(w->smem.data(), 0xFF, smem_bytes);
  for (unsigned i = 0; i < n; ++i) {
    Fiber *f = w->fibers[i].get();
    reset_fiber(f, i);
    f->ctx.thread_idx = {i % block.x, (i / block.x) % block.y, i / (block.x * block.y)};
    f->ctx.block_idx = bidx;
    f->ctx.block_dim = block;
    f->ctx.grid_dim = grid;
  }
  const unsigned nwarps = (n + 31) / 32;
  std::vector<unsigned> warp_order(nwarps);
  for (;;) {
    // One phase between block barriers: warps in a fresh random order; each warp runs until
    // every lane waits at a barrier or has exited, its collectives completing as they fill.
    for (unsigned i = 0; i < nwarps; ++i) warp_order[i] = i;
    for (unsigned i = nwarps; i > 1; --i) std::swap(warp_order[i - 1], warp_order[w->below(i)]);
    for (unsigned wi : warp_order) {
      const unsigned count = std::min(32u, n - wi * 32);
      Fiber *lanes[32];
      for (unsigned l = 0; l < count; ++l) lanes[l] = w->fibers[wi * 32 + l].get();
      for (;;) {
        // Resume the runnable lanes in a fresh random order.
        unsigned m = 0;
        for (unsigned l = 0; l < count; ++l)
          if (lanes[l]->wait == Wait::Runnable) w->chain[m++] = lanes[l];
        if (m == 0) break;
        for (unsigned i = m; i > 1; --i) std::swap(w->chain[i - 1], w->chain[w->below(i)]);
        run_chain(w, m);
        unsigned arrived = 0, done = 0;
        for (unsigned l = 0; l < count; ++l) {
          arrived += lanes[l]->wait == Wait::Warp;
          done += lanes[l]->wait == Wait::Done;
        }
        if (arrived == 0) break;               // all at the barrier or exited
        if (arrived + done < count) continue;  // cannot happen: every lane blocked somewhere
        if (count < 32 || done) {
          char buf[200];
          std::snprintf(buf, sizeof buf,
                        "%s: full-mask warp collective in warp %u of block (%u,%u,%u) with %u of 32 lanes present "
                        "(partial warp or exited lanes)",
                        kernel, wi, bidx.x, bidx.y, bidx.z, count - done);
          w->fail(buf);
          return;
        }
        if (!resolve_warp(w, lanes, kernel)) return;
      }
    }
    unsigned at_barrier = 0, live = 0, at_warp = 0;
    for (unsigned i = 0; i < n; ++i) {
      const Wait st = w->fibers[i]->wait;
      live += st != Wait::Done;
      at_barrier += st == Wait::Barrier;
      at_warp += st == Wait::Warp;
    }
    if (live == 0) return;
    if (at_barrier == live) {
      for (unsigned i = 0; i < n; ++i)
        if (w->fibers[i]->wait == Wait::Barrier) w->fibers[i]->wait = Wait::Runnable;
      continue;
    }
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "%s: deadlock in block (%u,%u,%u): %u threads wait at __syncthreads while %u wait at a warp "
                  "collective that cannot complete",
                  kernel, bidx.x, bidx.y, bidx.z, at_barrier, at_warp);
    w->fail(buf);
    return;
  }
}

uint64_t g_launch_counter = 0;
std::mutex g_launch_mutex;

// Workers (and their fibers' stacks) are reused across launches: mapping 128 stacks per launch
// cost far more than the kernels themselves.
std::mutex g_idle_mutex;
std::vector<std::unique_ptr<Worker>> g_idle_workers;

std::unique_ptr<Worker> acquire_worker() {
  std::lock_guard<std::mutex> lock(g_idle_mutex);
  if (g_idle_workers.empty()) return std::make_unique<Worker>();
  std::unique_ptr<Worker> w = std::move(g_idle_workers.back());
  g_idle_workers.pop_back();
  return w;
}

void release_worker(std::unique_ptr<Worker> w) {
  w->body = nullptr;
  w->error.clear();
  std::lock_guard<std::mutex> lock(g_idle_mutex);
  g_idle_workers.push_back(std::move(w));
}

uint64_t base_seed() {
  static const uint64_t seed = [] {
    const char *s = std::getenv("REPLAYSSM_EMU_SEED");
    return s ? std::strtoull(s, nullptr, 0) : 0x5EED5EEDull;
  }();
  return seed;
}

unsigned host_threads() {
  static const unsigned n = [] {
    const char *s = std::getenv("REPLAYSSM_EMU_THREADS");
    unsigned v = s ? static_cast<unsigned>(std::strtoul(s, nullptr, 10)) : std::thread::hardware_concurrency();
    return v == 0 ? 1u : v;
  }();
  return n;
}

}  // namespace

ThreadCtx &ctx() { return tl_fiber ? tl_fiber->ctx : g_no_fiber_ctx; }

void syncthreads() {
  if (!tl_fiber) return;
  tl_fiber->wait = Wait::Barrier;
  switch_to_scheduler();
}

uint64_t warp_collective(Collective op, unsigned mask, uint64_t value, int arg, int width) {
  Fiber *f = tl_fiber;
  if (!f) return value;
  f->wait = Wait::Warp;
  f->op = op;
  f->mask = mask;
  f->value = value;
  f->arg = arg;
  f->width = width;
  switch_to_scheduler();
  return f->result;
}

void *dynamic_smem() { return tl_worker ? tl_worker->smem.data() : nullptr; }

const char *last_error() { return tl_last_error.c_str(); }

int launch(const char *name, dim3 grid, dim3 block, size_t smem_bytes, const KernelBody &body) {
  tl_last_error.clear();
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  char buf[256];
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 ||
      smem_bytes > kMaxDynamicSmem) {
    std::snprintf(buf, sizeof buf,
                  "%s: invalid launch configuration: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared "
                  "memory",
                  name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes);
    tl_last_error = buf;
    return 1;
  }
  uint64_t seed;
  {
    std::lock_guard<std::mutex> lock(g_launch_mutex);
    seed = base_seed() ^ (0x9E3779B97F4A7C15ull * ++g_launch_counter);
  }
  const uint64_t nblocks = uint64_t(grid.x) * grid.y * grid.z;
  const unsigned nworkers = static_cast<unsigned>(std::min<uint64_t>(host_threads(), nblocks));
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::string first_error;
  std::mutex error_mutex;

  auto work = [&]() {
    std::unique_ptr<Worker> owned = acquire_worker();
    Worker &w = *owned;
    w.body = &body;
    if (w.smem.size() < std::max<size_t>(smem_bytes, 16)) w.smem.resize(std::max<size_t>(smem_bytes, 16));
    Worker *saved_worker = tl_worker;
    tl_worker = &w;
    for (;;) {
      const uint64_t i = next.fetch_add(1);
      if (i >= nblocks || failed.load()) break;
      w.rng = (seed + 0x9E3779B97F4A7C15ull * (i + 1)) | 1;
      const uint3 bidx = {unsigned(i % grid.x), unsigned((i / grid.x) % grid.y), unsigned(i / (uint64_t(grid.x) * grid.y))};
      run_block(&w, name, grid, block, bidx, smem_bytes);
      if (!w.error.empty()) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (first_error.empty()) first_error = w.error;
        failed.store(true);
        break;
      }
    }
    tl_worker = saved_worker;
    release_worker(std::move(owned));
  };
  if (nworkers <= 1) {
    work();
  } else {
    // The caller works too; nworkers - 1 helpers join it.
    std::vector<std::thread> helpers;
    for (unsigned t = 1; t < nworkers; ++t) helpers.emplace_back(work);
    work();
    for (auto &t : helpers) t.join();
  }
  if (failed.load()) {
    tl_last_error = first_error;
    return 1;
  }
  return 0;
}

}  // namespace rssm_emu

// IEEE binary16 conversions, round to nearest even (as __float2half_rn).
float __half2float(__half h) {
  const uint32_t sign = (h.bits & 0x8000u) << 16, exp = (h.bits >> 10) & 0x1f, man = h.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalise
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      u = sign | uint32_t(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | man << 13;
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

__half __float2half(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t absu = u & 0x7fffffffu;
  if (absu > 0x7f800000u) return {static_cast<uint16_t>(sign | 0x7e00u)};
  if (absu >= 0x477ff000u) return {static_cast<uint16_t>(sign | 0x7c00u)};  // rounds to inf
  if (absu < 0x38800000u) {                                                // subnormal or zero in f16
    float a;
    std::memcpy(&a, &absu, 4);
    // a * 2^24 lies in [0, 1024): the integer nearest-even is the subnormal mantissa.
    const float scaled = a * 16777216.0f;
    return {static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)))};
  }
  uint32_t r = absu + 0xfffu + ((absu >> 13) & 1u);
  return {static_cast<uint16_t>(sign | ((r - 0x38000000u) >> 13))};
}

extern "C" const char *rssm_emu_last_error(void) { return rssm_emu::last_error(); }
