/* replayssm from C: validate engine flags against the capability gates, then commit accepted
 * draft tokens (kernel F, fold-every-commit) into an fp32 checkpoint on host buffers with the
 * emulated backend, and check it against kernel P (replay), which must give the same bits.
 * Build and run: examples/c/run.sh (the link line is in examples/c/README.md). Exit 0 = passed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replayssm.h"

enum { LAYERS = 2, SLOTS = 3, H = 1, HV = 2, K = 32, V = 32, W = 4, BATCH = 2 };
#define STATE_ELEMS ((size_t)LAYERS * SLOTS * HV * V * K)
#define SLOT_ELEMS ((size_t)HV * V * K)

static int failures = 0;
#define EXPECT(cond, ...)                     \
  do {                                        \
    if (!(cond)) {                            \
      fprintf(stderr, "FAILED: " __VA_ARGS__); \
      fprintf(stderr, "\n");                  \
      failures++;                             \
    }                                         \
  } while (0)

static uint32_t rng = 12345u;
static float uniform(void) { /* xorshift32 in [0, 1) */
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return (float)(rng >> 8) / 16777216.0f;
}

static void validate(const char *label, int argc, const char *const *argv, enum replayssm_status expected) {
  char text[2048];
  enum replayssm_status st = replayssm_validate_config(argc, argv, text, sizeof text);
  printf("validate %s -> %s\n%s\n", label, replayssm_status_string(st), text);
  EXPECT(st == expected, "validate %s returned %d, expected %d", label, (int)st, (int)expected);
}

int main(void) {
  printf("replayssm %u (ABI %u)\n", replayssm_version(), replayssm_abi_version());
  EXPECT(replayssm_abi_version() == REPLAYSSM_ABI_VERSION, "header and library ABI differ");
  if (replayssm_backend_available(REPLAYSSM_BACKEND_CUDA) != REPLAYSSM_OK)
    printf("CUDA backend unavailable here: %s\n", replayssm_last_error_message());

  /* 1. Gates: a buffered-decode ring on a disaggregated (PD) decode pool is refused, with the
   *    rule, the value and the fix; an EAGLE chain on a local pool is accepted. */
  const char *refused[] = {"--enable-linear-replayssm", "--disaggregation-mode", "decode"};
  validate("buffered-decode ring on a PD decode pool", 3, refused, REPLAYSSM_ERR_CONFIG_REFUSED);
  const char *accepted[] = {"--enable-linear-replayssm-spec", "--speculative-algorithm", "EAGLE",
                            "--speculative-num-draft-tokens", "4"};
  validate("EAGLE chain of 4", 5, accepted, REPLAYSSM_OK);

  /* 2. A spec ring on host memory: raw v, k (f32 here), log decay g and beta per position. */
  const size_t ring_vk = (size_t)LAYERS * SLOTS * HV * W * V;
  float *ring_v = malloc(ring_vk * sizeof(float));
  float *ring_k = malloc((size_t)LAYERS * SLOTS * H * W * K * sizeof(float));
  float *ring_g = malloc((size_t)LAYERS * SLOTS * HV * W * sizeof(float));
  float *ring_beta = malloc((size_t)LAYERS * SLOTS * HV * W * sizeof(float));
  float *state_fold = malloc(STATE_ELEMS * sizeof(float));
  float *state_replay = malloc(STATE_ELEMS * sizeof(float));
  for (size_t i = 0; i < ring_vk; i++) ring_v[i] = uniform() - 0.5f;
  for (size_t i = 0; i < (size_t)LAYERS * SLOTS * H * W * K; i++) ring_k[i] = uniform() - 0.5f;
  for (size_t i = 0; i < (size_t)LAYERS * SLOTS * HV * W; i++) {
    ring_g[i] = -0.5f * uniform(); /* log decay <= 0 */
    ring_beta[i] = uniform();
  }
  for (size_t i = 0; i < STATE_ELEMS; i++) state_fold[i] = uniform() - 0.5f;
  memcpy(state_replay, state_fold, STATE_ELEMS * sizeof(float));

  /* Row 0 commits 3 tokens (2 accepted drafts + the bonus) into slot 2; row 1 is a null row. */
  const int32_t slots[BATCH] = {2, -1};
  const int32_t accept_lens[BATCH] = {3, 0};
  uint32_t error_word = 0;

  /* ABI 3: every kernel's params are one params base (the pool, the rows, the heads, the error
   * word) and parts (here the spec ring), filled once and shared by F and P below. */
  replayssm_base_params base = {0};
  base.state = state_fold;
  base.slots = slots;
  base.error_word = &error_word;
  base.batch = BATCH;
  base.num_slots = SLOTS;
  base.num_layers = LAYERS;
  base.layer = 0; /* F commits every layer */
  base.H = H;
  base.HV = HV;
  base.K = K;
  base.V = V;
  base.dtype = REPLAYSSM_DTYPE_F32;
  base.variant = REPLAYSSM_VARIANT_GDN;
  base.qk_l2norm = 1;

  replayssm_ring_params ring = {0};
  ring.v = ring_v;
  ring.k = ring_k;
  ring.g = ring_g;
  ring.beta = ring_beta;
  ring.window = W;

  replayssm_fold_params fold = {0};
  fold.struct_size = sizeof fold;
  fold.base = base;
  fold.ring = ring;
  fold.accept_lens = accept_lens;

  /* Bad input is refused with a status and a message, never a crash. */
  replayssm_fold_params bad = fold;
  bad.struct_size = 8;
  enum replayssm_status st = replayssm_fold(REPLAYSSM_BACKEND_EMULATED, &bad, NULL);
  printf("fold with struct_size 8 -> %s\n  %s\n", replayssm_status_string(st), replayssm_last_error_message());
  EXPECT(st == REPLAYSSM_ERR_STRUCT_SIZE, "struct_size 8 gave %d", (int)st);
  bad = fold;
  bad.ring.k = NULL;
  st = replayssm_fold(REPLAYSSM_BACKEND_EMULATED, &bad, NULL);
  printf("fold with ring.k NULL -> %s\n  %s\n", replayssm_status_string(st), replayssm_last_error_message());
  EXPECT(st == REPLAYSSM_ERR_INVALID_ARGUMENT, "ring.k NULL gave %d", (int)st);
  bad = fold;
  bad.base.reserved = 5; /* reserved fields must stay 0: the message names the field */
  st = replayssm_fold(REPLAYSSM_BACKEND_EMULATED, &bad, NULL);
  printf("fold with base.reserved 5 -> %s\n  %s\n", replayssm_status_string(st), replayssm_last_error_message());
  EXPECT(st == REPLAYSSM_ERR_INVALID_ARGUMENT && strstr(replayssm_last_error_message(), "base.reserved") != NULL,
         "base.reserved 5 gave %d: %s", (int)st, replayssm_last_error_message());

  st = replayssm_fold(REPLAYSSM_BACKEND_EMULATED, &fold, NULL);
  printf("fold (emulated) -> %s\n", replayssm_status_string(st));
  EXPECT(st == REPLAYSSM_OK, "fold failed: %s", replayssm_last_error_message());
  EXPECT(error_word == 0, "fold set device error bits %#x", error_word);

  /* The same commit through kernel P, layer by layer: F must give the same bits. */
  const int32_t counts[BATCH] = {3, 0};
  for (int layer = 0; layer < LAYERS; layer++) {
    replayssm_replay_params rp = {0};
    rp.struct_size = sizeof rp;
    rp.base = base; /* the same pool geometry and rows; P's own state copy, one layer a launch */
    rp.base.state = state_replay;
    rp.base.layer = layer;
    rp.ring = ring;
    rp.counts = counts;
    st = replayssm_replay(REPLAYSSM_BACKEND_EMULATED, &rp, NULL);
    EXPECT(st == REPLAYSSM_OK, "replay layer %d failed: %s", layer, replayssm_last_error_message());
  }
  EXPECT(error_word == 0, "replay set device error bits %#x", error_word);

  size_t changed = 0, nonfinite = 0;
  for (size_t i = 0; i < STATE_ELEMS; i++)
    if (!isfinite(state_fold[i])) nonfinite++;
  EXPECT(memcmp(state_fold, state_replay, STATE_ELEMS * sizeof(float)) == 0, "fold and replay states differ");
  /* Only slot 2 moved: compare against a fresh copy of the initial state. */
  rng = 12345u;
  for (size_t i = 0; i < ring_vk; i++) (void)uniform();
  for (size_t i = 0; i < (size_t)LAYERS * SLOTS * H * W * K; i++) (void)uniform();
  for (size_t i = 0; i < (size_t)LAYERS * SLOTS * HV * W; i++) (void)uniform(), (void)uniform();
  for (int layer = 0; layer < LAYERS; layer++)
    for (int slot = 0; slot < SLOTS; slot++)
      for (size_t i = 0; i < SLOT_ELEMS; i++) {
        const float initial = uniform() - 0.5f;
        const float now = state_fold[((size_t)layer * SLOTS + slot) * SLOT_ELEMS + i];
        if (slot != 2) EXPECT(now == initial, "slot %d (not committed) changed", slot);
        else if (now != initial) changed++;
      }
  printf("committed slot: %zu of %zu state elements changed, %zu non-finite; fold == replay bitwise: %s\n",
         changed, (size_t)LAYERS * SLOT_ELEMS, nonfinite,
         memcmp(state_fold, state_replay, STATE_ELEMS * sizeof(float)) == 0 ? "yes" : "no");
  EXPECT(changed > (size_t)LAYERS * SLOT_ELEMS / 2, "the commit changed too little of the state");
  EXPECT(nonfinite == 0, "non-finite state");

  free(ring_v);
  free(ring_k);
  free(ring_g);
  free(ring_beta);
  free(state_fold);
  free(state_replay);
  if (failures) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all checks passed\n");
  return 0;
}
