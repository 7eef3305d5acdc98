// Quantizers (quantizer.h): group scales, K smoothing and the simulation path.
#include "quant/quantizer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "quant/codec.h"
#include "tbb/parallel_for.h"

namespace lpattn::quant {

const char* GranularityName(Granularity granularity) {
  switch (granularity) {
    case Granularity::kTensor: return "tensor";
    case Granularity::kToken: return "token";
    case Granularity::kBlock: return "block";
    case Granularity::kChannel: return "channel";
  }
  return "?";
}

std::optional<Granularity> ParseGranularity(std::string_view name) {
  for (Granularity g : {Granularity::kTensor, Granularity::kToken, Granularity::kBlock,
                        Granularity::kChannel}) {
    if (name == GranularityName(g)) return g;
  }
  return std::nullopt;
}

void ValidateSpec(const QuantSpec& spec, const char* what) {
  if (spec.granularity == Granularity::kBlock && spec.block < 1) {
    throw std::invalid_argument(std::string(what) + ": block size must be >= 1, got " +
                                std::to_string(spec.block));
  }
}

namespace {

// The tensor's (batch, head) slices, each with its groups' largest magnitudes.
struct Slices {
  const QuantSpec& spec;
  const TensorView& x;
  int64_t GroupsPerSlice() const {
    switch (spec.granularity) {
      case Granularity::kTensor: return 1;
      case Granularity::kToken: return x.tokens;
      case Granularity::kBlock: return (x.tokens + spec.block - 1) / spec.block;
      case Granularity::kChannel: return x.dim;
    }
    return 1;
  }
  // The group of token t's row (token, block and tensor scales).
  int64_t Group(int64_t t) const {
    return spec.granularity == Granularity::kToken   ? t
           : spec.granularity == Granularity::kBlock ? t / spec.block
                                                     : 0;
  }
  int64_t Count() const { return x.batch * x.heads; }
  const float* Row(int64_t slice, int64_t t) const {
    return x.data + (slice / x.heads) * x.batch_stride + (slice % x.heads) * x.head_stride +
           t * x.token_stride;
  }
};

// Each channel's mean over the tokens of every slice: [slices * dim].
std::vector<float> ChannelMeans(const Slices& s) {
  const int64_t dim = s.x.dim;
  std::vector<float> mean(size_t(s.Count() * dim));
  tbb::parallel_for(int64_t(0), s.Count(), [&](int64_t slice) {
    std::vector<double> sum(size_t(dim), 0.0);
    for (int64_t t = 0; t < s.x.tokens; ++t) {
      const float* row = s.Row(slice, t);
      for (int64_t c = 0; c < dim; ++c) sum[size_t(c)] += row[c];
    }
    for (int64_t c = 0; c < dim; ++c) {
      mean[size_t(slice * dim + c)] = float(sum[size_t(c)] / double(s.x.tokens));
    }
  });
  return mean;
}

[[noreturn]] void RejectValue(const char* what, const Slices& s, int64_t slice, int64_t t,
                              int64_t c) {
  throw std::invalid_argument(
      std::string(what) + ": non-finite value at [batch " + std::to_string(slice / s.x.heads) +
      ", head " + std::to_string(slice % s.x.heads) + ", token " + std::to_string(t) +
      ", channel " + std::to_string(c) + "] cannot be given a " + FormatName(s.spec.format) +
      " scale");
}

// The channel of a row's first NaN or infinite value (dim if none).
int64_t FirstNonFinite(const float* row, int64_t dim) {
  return std::find_if(row, row + dim, [](float v) { return !std::isfinite(v); }) - row;
}

// Largest magnitude of each group of one slice (slice_max: GroupsPerSlice() zeros), of the
// centred values when slice_mean is given.
void SliceMaxima(const Slices& s, const float* slice_mean, int64_t slice, float* slice_max,
                 const char* what) {
  const int64_t dim = s.x.dim;
  if (!slice_mean) {  // the rows in one call
    const size_t rows = size_t(s.x.tokens);
    if (s.spec.granularity == Granularity::kChannel) {
      const size_t bad =
          MaxAbsRowsInto(s.Row(slice, 0), size_t(s.x.token_stride), rows, slice_max, size_t(dim));
      if (bad < rows) {
        RejectValue(what, s, slice, int64_t(bad), FirstNonFinite(s.Row(slice, int64_t(bad)), dim));
      }
      return;
    }
    std::vector<float> row_max(rows);
    MaxAbsRows(s.Row(slice, 0), size_t(s.x.token_stride), rows, size_t(dim), row_max.data());
    for (int64_t t = 0; t < s.x.tokens; ++t) {
      const float m = row_max[size_t(t)];
      if (!std::isfinite(m)) RejectValue(what, s, slice, t, FirstNonFinite(s.Row(slice, t), dim));
      float& group = slice_max[s.Group(t)];
      group = std::max(group, m);
    }
    return;
  }
  std::vector<float> centred(static_cast<size_t>(dim));
  for (int64_t t = 0; t < s.x.tokens; ++t) {
    const float* row = s.Row(slice, t);
    for (int64_t c = 0; c < dim; ++c) centred[size_t(c)] = row[c] - slice_mean[c];
    bool finite;
    if (s.spec.granularity == Granularity::kChannel) {
      finite = MaxAbsInto(centred.data(), slice_max, size_t(dim));
    } else {
      const float m = MaxAbsRow(centred.data(), size_t(dim));
      finite = std::isfinite(m);
      slice_max[s.Group(t)] = std::max(slice_max[s.Group(t)], m);
    }
    if (!finite) RejectValue(what, s, slice, t, FirstNonFinite(centred.data(), dim));
  }
}

// Largest magnitude of each group of each slice ([slices * groups]), of the centred values.
std::vector<float> GroupMaxima(const Slices& s, const std::vector<float>& mean, const char* what) {
  const int64_t groups = s.GroupsPerSlice(), dim = s.x.dim;
  std::vector<float> amax(size_t(s.Count() * groups), 0.0f);
  tbb::parallel_for(int64_t(0), s.Count(), [&](int64_t slice) {
    SliceMaxima(s, mean.empty() ? nullptr : mean.data() + slice * dim, slice,
                amax.data() + slice * groups, what);
  });
  if (s.spec.granularity == Granularity::kTensor) {  // one group across all slices
    const float all = *std::max_element(amax.begin(), amax.end());
    std::fill(amax.begin(), amax.end(), all);
  }
  return amax;
}

// ScaleOfMax (amax / FormatMax, a power of two for a scaled cast), with 1 for an all-zero group
// (its codes are 0 whatever the scale).
std::vector<float> GroupScales(const QuantSpec& spec, std::vector<float> amax, const char* what) {
  for (float& a : amax) {
    const float scale = ScaleOfMax(spec.format, a);
    if (a > 0.0f && scale == 0.0f) {
      throw std::invalid_argument(std::string(what) + ": a group's largest magnitude (" +
                                  std::to_string(a) + ") gives a " + FormatName(spec.format) +
                                  " scale that underflows to zero");
    }
    a = a > 0.0f ? scale : 1.0f;
  }
  return amax;
}

// One slice quantized and dequantized into out (its [tokens, dim] rows) with its groups'
// scales; per-channel scales that are powers of two are applied as products by their inverses.
void RoundTripSlice(const Slices& s, const float* slice_mean, int64_t slice,
                    const float* slice_scales, float* out) {
  const QuantSpec& spec = s.spec;
  const int64_t dim = s.x.dim, tokens = s.x.tokens;
  std::vector<float> inverses;
  if (spec.granularity == Granularity::kChannel &&
      std::all_of(slice_scales, slice_scales + dim, InverseIsExact)) {
    inverses.resize(size_t(dim));
    for (int64_t c = 0; c < dim; ++c) inverses[size_t(c)] = 1.0f / slice_scales[c];
  }
  const float* slice_inverses = inverses.empty() ? nullptr : inverses.data();
  if (!slice_mean) {  // the rows in one call
    if (spec.granularity == Granularity::kChannel) {
      RoundTripRowsScales(spec.format, s.Row(slice, 0), size_t(s.x.token_stride), slice_scales,
                          slice_inverses, out, size_t(dim), size_t(tokens), size_t(dim));
      return;
    }
    std::vector<float> row_scales(static_cast<size_t>(tokens));
    for (int64_t t = 0; t < tokens; ++t) row_scales[size_t(t)] = slice_scales[s.Group(t)];
    RoundTripRows(spec.format, s.Row(slice, 0), size_t(s.x.token_stride), row_scales.data(), out,
                  size_t(dim), row_scales.size(), size_t(dim));
    return;
  }
  for (int64_t t = 0; t < tokens; ++t) {
    const float* row = s.Row(slice, t);
    float* dst = out + t * dim;
    for (int64_t c = 0; c < dim; ++c) dst[c] = row[c] - slice_mean[c];
    if (spec.granularity == Granularity::kChannel) {
      RoundTripRowScales(spec.format, dst, slice_scales, dst, size_t(dim), slice_inverses);
    } else {
      RoundTripRow(spec.format, dst, slice_scales[s.Group(t)], dst, size_t(dim));
    }
    for (int64_t c = 0; c < dim; ++c) dst[c] += slice_mean[c];
  }
}

}  // namespace

void QuantizeDequantize(const QuantSpec& spec, const TensorView& x, float* out, const char* what) {
  ValidateSpec(spec, what);
  const Slices s{spec, x};
  const int64_t dim = x.dim, groups = s.GroupsPerSlice();
  const std::vector<float> mean = spec.smooth ? ChannelMeans(s) : std::vector<float>();
  // Every group's scale (and every value checked) before anything is written.
  std::vector<float> scales(size_t(s.Count() * groups), 1.0f);
  if (FormatIsScaled(spec.format) || (spec.scale_casts && spec.format != Format::kFp32)) {
    scales = GroupScales(spec, GroupMaxima(s, mean, what), what);
  }
  tbb::parallel_for(int64_t(0), s.Count(), [&](int64_t slice) {
    RoundTripSlice(s, mean.empty() ? nullptr : mean.data() + slice * dim, slice,
                   scales.data() + slice * groups, out + slice * x.tokens * dim);
  });
}

void QuantizeToCodes(const QuantSpec& spec, const TensorView& x, uint8_t* codes,
                     float* token_scales, const char* what) {
  ValidateSpec(spec, what);
  if (FormatBytes(spec.format) != 1 || spec.granularity == Granularity::kChannel || spec.smooth) {
    throw std::invalid_argument(std::string(what) +
                                ": codes need an 8-bit format with per-token, per-block or "
                                "per-tensor scales and no smoothing");
  }
  const Slices s{spec, x};
  const int64_t dim = x.dim, groups = s.GroupsPerSlice();
  const std::vector<float> scales = GroupScales(spec, GroupMaxima(s, {}, what), what);
  tbb::parallel_for(int64_t(0), s.Count(), [&](int64_t slice) {
    float* slice_scales = token_scales + slice * x.tokens;
    for (int64_t t = 0; t < x.tokens; ++t) {
      slice_scales[t] = scales[size_t(slice * groups + s.Group(t))];
    }
    EncodeRows(spec.format, s.Row(slice, 0), size_t(x.token_stride), slice_scales,
               codes + slice * x.tokens * dim, size_t(dim), size_t(x.tokens), size_t(dim));
  });
}

void QuantizeToChannelCodes(const QuantSpec& spec, const TensorView& x, uint8_t* codes,
                            float* channel_scales, const char* what) {
  ValidateSpec(spec, what);
  if (FormatBytes(spec.format) != 1 || spec.granularity != Granularity::kChannel || spec.smooth) {
    throw std::invalid_argument(std::string(what) +
                                ": channel codes need an 8-bit format with per-channel scales "
                                "and no smoothing");
  }
  const Slices s{spec, x};
  const int64_t dim = x.dim;
  const std::vector<float> scales = GroupScales(spec, GroupMaxima(s, {}, what), what);
  std::copy(scales.begin(), scales.end(), channel_scales);
  tbb::parallel_for(int64_t(0), s.Count(), [&](int64_t slice) {
    const float* slice_scales = scales.data() + slice * dim;
    std::vector<float> scaled(static_cast<size_t>(dim));
    for (int64_t t = 0; t < x.tokens; ++t) {
      // x / scale per element, as RoundTripRowScales divides, then encoded at scale 1.
      const float* row = s.Row(slice, t);
      for (int64_t c = 0; c < dim; ++c) scaled[size_t(c)] = row[c] / slice_scales[c];
      EncodeRow(spec.format, scaled.data(), 1.0f, codes + (slice * x.tokens + t) * dim,
                size_t(dim));
    }
  });
}

}  // namespace lpattn::quant
