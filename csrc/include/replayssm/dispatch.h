// Picks a kernel instantiation from runtime (K, dtype, variant): K = 32 * EPL.
#pragma once

#include <type_traits>

#include "replayssm/device/compat.cuh"
#include "replayssm/replayssm.h"

namespace rssm {

// Calls `launch.template operator()<EPL, Act, KDA>()` (a functor, C++17) for the instantiation
// matching the params base's (K, dtype, variant). K must be one of the supported head dims
// (checked before).
template <class Launch> int dispatch(const rssm_base_params &base, const Launch &launch) {
  const int32_t K = base.K, dtype = base.dtype, variant = base.variant;
  auto by_variant = [&](auto epl, auto act) -> int {
    using Act = decltype(act);
    constexpr int EPL = decltype(epl)::value;
    return variant == RSSM_VARIANT_KDA ? launch.template operator()<EPL, Act, true>()
                                       : launch.template operator()<EPL, Act, false>();
  };
  auto by_dtype = [&](auto epl) -> int {
    switch (dtype) {
      case RSSM_DTYPE_F16: return by_variant(epl, __half{});
      case RSSM_DTYPE_BF16: return by_variant(epl, __nv_bfloat16{});
      default: return by_variant(epl, float{});
    }
  };
  switch (K) {
    case 32: return by_dtype(std::integral_constant<int, 1>{});
    case 64: return by_dtype(std::integral_constant<int, 2>{});
    case 96: return by_dtype(std::integral_constant<int, 3>{});
    case 128: return by_dtype(std::integral_constant<int, 4>{});
    default: return by_dtype(std::integral_constant<int, 8>{});  // 256
  }
}

}  // namespace rssm
