// SIMT emulator runtime: fibers, the per-block scheduler, warp collectives, launches.
//
// Resources. A launch never aborts the process: when it cannot get memory or threads it returns
// an error (a message in last_error()), or runs on the threads it could start. What it may take:
//   - worker threads: REPLAYSSM_EMU_THREADS (default: the CPUs this process may run on), at most
//     kMaxHostThreads (64), at most one per block, and few enough that their fiber stacks
//     (threads per block x 256 KiB each) stay within kFiberStackBudget (1 GiB) per launch;
//   - the calling thread is worker 0; the others run on helper threads created per launch with
//     kHelperStackBytes (1 MiB) stacks (kernel code runs on the fiber stacks, not on these);
//   - idle workers keep their fiber stacks for the next launch, at most kMaxHostThreads of them
//     and kFiberStackBudget of stacks in all; the rest are unmapped when a launch ends.
// Everything a launch allocates is allocated by the calling thread before the helpers start, so
// a failure is an error status (or fewer helpers), and the helpers themselves allocate nothing.
#include "simt.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__GLIBC__)
#include <link.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <new>
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
// Most host threads one launch runs blocks on (REPLAYSSM_EMU_THREADS above it is clamped).
constexpr unsigned kMaxHostThreads = 64;
// Most fiber-stack bytes one launch maps (workers x threads per block x kStackBytes), and most
// the idle workers keep between launches. 1024-thread blocks: 4 workers; 128-thread blocks: 32.
constexpr uint64_t kFiberStackBudget = uint64_t(1) << 30;
// Stack of a helper thread: only the scheduler runs on it.
constexpr size_t kHelperStackBytes = size_t(1) << 20;
// Longest error message (longer ones are truncated).
constexpr size_t kMaxMessage = 512;

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

// Where a suspended context resumes: its stack pointer (x86-64: rssm_emu_switch saved the
// callee-saved registers on that stack), or a ucontext elsewhere.
struct SavedRegs {
#if defined(__x86_64__)
  void *sp = nullptr;
#else
  ucontext_t uc;
#endif
};

// Suspends the running context into `from` and resumes `to`.
inline void jump(SavedRegs &from, SavedRegs &to) {
#if defined(__x86_64__)
  rssm_emu_switch(&from.sp, to.sp);
#else
  swapcontext(&from.uc, &to.uc);
#endif
}

struct Fiber {
  ThreadCtx ctx{};
  Wait wait = Wait::Runnable;
  Collective op = Collective::SyncWarp;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0;
  int width = 32;
  uint64_t result = 0;
  void *stack = nullptr;  // kStackBytes, mapped by prepare_worker
  SavedRegs regs;

  Fiber() = default;
  Fiber(const Fiber &) = delete;
  Fiber &operator=(const Fiber &) = delete;
  ~Fiber() {
    if (stack) munmap(stack, kStackBytes);
  }
};

// Copies `msg` into `buf` (kMaxMessage bytes), truncated, always terminated; no allocation.
void set_message(char *buf, const char *msg) { std::snprintf(buf, kMaxMessage, "%s", msg); }

struct Worker;
thread_local Worker *tl_worker = nullptr;
thread_local Fiber *tl_fiber = nullptr;
// A plain array: recording an error must never allocate (it reports running out of memory).
thread_local char tl_last_error[kMaxMessage];
ThreadCtx g_no_fiber_ctx{};  // ctx() outside a kernel: all zeros

struct Worker {
  std::vector<std::unique_ptr<Fiber>> fibers;  // every one with a stack
  std::vector<unsigned char> smem;
  std::vector<unsigned> warp_order;
  const KernelBody *body = nullptr;
  SavedRegs sched;  // the scheduler's, while a fiber runs
  char error[kMaxMessage] = {};
  uint64_t rng = 0;
  // The lanes of the current round, resumed in this order: a fiber that blocks switches
  // straight to the next one (one switch per lane instead of two through the scheduler).
  Fiber *chain[32];
  unsigned chain_len = 0, chain_pos = 0;

  uint64_t stack_bytes() const { return uint64_t(fibers.size()) * kStackBytes; }

  uint64_t next_random() {  // xorshift64*
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545F4914F6CDD1DULL;
  }

  // Uniform in [0, n) without a division.
  unsigned below(unsigned n) { return static_cast<unsigned>(((next_random() >> 32) * n) >> 32); }

  void fail(const char *msg) {
    if (!error[0]) set_message(error, msg);
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
    jump(f->regs, next->regs);
    return;
  }
  jump(f->regs, w->sched);
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
  jump(w->sched, f->regs);
  tl_fiber = nullptr;
}

// Sets up a fiber (its stack already mapped) to start the kernel body.
void reset_fiber(Fiber *f, unsigned index) {
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
  f->regs.sp = &top[-8];
#else
  (void)index;
  getcontext(&f->regs.uc);
  f->regs.uc.uc_stack.ss_sp = f->stack;
  f->regs.uc.uc_stack.ss_size = kStackBytes;
  f->regs.uc.uc_link = nullptr;
  makecontext(&f->regs.uc, fiber_entry_uc, 0);
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
  char buf[kMaxMessage];
  for (int l = 0; l < 32; ++l) {
    Fiber *f = lanes[l];
    if (f->op != op || f->mask != 0xffffffffu || f->width != width) {
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
    std::snprintf(buf, sizeof buf, "%s: shuffle width must be a power of two <= 32", kernel);
    w->fail(buf);
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

// Runs one block to completion (or to the first error) on this host thread. The worker was
// prepared for blocks of this size (prepare_worker): nothing here allocates.
void run_block(Worker *w, const char *kernel, dim3 grid, dim3 block, uint3 bidx, size_t smem_bytes) {
  const unsigned n = block.x * block.y * block.z;
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
  unsigned *warp_order = w->warp_order.data();
  char buf[kMaxMessage];
  for (;;) {
    // One phase between block barriers: warps in a fresh random order; each warp runs until
    // every lane waits at a barrier or has exited, its collectives completing as they fill.
    for (unsigned i = 0; i < nwarps; ++i) warp_order[i] = i;
    for (unsigned i = nwarps; i > 1; --i) std::swap(warp_order[i - 1], warp_order[w->below(i)]);
    for (unsigned oi = 0; oi < nwarps; ++oi) {
      const unsigned wi = warp_order[oi];
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
    std::snprintf(buf, sizeof buf,
                  "%s: deadlock in block (%u,%u,%u): %u threads wait at __syncthreads while %u wait at a warp "
                  "collective that cannot complete",
                  kernel, bidx.x, bidx.y, bidx.z, at_barrier, at_warp);
    w->fail(buf);
    return;
  }
}

// Makes `w` ready for blocks of `n` threads: `n` fibers with mapped stacks (at most
// `keep_fibers` kept from earlier launches), the shared memory and the warp order. Returns false
// when a stack cannot be mapped (the worker keeps the fibers it has); throws std::bad_alloc.
bool prepare_worker(Worker &w, unsigned n, size_t smem_bytes, size_t keep_fibers) {
  if (w.fibers.size() > keep_fibers) w.fibers.erase(w.fibers.begin() + keep_fibers, w.fibers.end());
  const size_t smem = std::max<size_t>(smem_bytes, 16);
  if (w.smem.size() < smem) w.smem.resize(smem);
  const size_t nwarps = (n + 31) / 32;
  if (w.warp_order.size() < nwarps) w.warp_order.resize(nwarps);
  w.fibers.reserve(n);
  while (w.fibers.size() < n) {
    std::unique_ptr<Fiber> f(new Fiber);
    void *stack =
        mmap(nullptr, kStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stack == MAP_FAILED) return false;
    f->stack = stack;
    w.fibers.push_back(std::move(f));  // cannot throw: capacity reserved
  }
  return true;
}

// Workers (and their fibers' stacks) are reused across launches: mapping 128 stacks per launch
// cost far more than the kernels themselves. The pool is bounded (kMaxHostThreads workers,
// kFiberStackBudget of stacks) and never allocates.
std::mutex g_idle_mutex;
Worker *g_idle_workers[kMaxHostThreads];
unsigned g_idle_count = 0;
uint64_t g_idle_stack_bytes = 0;

// A pooled worker, or a new one (throws std::bad_alloc).
std::unique_ptr<Worker> acquire_worker() {
  {
    std::lock_guard<std::mutex> lock(g_idle_mutex);
    if (g_idle_count > 0) {
      Worker *w = g_idle_workers[--g_idle_count];
      g_idle_stack_bytes -= w->stack_bytes();
      return std::unique_ptr<Worker>(w);
    }
  }
  return std::unique_ptr<Worker>(new Worker);
}

// Back to the pool, or freed (stacks unmapped) when the pool is full.
void release_worker(std::unique_ptr<Worker> w) {
  if (!w) return;
  w->body = nullptr;
  w->error[0] = 0;
  {
    std::lock_guard<std::mutex> lock(g_idle_mutex);
    if (g_idle_count < kMaxHostThreads && g_idle_stack_bytes + w->stack_bytes() <= kFiberStackBudget) {
      g_idle_stack_bytes += w->stack_bytes();
      g_idle_workers[g_idle_count++] = w.release();
      return;
    }
  }
  w.reset();  // outside the lock: unmapping many stacks takes a while
}

// Frees every idle worker (when a launch is short of memory, the stacks they keep go first).
void drain_idle_workers() {
  for (;;) {
    std::unique_ptr<Worker> w;
    {
      std::lock_guard<std::mutex> lock(g_idle_mutex);
      if (g_idle_count == 0) return;
      w.reset(g_idle_workers[--g_idle_count]);
      g_idle_stack_bytes -= w->stack_bytes();
    }
  }
}

// --- Environment ---------------------------------------------------------------------------

// An environment variable's value as messages quote it: printable ASCII, the rest escaped,
// at most 64 bytes of it.
void quote_value(const char *s, char *out, size_t cap) {
  size_t o = 0;
  auto put = [&](const char *piece) {
    for (; *piece && o + 1 < cap; ++piece) out[o++] = *piece;
  };
  size_t i = 0;
  for (; s[i] && i < 64; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    char esc[8];
    if (c == '"' || c == '\\') {
      esc[0] = '\\';
      esc[1] = static_cast<char>(c);
      esc[2] = 0;
    } else if (c >= 0x20 && c < 0x7f) {
      esc[0] = static_cast<char>(c);
      esc[1] = 0;
    } else {
      std::snprintf(esc, sizeof esc, "\\x%02x", c);
    }
    put(esc);
  }
  if (s[i]) put("...");
  out[o] = 0;
}

// A parsed environment setting: its value, or why it was refused.
struct Setting {
  bool ok = true;
  uint64_t value = 0;
  char message[kMaxMessage] = {};
};

// The CPUs this process may run on (its affinity mask), else the online CPUs, at least 1.
unsigned available_cpus() {
#if defined(__GLIBC__) && defined(CPU_COUNT)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
#endif
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1u : n;
}

// A variable whose value does not parse: the message names it, quotes the value and says what it
// must be.
Setting refused(const char *var, const char *s, const char *must_be) {
  Setting r;
  char q[300];
  quote_value(s, q, sizeof q);
  r.ok = false;
  std::snprintf(r.message, sizeof r.message, "%s = \"%s\" is not %s", var, q, must_be);
  return r;
}

// REPLAYSSM_EMU_THREADS: decimal digits only, at least 1; above kMaxHostThreads clamped.
Setting parse_threads(const char *s) {
  Setting r;
  if (!s) {
    r.value = std::min(available_cpus(), kMaxHostThreads);
    return r;
  }
  bool digits = s[0] != 0;
  uint64_t v = 0;
  for (const char *p = s; *p; ++p) {
    if (*p < '0' || *p > '9') {
      digits = false;
      break;
    }
    v = std::min<uint64_t>(v * 10 + uint64_t(*p - '0'), uint64_t(1) << 40);  // saturates: clamped below
  }
  if (!digits || v == 0) {
    char must_be[200];
    std::snprintf(must_be, sizeof must_be,
                  "an integer in 1..=%u (decimal digits: the host threads the SIMT emulator runs blocks on; "
                  "larger values are clamped to %u)",
                  kMaxHostThreads, kMaxHostThreads);
    return refused("REPLAYSSM_EMU_THREADS", s, must_be);
  }
  r.value = std::min<uint64_t>(v, kMaxHostThreads);
  return r;
}

// REPLAYSSM_EMU_SEED: an unsigned 64-bit integer as strtoull reads it in base 0 (decimal, 0x
// hexadecimal, 0 octal), the whole string, no sign, no space, no overflow.
Setting parse_seed(const char *s) {
  Setting r;
  if (!s) {
    r.value = 0x5EED5EEDull;
    return r;
  }
  bool ok = s[0] >= '0' && s[0] <= '9';
  if (ok) {
    errno = 0;
    char *end = nullptr;
    const unsigned long long v = std::strtoull(s, &end, 0);
    ok = errno == 0 && end != s && *end == 0;
    r.value = v;
  }
  if (!ok) {
    return refused("REPLAYSSM_EMU_SEED", s,
                   "an integer in 0..=18446744073709551615 (decimal, 0x hexadecimal or 0 octal, the whole value, "
                   "no sign)");
  }
  return r;
}

// Read once per process (the schedule of a run must not change under it).
const Setting &host_threads() {
  static const Setting s = parse_threads(std::getenv("REPLAYSSM_EMU_THREADS"));
  return s;
}

const Setting &base_seed() {
  static const Setting s = parse_seed(std::getenv("REPLAYSSM_EMU_SEED"));
  return s;
}

// --- Helper threads --------------------------------------------------------------------------

// Bytes of this library's thread-local storage, and whether a new thread allocates it lazily
// (with malloc, on its first access) rather than with its stack: glibc aborts the process when
// that lazy allocation fails, so a helper starts with some address space set aside for it.
struct TlsInfo {
  size_t bytes = 0;
  bool lazy = false;
};

#if defined(__GLIBC__)
struct TlsQuery {
  uintptr_t addr;
  TlsInfo info;
};

int find_tls(struct dl_phdr_info *info, size_t, void *data) {
  auto *q = static_cast<TlsQuery *>(data);
  bool mine = false;
  size_t tls = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto &ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
      mine = mine || (q->addr >= lo && q->addr - lo < ph.p_memsz);
    } else if (ph.p_type == PT_TLS) {
      tls = ph.p_memsz + ph.p_align;
    }
  }
  if (!mine) return 0;
  q->info.bytes = tls;
  // The executable's TLS is allocated with each thread's stack; a shared library's may be lazy
  // (always when it was dlopen'ed, as Python does).
  q->info.lazy = tls > 0 && info->dlpi_name && info->dlpi_name[0];
  return 1;
}
#endif

const TlsInfo &module_tls() {
  static const TlsInfo info = [] {
#if defined(__GLIBC__)
    TlsQuery q{reinterpret_cast<uintptr_t>(&find_tls), {}};
    dl_iterate_phdr(find_tls, &q);
    return q.info;
#else
    return TlsInfo{};
#endif
  }();
  return info;
}

size_t page_round(size_t n) {
  const long page = sysconf(_SC_PAGESIZE);
  const size_t p = page > 0 ? static_cast<size_t>(page) : 4096;
  return (n + p - 1) / p * p;
}

// What the workers of one launch share.
struct LaunchState {
  const char *name;
  dim3 grid, block;
  size_t smem_bytes;
  const KernelBody *body;
  uint64_t seed;
  uint64_t nblocks;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::atomic<bool> error_claimed{false};
  char first_error[kMaxMessage] = {};
  // Helpers wait here until every helper exists (so that what they set aside for their
  // thread-local storage is not taken by the creation of the next one).
  std::mutex gate_mutex;
  std::condition_variable gate_cv;
  bool open = false;
};

// Runs blocks on `w` until none are left or one failed. Allocates nothing.
void run_worker(LaunchState &s, Worker &w) noexcept {
  w.body = s.body;
  Worker *saved_worker = tl_worker;
  tl_worker = &w;
  const dim3 grid = s.grid;
  for (;;) {
    const uint64_t i = s.next.fetch_add(1);
    if (i >= s.nblocks || s.failed.load()) break;
    w.rng = (s.seed + 0x9E3779B97F4A7C15ull * (i + 1)) | 1;
    const uint3 bidx = {unsigned(i % grid.x), unsigned((i / grid.x) % grid.y),
                        unsigned(i / (uint64_t(grid.x) * grid.y))};
    run_block(&w, s.name, grid, s.block, bidx, s.smem_bytes);
    if (w.error[0]) {
      if (!s.error_claimed.exchange(true)) set_message(s.first_error, w.error);
      s.failed.store(true);
      break;
    }
  }
  tl_worker = saved_worker;
}

struct Helper {
  LaunchState *state = nullptr;
  Worker *worker = nullptr;
  void *reserve = nullptr;  // address space set aside for the thread's first allocations
  size_t reserve_bytes = 0;
  pthread_t thread{};
};

extern "C" void *rssm_emu_helper_main(void *arg) {
  Helper *h = static_cast<Helper *>(arg);
  LaunchState &s = *h->state;
  try {
    std::unique_lock<std::mutex> lock(s.gate_mutex);
    s.gate_cv.wait(lock, [&] { return s.open; });
  } catch (...) {
    // Cannot wait: start at once (the gate only orders the reserve's use).
  }
  if (h->reserve) munmap(h->reserve, h->reserve_bytes);
  h->reserve = nullptr;
  run_worker(s, *h->worker);
  return nullptr;
}

// Lets the helpers of `s` start (each releases its reserve first, then works).
void open_gate(LaunchState &s) {
  {
    std::lock_guard<std::mutex> lock(s.gate_mutex);
    s.open = true;
  }
  s.gate_cv.notify_all();
}

// Starts a helper thread on `h`; false when none can be created.
bool start_helper(Helper &h, size_t stack_bytes, size_t reserve_bytes) {
  if (reserve_bytes) {
    void *r = mmap(nullptr, reserve_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (r == MAP_FAILED) return false;
    h.reserve = r;
    h.reserve_bytes = reserve_bytes;
  }
  pthread_attr_t attr;
  int err = pthread_attr_init(&attr);
  if (err == 0) {
    err = pthread_attr_setstacksize(&attr, stack_bytes);
    if (err == 0) err = pthread_create(&h.thread, &attr, rssm_emu_helper_main, &h);
    pthread_attr_destroy(&attr);
  }
  // EINVAL: a stack too small for the process's static TLS; try the default size.
  if (err == EINVAL) err = pthread_create(&h.thread, nullptr, rssm_emu_helper_main, &h);
  if (err != 0 && h.reserve) {
    munmap(h.reserve, h.reserve_bytes);
    h.reserve = nullptr;
  }
  return err == 0;
}

// The workers of one launch; returned to the pool however the launch ends.
struct Crew {
  std::unique_ptr<Worker> workers[kMaxHostThreads];
  unsigned count = 0;
  ~Crew() {
    for (unsigned i = 0; i < count; ++i) release_worker(std::move(workers[i]));
  }
};

std::atomic<uint64_t> g_launch_counter{0};

int fail_launch(const char *msg) {
  set_message(tl_last_error, msg);
  return 1;
}

int run_launch(const char *name, dim3 grid, dim3 block, size_t smem_bytes, const KernelBody &body, uint64_t seed,
               unsigned max_threads) {
  const unsigned threads = block.x * block.y * block.z;
  const uint64_t nblocks = uint64_t(grid.x) * grid.y * grid.z;
  const uint64_t per_worker = uint64_t(threads) * kStackBytes;
  const uint64_t by_budget = std::max<uint64_t>(1, kFiberStackBudget / per_worker);
  const unsigned wanted = static_cast<unsigned>(std::min<uint64_t>({max_threads, nblocks, by_budget}));
  // Stacks a worker may keep from earlier launches: the budget split over this launch's workers.
  const size_t keep_fibers = std::max<size_t>(threads, kFiberStackBudget / kStackBytes / wanted);
  char buf[kMaxMessage];

  // Workers, prepared by this thread: worker 0 must be, the others are optional.
  Crew crew;
  bool drained = false;
  while (crew.count < wanted) {
    std::unique_ptr<Worker> w;
    bool ready = false;
    int map_errno = ENOMEM;
    try {
      w = acquire_worker();
      ready = prepare_worker(*w, threads, smem_bytes, keep_fibers);
      if (!ready) map_errno = errno;
    } catch (const std::bad_alloc &) {
      if (crew.count == 0 && drained) throw;
    }
    if (!ready) {
      // Short of memory: give back what this worker and the idle ones hold, then try worker 0
      // once more, or run on the workers already prepared.
      w.reset();
      if (!drained) {
        drain_idle_workers();
        drained = true;
        if (crew.count == 0) continue;
      }
      if (crew.count > 0) break;
      std::snprintf(buf, sizeof buf,
                    "%s: cannot map the fiber stacks of a block of %u threads (%u x %zu KiB of address space: "
                    "%s)",
                    name, threads, threads, kStackBytes / 1024, std::strerror(map_errno));
      return fail_launch(buf);
    }
    crew.workers[crew.count++] = std::move(w);
  }

  LaunchState s;
  s.name = name;
  s.grid = grid;
  s.block = block;
  s.smem_bytes = smem_bytes;
  s.body = &body;
  s.seed = seed;
  s.nblocks = nblocks;

  // Helpers for workers 1.., as many as can be started: the caller works too.
  Helper helpers[kMaxHostThreads];
  unsigned started = 0;
  if (crew.count > 1) {
    const TlsInfo &tls = module_tls();
    const size_t stack = page_round(kHelperStackBytes + tls.bytes);
    const size_t reserve = tls.lazy ? page_round(tls.bytes + 256 * 1024) : 0;
    if (reserve == 0) open_gate(s);  // no reserve to order: each helper starts work at once
    for (unsigned k = 1; k < crew.count; ++k) {
      Helper &h = helpers[started];
      h.state = &s;
      h.worker = crew.workers[k].get();
      if (!start_helper(h, stack, reserve)) break;
      ++started;
    }
  }
  open_gate(s);
  run_worker(s, *crew.workers[0]);
  for (unsigned i = 0; i < started; ++i) pthread_join(helpers[i].thread, nullptr);

  if (s.failed.load()) return fail_launch(s.first_error);
  return 0;
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

const char *last_error() { return tl_last_error; }

int launch(const char *name, dim3 grid, dim3 block, size_t smem_bytes, const KernelBody &body) {
  tl_last_error[0] = 0;
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  char buf[kMaxMessage];
  if (threads == 0 || threads > kMaxThreadsPerBlock || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535 ||
      smem_bytes > kMaxDynamicSmem) {
    std::snprintf(buf, sizeof buf,
                  "%s: invalid launch configuration: grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of dynamic shared "
                  "memory",
                  name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes);
    return fail_launch(buf);
  }
  try {
    const Setting &nthreads = host_threads();
    if (!nthreads.ok) return fail_launch(nthreads.message);
    const Setting &seed = base_seed();
    if (!seed.ok) return fail_launch(seed.message);
    const uint64_t launch_seed = seed.value ^ (0x9E3779B97F4A7C15ull * (g_launch_counter.fetch_add(1) + 1));
    return run_launch(name, grid, block, smem_bytes, body, launch_seed, static_cast<unsigned>(nthreads.value));
  } catch (const std::bad_alloc &) {
    std::snprintf(buf, sizeof buf,
                  "%s: out of host memory preparing the launch (grid (%u,%u,%u), block (%u,%u,%u), %zu bytes of "
                  "dynamic shared memory)",
                  name, grid.x, grid.y, grid.z, block.x, block.y, block.z, smem_bytes);
    return fail_launch(buf);
  } catch (...) {
    std::snprintf(buf, sizeof buf, "%s: the SIMT emulator failed to set up the launch", name);
    return fail_launch(buf);
  }
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
