// The arm seam of docs/harness.md §1: an arm spec parsed once into an arm with typed options
// (MakeArm), its canonical name, and the evaluation swap's precondition. The arms themselves
// are in softmax_arms.cc (exact, sink, offbyone, outgate, the value gates) and kernel_arms.cc
// (kint:<options>, tda:<options>).
#include "harness/model/attention_arm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "harness/common/number_text.h"
#include "harness/model/arms.h"
#include "kernels/attention.h"
#include "kernels/kinterval.h"
#include "kernels/threshold.h"
#include "kernels/value_gate.h"

namespace lpattn::harness {

std::vector<std::string> KnownArms() {
  return {"exact",         "sink",          "offbyone",         "outgate",
          "normgate",      "projgate",      "sink+normgate",    "sink+projgate",
          "outgate+sink",  "outgate+offbyone", "outgate+normgate", "outgate+projgate",
          "outgate+sink+normgate", "outgate+sink+projgate"};
}

std::string AttentionArm::Name() const {
  std::string precision = FormatPrecision(precision_);
  if (dense_) {
    precision += (precision.empty() ? "dense=" : ":dense=") + std::string(DenseFormatName(*dense_));
  }
  return precision.empty() ? KernelName() : KernelName() + "+" + precision;
}

namespace {

constexpr char kKIntervalPrefix[] = "kint:";
constexpr char kThresholdPrefix[] = "tda:";

// "exact:<options>" and "sink:<options>": exact attention (with a learned sink) with score
// options, ','-separated: softcap=C (docs/math.md §1.3, C finite and > 0), alibi=1 (§1.4, the
// ALiBi paper's slopes for the model's heads) and window=W (§1.5, W >= 1 keys).
std::unique_ptr<AttentionArm> MakeScoreOptionsArm(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string base = spec.substr(0, colon);
  const auto fail = [&](const std::string& why) {
    throw std::invalid_argument("attention arm '" + spec + "': " + why);
  };
  arms::ScoreOptions options;
  std::string rest = spec.substr(colon + 1);
  if (rest.empty()) fail("expected " + base + ":softcap=<c>,alibi=1,window=<w> (any of them)");
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
    if (key == "softcap") {
      double softcap = 0.0;
      if (!ReadWholeDouble(value, softcap) || softcap <= 0.0 ||
          softcap > double(std::numeric_limits<float>::max())) {
        fail("softcap must be a finite number > 0, got '" + value + "'");
      }
      options.softcap = float(softcap);
    } else if (key == "alibi") {
      if (value != "0" && value != "1") fail("alibi must be 0 or 1, got '" + value + "'");
      options.alibi = value == "1";
    } else if (key == "window") {
      if (!ReadWholeInteger(value, options.window) || options.window < 1) {
        fail("window must be a whole number >= 1, got '" + value + "'");
      }
    } else {
      fail("unknown option '" + item + "' (known: softcap=<c>, alibi=0|1, window=<w>)");
    }
  }
  return arms::MakeSoftmaxArm(spec, base == "sink" ? SinkMode::kLearned : SinkMode::kNone, options);
}

std::unique_ptr<AttentionArm> MakeKernelArm(const std::string& spec) {
  if (spec.rfind("exact:", 0) == 0 || spec.rfind("sink:", 0) == 0) return MakeScoreOptionsArm(spec);
  if (spec == "exact") return arms::MakeSoftmaxArm("exact", SinkMode::kNone);
  if (spec == "sink") return arms::MakeSoftmaxArm("sink", SinkMode::kLearned);
  if (spec == "offbyone") return arms::MakeSoftmaxArm("offbyone", SinkMode::kOffByOne);
  if (spec == "outgate") {
    return arms::MakeOutputGateArm(spec, arms::MakeSoftmaxArm("exact", SinkMode::kNone));
  }
  if (spec.rfind("outgate+", 0) == 0) {  // the output gate after another gate or a sink
    const std::string inner = spec.substr(8);
    const std::vector<std::string> known = KnownArms();
    if (inner == "exact" || inner.rfind("outgate", 0) == 0 ||
        std::find(known.begin(), known.end(), inner) == known.end()) {
      throw std::invalid_argument("attention arm '" + spec +
                                  "': the output gate combines with sink, offbyone, normgate, "
                                  "projgate, sink+normgate or sink+projgate");
    }
    return arms::MakeOutputGateArm(spec, MakeKernelArm(inner));
  }
  if (spec == "normgate" || spec == "projgate" || spec == "sink+normgate" ||
      spec == "sink+projgate") {
    const bool sink = spec.rfind("sink+", 0) == 0;
    const bool norm = spec.find("normgate") != std::string::npos;
    return arms::MakeValueGateArm(spec, norm ? ValueGateKind::kNorm : ValueGateKind::kProjection,
                                          sink ? SinkMode::kLearned : SinkMode::kNone);
  }
  if (spec.rfind(kKIntervalPrefix, 0) == 0) {
    try {
      return arms::MakeKIntervalArm(
          spec, ParseKInterval(spec.substr(sizeof kKIntervalPrefix - 1)));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("attention arm '" + spec + "': " + e.what());
    }
  }
  if (spec.rfind(kThresholdPrefix, 0) == 0 || spec == "tda") {
    try {
      const std::string text = spec.size() > 3 ? spec.substr(sizeof kThresholdPrefix - 1) : "";
      return arms::MakeThresholdArm(spec, ParseThreshold(text));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("attention arm '" + spec + "': " + e.what());
    }
  }
  std::string known;
  for (const std::string& name : KnownArms()) known += name + ", ";
  throw std::invalid_argument("unknown attention arm '" + spec + "' (known: " + known +
                              "kint:<options> such as kint:K=4,cal=window,round=nearest,ste=prob, "
                              "tda or tda:<options> such as tda:views=1,p=2, exact:<options> and "
                              "sink:<options> (softcap=<c>, alibi=1, window=<w>); any of them "
                              "+<precision> such as exact+qk=int8,pv=fp8e4m3)");
}

// Where the precision items of an arm spec begin: after the first '+' whose piece (up to the
// next '+') holds a key=value item. A kernel's own spec joins arm names with '+' (sink+normgate)
// but never puts an '=' in such a piece, and its options (kint:K=4,...) come before any '+'.
size_t PrecisionStart(const std::string& spec) {
  for (size_t plus = spec.find('+'); plus != std::string::npos; plus = spec.find('+', plus + 1)) {
    const size_t next = spec.find('+', plus + 1);
    if (spec.substr(plus + 1, next - plus - 1).find('=') != std::string::npos) return plus;
  }
  return std::string::npos;
}

}  // namespace

std::unique_ptr<AttentionArm> MakeArm(const std::string& spec) {
  // "+key=value..." after the kernel's own spec is the operand precision; its items may be
  // separated by ',' or ':' (the canonical form), or by '+' as benchmark names write them
  // (exact+qk=int8+pv=bf16).
  const size_t plus = PrecisionStart(spec);
  if (plus == std::string::npos) return MakeKernelArm(spec);
  std::unique_ptr<AttentionArm> arm = MakeKernelArm(spec.substr(0, plus));
  try {
    // dense=<fp32|bf16> is the harness's (the model's dense products, docs/harness.md §1.1);
    // the other items are the kernels' operand precision.
    std::string kernel_items;
    size_t begin = plus + 1;
    while (begin <= spec.size()) {
      const size_t end = std::min(spec.find_first_of(",:+", begin), spec.size());
      const std::string item = spec.substr(begin, end - begin);
      if (item.rfind("dense=", 0) == 0) {
        arm->SetDenseFormat(ParseDenseFormat(item.substr(6)));
      } else {
        kernel_items += (kernel_items.empty() ? "" : ":") + item;
      }
      begin = end + 1;
    }
    if (!kernel_items.empty()) arm->SetPrecision(ParsePrecision(kernel_items));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument("attention arm '" + spec + "': " + e.what());
  }
  return arm;
}

void CheckSwappable(const std::string& trained, const std::string& with,
                    const ModelConfig& model) {
  const std::unique_ptr<AttentionArm> from = MakeArm(trained), to = MakeArm(with);
  const std::vector<ArmParam> a = from->LayerParams(model), b = to->LayerParams(model);
  const bool same = std::equal(a.begin(), a.end(), b.begin(), b.end(),
                               [](const ArmParam& x, const ArmParam& y) {
                                 return x.name == y.name && x.size == y.size;
                               });
  if (!same) {
    throw std::invalid_argument("cannot evaluate a '" + from->Name() + "' model with arm '" +
                                to->Name() + "': their per-layer parameters differ");
  }
}

}  // namespace lpattn::harness
