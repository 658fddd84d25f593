/* replayssm public C header: status codes, one params struct per kernel, launcher prototypes.
 *
 * Every launcher takes a pointer to its params struct and the caller's stream last, returns a
 * status, and never allocates or synchronises. The same launch layer is compiled twice: by nvcc
 * (`rssm_*`) and by the host compiler against the SIMT emulator (`rssm_emu_*`, synchronous, the
 * stream is ignored and every pointer is host memory).
 *
 * Layout: params structs hold 8-byte fields first, then 4-byte ones, no implicit padding; sizes
 * and offsets are pinned by static_assert (csrc/include/replayssm/layout.h) and by const asserts
 * in src/ffi.rs. Integers are fixed width; enums travel as int32_t. */
#ifndef REPLAYSSM_H
#define REPLAYSSM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RSSM_ABI_VERSION 4 /* the kernel layer's params (2: impl and block_rows; 3: VF and defer;
                            * 4: one params base, composed by every kernel over the pool) */

typedef enum rssm_status {
  RSSM_OK = 0,
  /* A params field is inconsistent (shape, stride, null pointer, range). */
  RSSM_ERR_INVALID_ARGUMENT = 1,
  /* Valid, but not compiled in (head dim outside {32,64,128,256}, dtype, ...). */
  RSSM_ERR_UNSUPPORTED = 2,
  /* The CUDA runtime refused the launch; see rssm_cuda_last_error(). */
  RSSM_ERR_LAUNCH = 3,
  /* The SIMT emulator refused the launch or found a kernel bug (divergent collective,
   * deadlock); see rssm_emu_last_error(). */
  RSSM_ERR_EMULATOR = 4
} rssm_status;

typedef enum rssm_dtype { RSSM_DTYPE_F32 = 0, RSSM_DTYPE_F16 = 1, RSSM_DTYPE_BF16 = 2 } rssm_dtype;

typedef enum rssm_variant {
  RSSM_VARIANT_GDN = 0, /* scalar decay per (token, value head) */
  RSSM_VARIANT_KDA = 1  /* per-channel decay: g is [.., K] */
} rssm_variant;

/* Which implementation of a kernel a launch runs (the `impl` field of the V, F, P and D params).
 * Every implementation computes the same contract: F, P and D bit for bit (one update path), V
 * within its tolerance. Which is fastest depends on the shape and the device; the Rust runtime
 * picks per call from a tuning table (src/tuning.rs, bench/autotune/), DEFAULT without one. */
typedef enum rssm_impl {
  RSSM_IMPL_DEFAULT = 0,  /* V: one block per 16 state rows, window built per block.
                           * F, P: ring records read inside the step loop. D: token inputs
                           * loaded after the pending records; the only one of materialise. */
  RSSM_IMPL_STAGED = 1,   /* V, VF: the window is built once per block and staged in shared
                           * memory, the checkpoint load issued first, `block_rows` rows streamed
                           * per block in passes of 16, outputs staged and stored as vectors. V:
                           * two passes in flight, a warp's lanes on the same channels of its 4
                           * rows, projections reduce-scattered, the solve once per row. VF: 8
                           * lanes per row (3-level reductions), the pending records staged too,
                           * each row folded (F's operations in F's order) and stored before its
                           * verify. */
  RSSM_IMPL_PREFETCH = 2  /* F, P: the state load issued at entry, the request's ring records
                           * (keys normalised once per record) copied to shared memory up front;
                           * windows up to RSSM_MAX_VERIFY_WINDOW. D: the token's inputs loaded
                           * before the pending-record loop. */
} rssm_impl;

/* Most dynamic shared memory one STAGED verify (or VF) block may use (its window arrays plus the
 * v and output tiles of its block_rows rows, VF's staged records); below the H100/H200 opt-in maximum of 227 KB. */
#define RSSM_VERIFY_STAGED_MAX_SMEM (160 * 1024)

/* Longest spec ring of the buffered speculative mode (VB stages a slot's history in shared memory). */
#define RSSM_MAX_BUFFERED_CACHE_LEN 64

/* Bits of the device-side error word: set by kernels that met a device-side index they could
 * not trust (the host never saw it, e.g. under CUDA-graph replay); the row is skipped. */
#define RSSM_DEVERR_SLOT_OUT_OF_RANGE 0x1u
#define RSSM_DEVERR_BAD_SEQLENS 0x2u  /* cu_seqlens bad, or not from 0 to num_tokens (request skipped;
                                       * then its and the uncovered tokens' outputs are zero) */
#define RSSM_DEVERR_BAD_LENGTH 0x4u  /* accept length / replay count / cursor out of range */
#define RSSM_DEVERR_TRACK_SLOT 0x8u  /* track slot out of range, or (VF) with records pending (track skipped) */
#define RSSM_DEVERR_BAD_TREE 0x10u   /* parent not in -1..i-1, or an accept path entry outside the window
                                      * or not increasing: the request is skipped (outputs zero) */
#define RSSM_DEVERR_DUPLICATE_SLOT 0x20u /* a live slot repeated in one launch (both rows skipped), or a track
                                          * slot equal to a live slot or to another row's track slot (those
                                          * tracks skipped): on a GPU these would be write races */
#define RSSM_DEVERR_TRACK_STEP 0x40u /* a track slot on a row whose track step is outside 0..n-1 (n the
                                      * steps it commits; a null row commits none): no snapshot stored */

/* Largest value head dim V a launch accepts: a bound on the grid (V / 16 row tiles per head),
 * far above any model's (128 or 256), so that a garbage V is refused rather than launched. */
#define RSSM_MAX_V 65536

/* Longest buffered-decode ring (pending records per slot and layer) kernel D accepts. */
#define RSSM_MAX_CACHE_LEN 65536

/* Key head dims K the kernels are compiled for, in units of 32: bit i set means K = 32 (i + 1)
 * (32, 64, 96, 128 and 256: a lane holds K / 32 = 1, 2, 3, 4 or 8 channels of a state row). The
 * one list every binding reads (can_implement, the Rust checks, Python). */
#define RSSM_HEAD_DIMS_MASK32 0x8Fu

/* Most requests (rows) of one launch: a grid dimension. */
#define RSSM_MAX_BATCH 65535

/* Most layers of one pool (the index limit the typed pools share). */
#define RSSM_MAX_LAYERS 65535

/* Longest verify window the V kernel is compiled for; also the most nodes of one draft tree
 * (tree verify), so a tree is at most this deep. */
#define RSSM_MAX_VERIFY_WINDOW 16

/* The params base (flash-attention's Qkv_params): the fields every kernel over the checkpoint
 * pool takes, once. Kernels compose it with the parts they need: the token inputs (R, V, D),
 * the spec ring (V, F, P), then their own fields; VF composes V's whole params. */

/* The checkpoint pool, the launch's rows and heads, and the implementation choice.
 * The pool is [num_layers, num_slots, HV, V, K] f32 (kernel R: [num_slots, HV, V, K]): each
 * slot's [HV, V, K] is contiguous, K innermost; slot s of layer l starts at
 * l * state_layer_stride + s * state_slot_stride elements (0 = packed: HV*V*K, and num_slots
 * slot pitches). Strided pools (an engine's page-major "envelope", where one slot holds every
 * layer) set both. Row b addresses the checkpoint of slots[b]; -1 = null row. */
typedef struct rssm_base_params {
  float *state;          /* the pool; V reads it only (VF folds into it) */
  const int32_t *slots;  /* [batch], device; -1 = null */
  uint32_t *error_word;  /* device u32 OR-ed with RSSM_DEVERR_* bits, or NULL */
  int64_t state_slot_stride, state_layer_stride; /* elements; 0 = packed */
  int32_t batch, num_slots;
  int32_t num_layers, layer; /* the pool's layers and the one a launch works on (R: 1, 0; F: every layer) */
  int32_t H, HV, K, V;   /* key heads, value heads, key and value head dims */
  int32_t dtype;         /* rssm_dtype of the activations (token inputs, outputs, spec ring) */
  int32_t variant;       /* rssm_variant */
  int32_t qk_l2norm;     /* 1: keys (and queries) normalised in-kernel (division form, eps 1e-6 inside) */
  int32_t impl;          /* rssm_impl; RSSM_IMPL_DEFAULT for R, materialise and the bookkeeping kernels */
  int32_t block_rows;    /* V STAGED: state rows per block, a multiple of 16, or 0 = all V rows of
                          * the head in one block; 0 everywhere else */
  int32_t reserved;      /* keeps the size a multiple of 8 */
} rssm_base_params;

/* Token inputs and outputs of R, V and D. Gate: raw (a, b, A_log, dt_bias; g and beta NULL) or
 * precomputed (g, beta). Strides count elements per token (D: per row). */
typedef struct rssm_token_params {
  const void *q;          /* [num_tokens, H, K] act */
  const void *k;          /* [num_tokens, H, K] act */
  const void *v;          /* [num_tokens, HV, V] act */
  const void *a;          /* raw gate: [num_tokens, HV] (KDA: [num_tokens, HV, K]) act, or NULL */
  const void *b;          /* raw gate: [num_tokens, HV] act, or NULL */
  const float *A_log;     /* raw gate: [HV] */
  const float *dt_bias;   /* raw gate: [HV] (KDA: [HV, K]) */
  const float *g;         /* precomputed: [num_tokens, HV] (KDA: [num_tokens, HV, K]), or NULL */
  const float *beta;      /* precomputed: [num_tokens, HV], or NULL */
  void *o;                /* [num_tokens, HV, V] act */
  int64_t q_stride, k_stride, v_stride, a_stride, b_stride, o_stride;
  float scale;            /* applied to q after normalisation (usually K^-0.5) */
  float lower_bound;      /* raw gate form: 0 = softplus, finite negative = the safe gate
                             g = lower_bound * sigmoid(exp(A_log) (a + dt_bias)); 0 when precomputed */
} rssm_token_params;

/* Spec ring of num_layers x num_slots (design §2): the raw inputs of the last verify window,
 * always packed:
 *   v    [NL, NS, HV, W, V] act   (raw v)
 *   k    [NL, NS, H,  W, K] act   (raw k, before L2 norm; once per key head)
 *   g    [NL, NS, HV, W] f32      (KDA: [NL, NS, HV, W, K]; log decay as the gate computed it)
 *   beta [NL, NS, HV, W] f32
 * V writes it (all four pointers set, or all NULL: no ring write); F and P read it. */
typedef struct rssm_ring_params {
  void *v, *k;
  float *g, *beta;
  int32_t window;         /* W, records per slot and layer */
  int32_t reserved;
} rssm_ring_params;

/* Kernel R: recurrent baseline (design §3, §4 R). Request r owns tokens
 * cu_seqlens[r]..cu_seqlens[r+1] (at most max_seqlen of them) and the checkpoint
 * state[slots[r]]; slot -1 = null (zero outputs, nothing else). */
typedef struct rssm_recurrent_params {
  rssm_base_params base;      /* num_layers 1, layer 0 */
  rssm_token_params tokens;
  const int32_t *cu_seqlens;  /* [batch + 1], device */
  float *snapshots;           /* [batch, max_seqlen, HV, V, K] f32 (state after each token), or NULL */
  int32_t num_tokens, max_seqlen;
  int32_t write_state;        /* 1: store the final state back into state[slot] */
  int32_t record_dtype;       /* rssm_dtype: F32 (0) = the f32 update; base.dtype (F16/BF16) = each
                                 token's u and k^ rounded to it before the rank-1 update, as a decode
                                 ring of that dtype holds them (kernel D with that ring is R's bits) */
} rssm_recurrent_params;

/* Kernel V: chunked verify of layer `base.layer` (design §4 V). Reads the checkpoint of each
 * request's slot (never writes it), writes every window position's output and, when the ring
 * pointers are set, the raw inputs of positions s < W of live slots. Window = request.
 * Linear chain (parent == NULL): strictly-lower causal mask, position i's parent is i-1.
 * Tree verify "VT" (parent != NULL): parent[t] is the window position of token t's parent within
 * its request (-1 = child of the checkpoint); parents precede children, so parent[t] lies in
 * -1..i-1 for window position i (else RSSM_DEVERR_BAD_TREE and the request's outputs are zero).
 * The mask becomes the strict-ancestor mask and the decays sum along each node's root path; a
 * node's output equals kernel R's output along its root path. A chain given as parents produces
 * the same bits as parent == NULL. */
typedef struct rssm_verify_params {
  rssm_base_params base;     /* impl DEFAULT or STAGED (with block_rows) */
  rssm_token_params tokens;
  rssm_ring_params ring;     /* window = W, ring positions per slot (1 without a ring) */
  const int32_t *cu_seqlens; /* [batch + 1]; each window at most RSSM_MAX_VERIFY_WINDOW */
  const int32_t *parent;     /* [num_tokens] i32 (tree verify), or NULL (linear chain) */
  int32_t num_tokens, max_seqlen;
} rssm_verify_params;

/* Kernel F: fold-every-commit over all layers (design §4 F). For live request b, replays ring
 * records 0..accept_lens[b]-1 of its slot into the checkpoint of every layer, in place; when
 * track_slots[b] >= 0 the state after step track_steps[b] is also stored in that slot.
 * Path fold "FT" (tree commit): accept_paths instead of accept_lens (exactly one of the two is
 * set). Row b of accept_paths ([batch, path_width] i32) lists the accepted root-to-node path as
 * window positions, -1 padded; its n leading entries >= 0 are replayed in that order (step t
 * replays record accept_paths[b][t]; track_steps count path steps). Entries must be < window and
 * increasing (else RSSM_DEVERR_BAD_TREE, request skipped); the device cannot check that they
 * follow the tree's parent links: the safe wrappers do. */
typedef struct rssm_fold_params {
  rssm_base_params base;       /* layer 0 (every layer is folded); impl DEFAULT or PREFETCH */
  rssm_ring_params ring;
  const int32_t *accept_lens;  /* [batch], 0..window, includes the bonus token; 0 = no-op; or NULL with accept_paths */
  const int32_t *track_slots;  /* [batch] or NULL; -1 = none */
  const int32_t *track_steps;  /* [batch] or NULL; -1 = none */
  const int32_t *accept_paths; /* [batch, path_width] (path fold), or NULL */
  int32_t path_width;          /* columns of accept_paths, 1..window; 0 when accept_paths is NULL */
  int32_t reserved;
} rssm_fold_params;

/* Kernel P: fp32 checkpoint replay of one layer: replays ring records 0..counts[b]-1 of slot
 * slots[b] into that slot's checkpoint in place (the primitive of fold, flush, export). */
typedef struct rssm_replay_params {
  rssm_base_params base; /* impl DEFAULT or PREFETCH */
  rssm_ring_params ring;
  const int32_t *counts; /* [batch], 0..window */
} rssm_replay_params;

/* Buffered-decode ring of NL layers x NS slots, cache length L (design §4 D). ring_d and ring_k
 * are of ring_dtype (f32, or the activations' f16/bf16), ring_g is f32:
 *   ring_d [NL, NS, HV, L, V]  corrected delta u = beta (v - S k^) of each pending token
 *   ring_k [NL, NS, H,  L, K]  normalised key k^ (written once per key head)
 *   ring_g [NL, NS, HV, L]     log decay (KDA: [NL, NS, HV, L, K])
 * An f32 ring replays to kernel R's state bit for bit; an f16/bf16 ring holds u and k^ rounded to
 * nearest even, and kernel D updates its state with those rounded values, so it replays to the
 * state of kernel R run with record_dtype = ring_dtype, bit for bit.
 * A slot's cursor m in 0..L-1 counts its pending records (shared by all layers); the caller
 * snapshots it per row into `positions` before a step and advances it after the forward. */

/* Kernel D: buffered decode of layer `base.layer`, one token per request (token b is request b).
 * Computes o_b from the checkpoint and the m = positions[b] pending records without writing
 * the checkpoint; on a flush step (m == L-1, or force_flush[b] != 0) stores S_t into the
 * checkpoint, otherwise appends (u, k^, g) at position m. rssm_decode_materialize takes the
 * same struct and replays positions[b] pending records of every layer into the checkpoint
 * (materialise / export); it reads only the base, the ring, positions and cache_len. */
typedef struct rssm_decode_params {
  rssm_base_params base;      /* impl: D DEFAULT or PREFETCH; materialise DEFAULT */
  rssm_token_params tokens;   /* [batch, ..] rows; strides per row */
  const int32_t *positions;   /* [batch] cursor snapshot m, 0..cache_len-1 */
  const int32_t *force_flush; /* [batch] (nonzero = flush this step), or NULL */
  void *ring_d, *ring_k;       /* ring_dtype */
  float *ring_g;
  int32_t cache_len;
  int32_t ring_dtype;          /* rssm_dtype of ring_d and ring_k: F32 (0), or base.dtype (D; the
                                  materialise entry takes any) */
} rssm_decode_params;

/* Cursor kernel of buffered decode: the protocol of design §4 cursors on device-resident cursors, so a
 * captured CUDA graph needs no host round trip. cursors[NS] holds each slot's pending-record count
 * m (0..cache_len-1, shared by all layers). One launch applies `op` to every row b:
 *   SNAPSHOT  positions[b] = cursors[slots[b]] (0 for null rows); before the step's first layer.
 *   ADVANCE   after the step's last layer: cursors[slots[b]] = 0 if the row flushed
 *             (positions[b] == cache_len-1 or force_flush[b] != 0), else positions[b] + 1.
 *   RESET     cursors[slots[b]] = 0: a slot (re)allocated to a request, or freed.
 * Null rows (slot -1) are skipped. Live slots must be distinct within a launch. A slot outside
 * 0..num_slots-1 sets RSSM_DEVERR_SLOT_OUT_OF_RANGE; a cursor or position outside 0..cache_len-1
 * sets RSSM_DEVERR_BAD_LENGTH (SNAPSHOT copies it so kernel D skips the row; ADVANCE leaves the
 * cursor unchanged). */
typedef enum rssm_cursor_op { RSSM_CURSOR_SNAPSHOT = 0, RSSM_CURSOR_ADVANCE = 1, RSSM_CURSOR_RESET = 2 } rssm_cursor_op;

typedef struct rssm_cursor_params {
  int32_t *cursors;           /* [num_slots] i32 */
  const int32_t *slots;       /* [batch]; -1 = null */
  int32_t *positions;         /* [batch]: written by SNAPSHOT, read by ADVANCE, unused by RESET */
  const int32_t *force_flush; /* [batch] or NULL; read by ADVANCE only */
  uint32_t *error_word;       /* or NULL */
  int32_t batch, num_slots, cache_len;
  int32_t op;                 /* rssm_cursor_op */
} rssm_cursor_params;

/* Deferred fold (fold-then-verify, "VF"): the commit of step t is folded inside step t+1's verify,
 * so a speculative step moves each layer's state once read and once written (V + F: read, then
 * read + write). The spec ring holds two windows per slot: ring positions 0..2W-1 (the ring's
 * `window` field is 2W), half h = positions h*W .. h*W+W-1. The pending table
 *   pending [num_slots, 2 + W] i32   per slot: n (records not yet folded, 0..W), h (the half
 *                                    holding them, 0 or 1), then n ring positions (each in half
 *                                    h, increasing: a prefix h*W + 0..n-1, or an accepted tree
 *                                    path), -1 padded
 * is shared by all layers and written only by rssm_defer between steps, so a captured CUDA graph
 * replays the step with no host round trip. */

/* Kernel VF of layer `verify.base.layer`: for each live request, replays its slot's n pending records (half
 * h) into the checkpoint (the same update path as F: bit-identical), stores it, stores the state
 * after path step track_steps[b] into track_slots[b] when set (as F), then verifies the new
 * window from the state in registers (as V / VT, parent as in V) and writes its raw records into
 * half 1 - h. `verify.ring.window` is 2W and must be even, with max_seqlen <= W. A pending row that
 * cannot be trusted (n outside 0..W, h not 0/1: RSSM_DEVERR_BAD_LENGTH; a position outside half h
 * or not increasing: RSSM_DEVERR_BAD_TREE) skips the request: nothing written, outputs zero. */
typedef struct rssm_verify_fold_params {
  rssm_verify_params verify;  /* the verify of the new window; ring pointers required; its
                               * base's state is written (the fold) */
  const int32_t *pending;     /* [num_slots, 2 + W] the pending table */
  const int32_t *track_slots; /* [batch] or NULL; -1 = none */
  const int32_t *track_steps; /* [batch] or NULL; a step of the pending path */
} rssm_verify_fold_params;

/* Bookkeeping of the pending table between steps, one thread per row b (slot -1 = null, skipped;
 * a slot outside 0..num_slots-1 flags RSSM_DEVERR_SLOT_OUT_OF_RANGE; a live slot repeated in the
 * launch flags RSSM_DEVERR_DUPLICATE_SLOT and both rows are skipped):
 *   COMMIT  after every layer's VF of a step: the slot's records are now the accepted ones of the
 *           window VF just wrote: h' = 1 - h, n' = accept_lens[b] (0..W, else BAD_LENGTH) or the
 *           length of accept_paths[b] (window positions, -1 padded, increasing, < W, else
 *           BAD_TREE), positions h'*W + each accepted window position. A flagged row keeps its
 *           entry.
 *   GATHER  paths[b][0..W-1] = the slot's pending positions, -1 padded (all -1 for null or
 *           flagged rows): the accept_paths of kernel F's path mode (path_width W, the ring's
 *           2W window), which flushes them.
 *   RESET   n = 0 (after a flush, or a slot handed to a new request; pending records dropped). */
typedef enum rssm_defer_op { RSSM_DEFER_COMMIT = 0, RSSM_DEFER_GATHER = 1, RSSM_DEFER_RESET = 2 } rssm_defer_op;

typedef struct rssm_defer_params {
  int32_t *pending;            /* [num_slots, 2 + window] */
  const int32_t *slots;        /* [batch] */
  const int32_t *accept_lens;  /* COMMIT: [batch], or NULL with accept_paths */
  const int32_t *accept_paths; /* COMMIT: [batch, path_width], or NULL with accept_lens */
  int32_t *paths;              /* GATHER: [batch, window] out */
  uint32_t *error_word;        /* or NULL */
  int32_t batch, num_slots;
  int32_t window;              /* W: one half of the ring (the draft window) */
  int32_t path_width;          /* columns of accept_paths, 1..window; 0 without */
  int32_t op;                  /* rssm_defer_op */
  int32_t reserved;
} rssm_defer_params;

/* Buffered speculative verify ("VB", design §4 VB): the accepted history of a request stays in the
 * spec ring and its checkpoint is rewritten only at a flush, so a step reads each layer's state
 * once and writes it only every few steps. The spec ring holds L positions per slot (its `window`
 * field is L, the cache length); the cursors
 *   cursors [num_slots] i32   per slot: h, the accepted records not yet in the checkpoint, held at
 *                             ring positions 0..h-1 (0..L - T, T the step's longest window)
 * are shared by all layers and written only by rssm_buffered between steps. A flush is kernel F
 * (prefix mode) with accept_lens = the flush_lens COMMIT or FLUSH wrote: rows that do not flush
 * fold 0 records, so the step's launches are the same every step (CUDA-graph capturable). */

/* Kernel VB of layer `verify.base.layer` (one implementation, RSSM_IMPL_STAGED's streaming layout,
 * block_rows as for V): for each live request, the window is verified from the checkpoint followed
 * by the history at ring positions 0..h-1 (h = cursors[slot]) without forming that state: the
 * checkpoint is projected on the window once, and each history record adds its stored correction
 * u_j (ring_u) through a [T][h] matrix (outputs as V's up to rounding, V's tolerance; with h = 0
 * staged V's bits). The window's raw records go to ring positions h..h+len-1 and its corrections
 * to ring_u at the same positions. The checkpoint is never written. A cursor outside 0..L - len
 * (RSSM_DEVERR_BAD_LENGTH) skips the request: outputs zero, nothing written. */
typedef struct rssm_verify_buffered_params {
  rssm_verify_params verify;  /* the verify of the new window; ring pointers required, ring.window
                               * = L (2 T..RSSM_MAX_BUFFERED_CACHE_LEN); base.state is read only;
                               * base.impl STAGED, no parent */
  const int32_t *cursors;     /* [num_slots] */
  float *ring_u;              /* [num_layers][num_slots][HV][L][V] f32: each record's u (the delta
                               * rule's correction: S' = e^g S + u k^T), written by VB only */
} rssm_verify_buffered_params;

/* Bookkeeping of the cursors between steps, one thread per row b (slot -1 = null, skipped; a slot
 * outside 0..num_slots-1 flags RSSM_DEVERR_SLOT_OUT_OF_RANGE; a live slot repeated in the launch
 * flags RSSM_DEVERR_DUPLICATE_SLOT and both rows are skipped). Every row's flush_lens[b] is
 * written (0 unless the row flushes), so kernel F after COMMIT or FLUSH folds exactly the rows
 * that flush:
 *   COMMIT  after every layer's VB of a step: h' = h + accept_lens[b] (0..window, and at most the
 *           row's own window length: the records past it were not written); when the next
 *           window might not fit (h' + window > cache_len) the row flushes: flush_lens[b] = h',
 *           cursor 0; else cursor h'.
 *   FLUSH   flush_lens[b] = h, cursor 0: the slot's checkpoint made current (before it is read,
 *           copied or handed out). Between steps only, as RESET: never between a step's VB and
 *           its COMMIT.
 *   RESET   cursor 0: a slot (re)allocated to a request, or freed; its records are dropped.
 * A cursor outside 0..cache_len - window, or an accept length outside 0..window, flags
 * RSSM_DEVERR_BAD_LENGTH; the row keeps its cursor and folds nothing. */
typedef enum rssm_buffered_op { RSSM_BUFFERED_COMMIT = 0, RSSM_BUFFERED_FLUSH = 1, RSSM_BUFFERED_RESET = 2 } rssm_buffered_op;

typedef struct rssm_buffered_params {
  int32_t *cursors;           /* [num_slots] */
  const int32_t *slots;       /* [batch] */
  const int32_t *accept_lens; /* COMMIT: [batch]; NULL otherwise */
  int32_t *flush_lens;        /* COMMIT, FLUSH: [batch] out (kernel F's accept_lens); RESET: NULL */
  uint32_t *error_word;       /* or NULL */
  int32_t batch, num_slots;
  int32_t cache_len;          /* L: ring positions per slot */
  int32_t window;             /* T: the longest draft window of a step, 1..RSSM_MAX_VERIFY_WINDOW */
  int32_t op;                 /* rssm_buffered_op */
  int32_t reserved;
} rssm_buffered_params;

rssm_status rssm_recurrent(const rssm_recurrent_params *params, void *stream);
rssm_status rssm_emu_recurrent(const rssm_recurrent_params *params, void *stream);
rssm_status rssm_verify(const rssm_verify_params *params, void *stream);
rssm_status rssm_emu_verify(const rssm_verify_params *params, void *stream);
rssm_status rssm_fold(const rssm_fold_params *params, void *stream);
rssm_status rssm_emu_fold(const rssm_fold_params *params, void *stream);
rssm_status rssm_replay(const rssm_replay_params *params, void *stream);
rssm_status rssm_emu_replay(const rssm_replay_params *params, void *stream);
rssm_status rssm_decode(const rssm_decode_params *params, void *stream);
rssm_status rssm_emu_decode(const rssm_decode_params *params, void *stream);
rssm_status rssm_decode_materialize(const rssm_decode_params *params, void *stream);
rssm_status rssm_emu_decode_materialize(const rssm_decode_params *params, void *stream);
rssm_status rssm_decode_cursors(const rssm_cursor_params *params, void *stream);
rssm_status rssm_emu_decode_cursors(const rssm_cursor_params *params, void *stream);
rssm_status rssm_verify_fold(const rssm_verify_fold_params *params, void *stream);
rssm_status rssm_emu_verify_fold(const rssm_verify_fold_params *params, void *stream);
rssm_status rssm_defer(const rssm_defer_params *params, void *stream);
rssm_status rssm_emu_defer(const rssm_defer_params *params, void *stream);
rssm_status rssm_verify_buffered(const rssm_verify_buffered_params *params, void *stream);
rssm_status rssm_emu_verify_buffered(const rssm_verify_buffered_params *params, void *stream);
rssm_status rssm_buffered(const rssm_buffered_params *params, void *stream);
rssm_status rssm_emu_buffered(const rssm_buffered_params *params, void *stream);

/* Static validation shared by both backends (CUTLASS's can_implement): RSSM_OK when a launch
 * with these params is well-formed for the compiled kernels. Reads the struct only (no array).
 * Defined once, in the Rust library (src/checks/can_implement.rs, running src/checks/params.rs):
 * the rules the C ABI reports with messages. vector_aligned != 0: 16-byte aligned bases needed. */
rssm_status rssm_recurrent_can_implement(const rssm_recurrent_params *params, int32_t vector_aligned);
rssm_status rssm_verify_can_implement(const rssm_verify_params *params, int32_t vector_aligned);
rssm_status rssm_fold_can_implement(const rssm_fold_params *params, int32_t vector_aligned);
rssm_status rssm_replay_can_implement(const rssm_replay_params *params, int32_t vector_aligned);
rssm_status rssm_decode_can_implement(const rssm_decode_params *params, int32_t vector_aligned);
rssm_status rssm_materialize_can_implement(const rssm_decode_params *params, int32_t vector_aligned);
rssm_status rssm_cursors_can_implement(const rssm_cursor_params *params, int32_t vector_aligned);
rssm_status rssm_verify_fold_can_implement(const rssm_verify_fold_params *params, int32_t vector_aligned);
rssm_status rssm_defer_can_implement(const rssm_defer_params *params, int32_t vector_aligned);
rssm_status rssm_verify_buffered_can_implement(const rssm_verify_buffered_params *params, int32_t vector_aligned);
rssm_status rssm_buffered_can_implement(const rssm_buffered_params *params, int32_t vector_aligned);

/* Dynamic shared memory of one V launch with windows of up to max_seqlen tokens: what the
 * launcher requests (for occupancy reports; the launch computes the same). */
int64_t rssm_verify_smem_bytes(int32_t max_seqlen, int32_t K, int32_t kda);
/* The same for RSSM_IMPL_STAGED with block_rows (0 = the whole head of V rows), and for the
 * PREFETCH implementation of F and P with a ring of `window` records. */
int64_t rssm_verify_staged_smem_bytes(int32_t max_seqlen, int32_t K, int32_t kda, int32_t block_rows, int32_t V);
/* The same for a STAGED VF launch whose deferred ring holds 2 W positions (`ring_window`). */
int64_t rssm_verify_fold_staged_smem_bytes(int32_t max_seqlen, int32_t ring_window, int32_t K, int32_t kda,
                                           int32_t block_rows, int32_t V);
int64_t rssm_replay_prefetch_smem_bytes(int32_t window, int32_t K, int32_t kda);
/* The same for a VB launch over a spec ring of `cache_len` positions (its history staged too). */
int64_t rssm_verify_buffered_smem_bytes(int32_t max_seqlen, int32_t cache_len, int32_t K, int32_t kda,
                                        int32_t block_rows, int32_t V);

/* Emulator diagnostics: the message of the last RSSM_ERR_EMULATOR on this thread. */
const char *rssm_emu_last_error(void);

/* Thin CUDA runtime helpers (present only when the CUDA backend is compiled in). Each returns
 * the cudaError_t value as int32_t (0 = success). */
int32_t rssm_cuda_device_count(int32_t *count);
int32_t rssm_cuda_versions(int32_t *runtime, int32_t *driver);
int32_t rssm_cuda_device_name(int32_t device, char *buf, int32_t len, int32_t *cc_major, int32_t *cc_minor);
int32_t rssm_cuda_malloc(void **ptr, uint64_t bytes);
int32_t rssm_cuda_free(void *ptr);
int32_t rssm_cuda_memcpy_htod(void *dst, const void *src, uint64_t bytes);
int32_t rssm_cuda_memcpy_dtoh(void *dst, const void *src, uint64_t bytes);
int32_t rssm_cuda_memset(void *dst, int32_t value, uint64_t bytes);
/* The same on `stream` (ordered after its work, also for non-blocking streams). */
int32_t rssm_cuda_memcpy_htod_async(void *dst, const void *src, uint64_t bytes, void *stream);
int32_t rssm_cuda_memcpy_dtoh_async(void *dst, const void *src, uint64_t bytes, void *stream);
int32_t rssm_cuda_memset_async(void *dst, int32_t value, uint64_t bytes, void *stream);
int32_t rssm_cuda_synchronize(void);
int32_t rssm_cuda_last_error(void);
const char *rssm_cuda_error_string(int32_t code);

/* Streams, events, graphs and copies for the benchmark harness (tools/src/bench): what it times and
 * how, without a CUDA bindings crate. Handles are opaque pointers (cudaStream_t, cudaEvent_t,
 * cudaGraphExec_t). */
int32_t rssm_cuda_stream_create(void **stream); /* non-blocking */
int32_t rssm_cuda_stream_destroy(void *stream);
int32_t rssm_cuda_stream_synchronize(void *stream);
int32_t rssm_cuda_event_create(void **event);
int32_t rssm_cuda_event_destroy(void *event);
int32_t rssm_cuda_event_record(void *event, void *stream);
int32_t rssm_cuda_event_elapsed_ms(float *ms, void *start, void *stop);
/* Thread-local capture of everything enqueued on `stream` until end_capture, which instantiates
 * it (the graph itself is freed at once) into *graph_exec. */
int32_t rssm_cuda_graph_begin_capture(void *stream);
int32_t rssm_cuda_graph_end_capture(void *stream, void **graph_exec);
int32_t rssm_cuda_graph_launch(void *graph_exec, void *stream);
int32_t rssm_cuda_graph_exec_destroy(void *graph_exec);
int32_t rssm_cuda_memcpy_dtod_async(void *dst, const void *src, uint64_t bytes, void *stream);
/* `height` rows of `width` bytes, rows `dpitch` / `spitch` bytes apart. */
int32_t rssm_cuda_memcpy_2d_dtod_async(void *dst, uint64_t dpitch, const void *src, uint64_t spitch,
                                       uint64_t width, uint64_t height, void *stream);
int32_t rssm_cuda_mem_info(uint64_t *free_bytes, uint64_t *total_bytes);
int32_t rssm_cuda_device_facts(int32_t device, int32_t *sm_count, int32_t *l2_bytes);

#ifdef __cplusplus
}
#endif

#endif /* REPLAYSSM_H */
