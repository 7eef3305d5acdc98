// The precision option (precision.h): text, validation, and the quantizer of each operand.
#include "kernels/precision.h"

#include <cmath>
#include <stdexcept>

#include "kernels/transforms/option_text.h"

namespace lpattn {
namespace {

[[noreturn]] void Reject(const std::string& what) {
  throw std::invalid_argument("lpattn precision options: " + what);
}

quant::Format FormatValue(const std::string& key, const std::string& value) {
  const auto format = quant::ParseFormat(value);
  if (!format) {
    Reject("unknown format '" + value + "' for " + key + " (known: " + quant::FormatNames() + ")");
  }
  return *format;
}

}  // namespace

quant::QuantSpec Precision::QuerySpec() const {
  const quant::Granularity g =
      granularity == quant::Granularity::kChannel ? quant::Granularity::kToken : granularity;
  return {qk, g, block, false};
}
quant::QuantSpec Precision::KeySpec() const { return {qk, granularity, block, smooth_k}; }
quant::QuantSpec Precision::ValueSpec() const {
  return {pv, value_granularity.value_or(granularity), block, false};
}

namespace {
quant::QuantSpec BackwardSpec(quant::Format format, quant::Granularity granularity) {
  quant::QuantSpec spec{format, granularity, quant::kDefaultBlock, false};
  spec.scale_casts = format == quant::Format::kFp16;  // gradients underflow a plain fp16 cast
  return spec;
}
}  // namespace

quant::QuantSpec Precision::BackwardTokenSumSpec() const {
  return BackwardSpec(bwd, quant::Granularity::kChannel);
}
quant::QuantSpec Precision::BackwardDpSpec() const {
  return BackwardSpec(BackwardDpFormat(), quant::Granularity::kToken);
}

void ValidatePrecision(const Precision& p) {
  if (p.block < 1) Reject("block must be >= 1, got " + std::to_string(p.block));
  if (p.p_folds_v && p.p != quant::Format::kInt8) {
    Reject(std::string("pfold=1 folds V's token scales into an int8 P: it needs p=int8, got p=") +
           quant::FormatName(p.p));
  }
}

Precision ParsePrecision(const std::string& text) {
  Precision p;
  ForEachOption(text, [&](const std::string& key, const std::string& value) {
    if (key == "qk") {
      p.qk = FormatValue(key, value);
    } else if (key == "pv") {
      p.pv = FormatValue(key, value);
    } else if (key == "p") {
      p.p = FormatValue(key, value);
    } else if (key == "gran" || key == "vgran") {
      const auto g = quant::ParseGranularity(value);
      if (!g) Reject("unknown granularity '" + value + "' (known: tensor, token, block, channel)");
      (key == "gran" ? p.granularity : p.value_granularity.emplace()) = *g;
    } else if (key == "block") {
      double x = 0.0;
      if (!ParseOptionNumber(value, x) || x != std::floor(x) || x < 1 || x > 1e9) {
        Reject("block must be a whole number >= 1, got '" + value + "'");
      }
      p.block = int64_t(x);
    } else if (key == "smooth_k") {
      if (value != "0" && value != "1") Reject("bad value '" + value + "' for smooth_k (0 or 1)");
      p.smooth_k = value == "1";
    } else if (key == "bwd" || key == "bwd_dp") {
      const quant::Format f = FormatValue(key, value);
      if (f == quant::Format::kFp8E4M3 || f == quant::Format::kFp8E5M2) {
        Reject(key + " takes fp32, bf16, fp16 or int8, got '" + value + "'");
      }
      (key == "bwd" ? p.bwd : p.bwd_dp.emplace()) = f;
    } else if (key == "pfold") {
      if (value != "0" && value != "1") Reject("bad value '" + value + "' for pfold (0 or 1)");
      p.p_folds_v = value == "1";
    } else if (key == "path") {
      if (value != "native" && value != "sim") {
        Reject("bad value '" + value + "' for path (native or sim)");
      }
      p.path = value == "sim" ? ComputePath::kSimulated : ComputePath::kNative;
    } else {
      Reject("unknown option '" + key + "' (known: qk, pv, p, pfold, gran, vgran, block, smooth_k, path, bwd, bwd_dp)");
    }
  }, Reject);
  ValidatePrecision(p);
  return p;
}

std::string FormatPrecision(const Precision& p) {
  const Precision d;
  std::string out;
  auto add = [&](const std::string& item) { out += (out.empty() ? "" : ":") + item; };
  if (p.qk != d.qk) add(std::string("qk=") + quant::FormatName(p.qk));
  if (p.pv != d.pv) add(std::string("pv=") + quant::FormatName(p.pv));
  if (p.p != d.p) add(std::string("p=") + quant::FormatName(p.p));
  if (p.p_folds_v) add("pfold=1");
  if (p.granularity != d.granularity) {
    add(std::string("gran=") + quant::GranularityName(p.granularity));
  }
  if (p.value_granularity) {
    add(std::string("vgran=") + quant::GranularityName(*p.value_granularity));
  }
  if (p.block != d.block) add("block=" + std::to_string(p.block));
  if (p.smooth_k) add("smooth_k=1");
  if (p.path != d.path) add("path=sim");
  if (p.bwd != d.bwd) add(std::string("bwd=") + quant::FormatName(p.bwd));
  if (p.bwd_dp) add(std::string("bwd_dp=") + quant::FormatName(*p.bwd_dp));
  return out;
}

}  // namespace lpattn
