// The accuracy table of low-precision operands (quant_error.h).
#include "harness/studies/quant_error.h"

#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>
#include <stdexcept>

#include "kernels/attention.h"
#include "kernels/precision.h"
#include "kernels/reference.h"
#include "quant/format.h"

namespace lpattn::harness {
namespace {

// Dense [1, heads, tokens, dim] inputs of one kind, and the fp64 reference of them.
struct Inputs {
  std::vector<float> q, k, v, d_o;
  ReferenceForwardResult ref;
  ReferenceGradients grads;
};

Inputs MakeInputs(const QuantErrorOptions& o, bool outliers, const AttentionShape& shape,
                  const AttentionOptions& options) {
  const size_t n = size_t(o.heads * o.tokens * o.head_dim);
  Inputs in{std::vector<float>(n), std::vector<float>(n), std::vector<float>(n),
            std::vector<float>(n), {}, {}};
  std::mt19937_64 rng(o.seed * 2 + (outliers ? 1 : 0));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::vector<float>* t : {&in.q, &in.k, &in.v, &in.d_o}) {
    for (float& x : *t) x = normal(rng);
  }
  if (outliers) {
    // Fixed, spread-out channels: the same ones in every head and token.
    const int64_t count = std::min(o.outlier_channels, o.head_dim);
    for (size_t r = 0; r < n / size_t(o.head_dim); ++r) {
      for (int64_t c = 0; c < count; ++c) {
        const size_t at = r * size_t(o.head_dim) + size_t((c * 37 + 5) % o.head_dim);
        in.q[at] *= o.outlier_scale;
        in.k[at] += o.outlier_shift;
        if (c < (count + 1) / 2) in.v[at] *= o.outlier_scale;
      }
    }
  }
  const ReferenceInputs dense{std::vector<double>(in.q.begin(), in.q.end()),
                              std::vector<double>(in.k.begin(), in.k.end()),
                              std::vector<double>(in.v.begin(), in.v.end()),
                              {}};
  in.ref = ReferenceExactForward(shape, options, dense);
  in.grads = ReferenceExactBackward(shape, options, dense,
                                    std::vector<double>(in.d_o.begin(), in.d_o.end()));
  return in;
}

TensorError Compare(const std::vector<float>& x, const std::vector<double>& ref) {
  double diff = 0, norm_x = 0, norm_ref = 0, dot = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (x[i] - ref[i]) * (x[i] - ref[i]);
    norm_x += double(x[i]) * x[i];
    norm_ref += ref[i] * ref[i];
    dot += x[i] * ref[i];
  }
  return {std::sqrt(diff / norm_ref), dot / std::sqrt(norm_x * norm_ref)};
}

QuantErrorRow Measure(const Inputs& in, const std::string& kind, const std::string& precision,
                      const AttentionShape& shape, AttentionOptions options) {
  options.precision = ParsePrecision(precision);
  const Strides dense = ContiguousBHTD(shape.heads, shape.q_len, shape.head_dim);
  const size_t n = in.q.size();
  std::vector<float> o(n), lse(size_t(shape.heads * shape.q_len)), dq(n), dk(n), dv(n);
  ExactForward(shape, options,
               {{in.q.data(), dense}, {in.k.data(), dense}, {in.v.data(), dense},
                {o.data(), dense}, lse.data()});
  BackwardArgs args;
  args.q = {in.q.data(), dense};
  args.k = {in.k.data(), dense};
  args.v = {in.v.data(), dense};
  args.o = {o.data(), dense};
  args.d_o = {in.d_o.data(), dense};
  args.lse = lse.data();
  args.dq = {dq.data(), dense};
  args.dk = {dk.data(), dense};
  args.dv = {dv.data(), dense};
  ExactBackward(shape, options, args);
  return {kind, FormatPrecision(options.precision), Compare(o, in.ref.o),
          Compare(dq, in.grads.dq), Compare(dk, in.grads.dk), Compare(dv, in.grads.dv)};
}

}  // namespace

std::vector<std::string> QuantErrorPrecisions() {
  std::vector<std::string> list = {""};
  for (const quant::Format f : quant::kAllFormats) {
    if (f == quant::Format::kFp32) continue;
    const std::string both = std::string("qk=") + quant::FormatName(f) + ",pv=" +
                             quant::FormatName(f);
    if (!quant::FormatIsScaled(f)) {
      list.push_back(both);
      list.push_back(both + ",smooth_k=1");
      continue;
    }
    for (const char* gran : {"tensor", "token", "block", "channel"}) {
      list.push_back(both + ",gran=" + gran);
    }
    list.push_back(both + ",gran=token,smooth_k=1");
    list.push_back(both + ",gran=channel,smooth_k=1");
  }
  // P quantization alone, and on top of int8 operands.
  for (const char* p : {"p=bf16", "p=fp8e4m3", "p=int8", "qk=int8,pv=int8,gran=token,p=int8"}) {
    list.push_back(p);
  }
  // Both forward products on a native path (AMX tiles where the CPU has them, docs/math.md
  // §4.1), and the low-precision backward (§4.2) alone and on top of low-precision operands.
  for (const char* p : {"qk=bf16,pv=bf16,p=bf16", "qk=int8,pv=int8,p=int8,gran=tensor",
                        "bwd=bf16", "bwd=fp16", "bwd=int8", "bwd=int8,bwd_dp=int8",
                        "qk=bf16,pv=bf16,p=bf16,bwd=bf16",
                        "qk=int8,pv=int8,gran=token,p=int8,bwd=int8"}) {
    list.push_back(p);
  }
  return list;
}

std::vector<QuantErrorRow> MeasureQuantError(const QuantErrorOptions& o) {
  if (o.tokens < 1 || o.heads < 1 || o.head_dim < 1 || o.head_dim > kMaxHeadDim ||
      o.outlier_channels < 0 || !(o.outlier_scale > 0.0f) || !std::isfinite(o.outlier_shift)) {
    throw std::invalid_argument(
        "quant-error: tokens and heads must be >= 1, head_dim in [1, 256], outlier channels "
        ">= 0, outlier scale > 0 and shift finite");
  }
  const AttentionShape shape{1, o.heads, o.heads, o.tokens, o.tokens, o.head_dim};
  AttentionOptions options;
  options.causal = true;
  std::vector<QuantErrorRow> rows;
  for (const bool outliers : {false, true}) {
    const Inputs in = MakeInputs(o, outliers, shape, options);
    for (const std::string& precision : QuantErrorPrecisions()) {
      rows.push_back(Measure(in, outliers ? "outliers" : "gaussian", precision, shape, options));
    }
  }
  return rows;
}

std::string FormatQuantErrorTable(const std::vector<QuantErrorRow>& rows) {
  std::ostringstream out;
  std::string kind;
  char line[512];
  for (const QuantErrorRow& r : rows) {
    if (r.inputs != kind) {
      kind = r.inputs;
      out << (out.tellp() > 0 ? "\n" : "") << "Inputs: " << kind
          << " (relative L2 error against the fp64 reference with fp32 operands; cosine "
             "similarity of O)\n\n"
          << "| precision | O | dQ | dK | dV | cos(O) |\n|---|---|---|---|---|---|\n";
    }
    std::snprintf(line, sizeof line, "| %s | %.2e | %.2e | %.2e | %.2e | %.6f |\n",
                  r.precision.empty() ? "fp32" : ("`" + r.precision + "`").c_str(), r.o.rel_l2,
                  r.dq.rel_l2, r.dk.rel_l2, r.dv.rel_l2, r.o.cosine);
    out << line;
  }
  return out.str();
}

nlohmann::json QuantErrorJson(const QuantErrorOptions& o, const std::vector<QuantErrorRow>& rows) {
  nlohmann::json j;
  j["shape"] = {{"tokens", o.tokens}, {"heads", o.heads}, {"head_dim", o.head_dim},
                {"causal", true}};
  j["seed"] = o.seed;
  j["outliers"] = {{"channels", o.outlier_channels}, {"scale", o.outlier_scale},
                   {"shift", o.outlier_shift}};
  for (const QuantErrorRow& r : rows) {
    nlohmann::json row = {{"inputs", r.inputs}, {"precision", r.precision.empty() ? "fp32" : r.precision}};
    for (const auto& [name, e] : {std::pair<const char*, const TensorError&>{"o", r.o},
                                  {"dq", r.dq}, {"dk", r.dk}, {"dv", r.dv}}) {
      row[name] = {{"rel_l2", e.rel_l2}, {"cosine", e.cosine}};
    }
    j["rows"].push_back(row);
  }
  return j;
}

}  // namespace lpattn::harness
