// Kernels V's and VF's two implementations each (STAGED, DEFAULT's row tiles), named for their
// launch layers (launcher.h's LaunchVerifyImpl picks one by the params' implementation).
#pragma once

#include "replayssm/device/verify_fold.cuh"
#include "replayssm/device/verify_staged.cuh"

namespace rssm {

template <int EPL, class Act, bool KDA> struct VerifyKernels {
  static constexpr auto staged = &verify_staged_kernel<EPL, Act, KDA>;
  static constexpr auto rows = &verify_kernel<EPL, Act, KDA>;
};

template <int EPL, class Act, bool KDA> struct VerifyFoldKernels {
  static constexpr auto staged = &verify_fold_staged_kernel<EPL, Act, KDA>;
  static constexpr auto rows = &verify_fold_kernel<EPL, Act, KDA>;
};

}  // namespace rssm
