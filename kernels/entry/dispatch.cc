// Which Highway targets the kernels were compiled for, which this CPU runs, and which one
// HWY_DYNAMIC_DISPATCH picks now; the native families and how each operand kind is multiplied;
// plus the hooks that restrict dispatch to one target and the native families to a set.
#include <string>
#include <vector>

#include "kernels/attention.h"
#include "kernels/native/bf16_pair_products.h"
#include "kernels/native/native_paths.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/entry/dispatch.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn {
namespace HWY_NAMESPACE {

// Compiled into every target exactly like the kernels, so dispatching it names their target.
const char* DispatchedTargetName() { return hwy::TargetName(HWY_TARGET); }

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn {

HWY_EXPORT(DispatchedTargetName);

namespace {
// The CPU's own compiled-and-supported targets, read on first use, before SelectTarget's
// restriction changes what Highway reports.
int64_t CpuTargets() {
  static const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return targets;
}

std::vector<std::string> TargetNames(int64_t targets) {
  std::vector<std::string> names;
  for (int64_t rest = targets; rest != 0; rest &= rest - 1) {
    names.emplace_back(hwy::TargetName(rest & -rest));
  }
  return names;
}

// How each operand kind is multiplied under the chosen target and the enabled native families
// (docs/design.md §4): the products of kernels/native/quantized_operands.cc's choices.
std::vector<std::string> ProductRoutes(const std::string& target) {
  using native::NativePath;
  const auto on = [](NativePath path) { return native::NativePathEnabled(path); };
  // "<tiles> for <condition>, else " when the tiles are enabled, else nothing.
  const auto tiles = [](bool enabled, const char* what, const char* when) {
    return enabled ? std::string(what) + " for " + when + ", else " : std::string();
  };
  const std::string highway = "highway " + target;
  // AVX3_DL (a static build's target on newer CPUs, x86_targets.h) takes AVX3's tiles.
  const bool avx512 = target == "AVX3" || target == "AVX3_DL";
  const std::string pairs = avx512 && on(NativePath::kAvx512Vnni)
                                ? "avx512_vnni (vpdpwssd on int16 pairs widened per key tile)"
                                : highway + " (pmaddwd on int16 pairs widened per key tile)";
  const bool quads = (avx512 && on(NativePath::kAvx512Vnni)) ||
                     (target == "AVX2" && on(NativePath::kAvxVnni));
  const std::string vnni = avx512 ? "avx512_vnni" : "avx_vnni";
  const std::string integer =
      tiles(quads, (vnni + " (vpdpbusd: u8 x s8 quads, Q biased by 128)").c_str(),
            "head_dim a multiple of 4") + pairs;
  const std::string integer_pv =
      tiles(quads, (vnni + " (vpdpbusd: P's codes on V's key quads)").c_str(), "any head_dim") +
      pairs;
  const bool amx_int8 = on(NativePath::kAmxInt8), amx_bf16 = on(NativePath::kAmxBf16);
  // avx512_bf16's dot tiles: where AMX is off and the CPU's vdpbf16ps runs at an FMA's rate.
  const bool dot_bf16 = !amx_bf16 && native::Bf16PairsEnabled();
  // docs/design.md §8: a prefill decodes its coded K and V once per call (DecodesKvOnce).
  const std::string decoded =
      " once per call in a prefill (up to 2 MiB a head), else per key tile";
  return {
      "fp32: " + highway + " (FMA register tiles)",
      "int8 Q K^T: " + tiles(amx_int8, "amx_int8 (tdpbssd tiles on int8 codes)",
                             "head_dim a multiple of 64") + integer,
      "int8 P V: " + tiles(amx_int8, "amx_int8 (tdpbssd tiles on V^T and P^T quads)",
                           "head_dim a multiple of 64") + integer_pv,
      "bf16 Q K^T: " + tiles(amx_bf16, "amx_bf16 (tdpbf16ps tiles)", "head_dim a multiple of 32") +
          tiles(dot_bf16, "avx512_bf16 (vdpbf16ps register tiles)",
                "head_dim a multiple of 32 and query tiles over 4 rows") +
          highway + " (K's codes decoded to fp32" + decoded + ")",
      "fp16 Q K^T: " +
          tiles(amx_bf16,
                "amx_bf16 (each value split exactly into two bf16, depth 4 head_dim; K's rows "
                "built once per call in a prefill, else per key tile)",
                "head_dim a multiple of 32 and query tiles over 4 rows") +
          highway + " (K's codes decoded to fp32" + decoded + "; in registers for decode tiles)",
      "fp8 Q K^T (scales per tensor, token or block): " +
          tiles(amx_bf16,
                "amx_bf16 (codes decoded to bf16, exact, once per call in a prefill, else per "
                "key tile; scales after the sums)",
                "head_dim a multiple of 32 and query tiles over 4 rows") +
          tiles(dot_bf16,
                "avx512_bf16 (codes decoded to bf16, exact, once per call in a prefill, else "
                "per key tile, on vdpbf16ps register tiles)",
                "head_dim a multiple of 32 and query tiles over 4 rows") +
          highway +
          " (K's 1-byte codes decoded to fp32" + decoded + "; in registers for decode tiles)",
      "bf16 P V with p=bf16: " +
          tiles(amx_bf16 && on(NativePath::kAvx512Bf16),
                "amx_bf16 (V^T and P^T pairs on tdpbf16ps tiles)",
                "head_dim a multiple of 32 and a finite V") +
          tiles(dot_bf16, "avx512_bf16 (V^T and P^T pairs on vdpbf16ps register tiles)",
                "head_dim a multiple of 32, a finite V and query tiles over 4 rows") +
          highway + " (V's codes decoded to fp32" + decoded + ")",
      "bf16 and fp16 V otherwise: " + highway +
          " (16-bit codes decoded to fp32" + decoded + "; in registers for decode tiles)",
      "fp8 V (scales per tensor, token or block) and a KvCache's int8 V (per token): " + highway +
          " (1-byte codes decoded to fp32" + decoded +
          ", fp8 through fp16 with F16C; in registers for decode tiles)",
      "a KvCache's int8 V with p=int8,pfold=1: " +
          tiles(avx512 && on(NativePath::kAvx512Vnni),
                "avx512_vnni (vpdpbusd: P's folded codes on V's rows interleaved into key "
                "quads in registers)",
                "decode tiles and head_dim a multiple of 64") +
          highway + " (the folded codes put back on each token's scale, V decoded as above)",
      "bf16 and fp16 Q on the fp32 score products: cast as each query tile is packed",
      "Q off the paths above, per-channel fp8 and int8 K, smoothed operands, thresholded "
      "attention's forward: simulated (fp32 copies of the quantized values)",
      "backward with bwd=bf16 (and bwd_dp bf16): " +
          tiles(amx_bf16 && on(NativePath::kAvx512Bf16),
                "amx_bf16 (dP, dV, dK and dQ on tdpbf16ps tiles; S too with qk=bf16)",
                "head_dim a multiple of 32 and finite operands") +
          tiles(dot_bf16 && on(NativePath::kAvx512Bf16),
                "avx512_bf16 (dP, dV, dK and dQ on vdpbf16ps register tiles; S too with "
                "qk=bf16)",
                "head_dim a multiple of 32 and finite operands") +
          highway + " (fp32 products on the bf16-rounded operands)",
      "backward with bwd=int8 (and bwd_dp bf16): " +
          tiles(amx_bf16 && amx_int8 && on(NativePath::kAvx512Bf16),
                "amx_int8 (dV, dK and dQ on tdpbssd tiles from int8 codes per channel and per "
                "block) and amx_bf16 (dP)",
                "head_dim a multiple of 64 and finite operands") +
          tiles(dot_bf16 && on(NativePath::kAvx512Bf16),
                "avx512_bf16 (dV, dK and dQ on vdpbf16ps register tiles from the same int8 "
                "codes as bf16 values, exact integer sums; dP too)",
                "head_dim a multiple of 64 and finite operands") +
          highway + " (fp32 products on the int8-rounded operands)",
      "every other backward: " + highway +
          " (fp32 products on the dequantized operands, rounded as bwd= says)",
  };
}

}  // namespace

DispatchInfo GetDispatchInfo() {
  DispatchInfo info;
  info.compiled = TargetNames(HWY_TARGETS);
  info.supported = TargetNames(CpuTargets());
  info.chosen = HWY_DYNAMIC_DISPATCH(DispatchedTargetName)();
  for (const native::NativePathState& state : native::NativePathStates()) {
    info.native.push_back({native::NativePathName(state.path), state.compiled, state.cpu,
                           state.enabled, state.note});
  }
  info.products = ProductRoutes(info.chosen);
  return info;
}

bool SelectNativePaths(const std::string& names) { return native::SelectNativePaths(names); }

bool SelectTarget(const std::string& name) {
  int64_t chosen = 0;
  if (!name.empty()) {
    for (int64_t rest = CpuTargets(); rest != 0; rest &= rest - 1) {
      if (name == hwy::TargetName(rest & -rest)) chosen = rest & -rest;
    }
    if (chosen == 0) return false;
  }
  hwy::SetSupportedTargetsForTest(chosen);
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  return true;
}

}  // namespace lpattn
#endif  // HWY_ONCE
