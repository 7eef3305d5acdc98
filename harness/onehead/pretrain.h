// Finite pretraining and fresh-context transfer of the one-head model (docs/harness.md §5):
// m tasks of n labelled points, full-batch gradient descent with a constant step from a
// large-resolution start, then the frozen (a, b) on new contexts of N points at fixed
// thresholds. Feature designs other than uniform and label noise are options.
#ifndef LPATTN_HARNESS_ONEHEAD_PRETRAIN_H_
#define LPATTN_HARNESS_ONEHEAD_PRETRAIN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "harness/onehead/model.h"
#include "harness/onehead/population.h"

namespace lpattn::onehead {

// The density of x on [0, 1]: uniform; "tilt:S", proportional to e^{S x}; "bump:A",
// 1 + A cos(2 pi x) with |A| < 1. Both are smooth and positive on [0, 1].
struct Design {
  enum class Kind { kUniform, kTilt, kBump };
  Kind kind = Kind::kUniform;
  double param = 0.0;
  std::string Name() const;
  double Sample(double u) const;  // the inverse CDF at u in [0, 1)
};
// Throws std::invalid_argument on an unknown name or a parameter out of range.
Design ParseDesign(const std::string& text);

// Label noise: "none"; "massart:R", every label flipped with probability R in [0, 1/2);
// "tsybakov:H", flipped with probability (1 - |x - alpha| / H) / 2 within the band
// |x - alpha| < H (rising to 1/2 at the boundary); "localized:H", every label within the band
// flipped. H in (0, 1).
struct LabelNoise {
  enum class Kind { kNone, kMassart, kTsybakov, kLocalized };
  Kind kind = Kind::kNone;
  double param = 0.0;
  std::string Name() const;
  double FlipProbability(double x, double alpha) const;
};
LabelNoise ParseLabelNoise(const std::string& text);

// Uniform draws in [0, 1) from the counter-based generator: the value depends only on
// (seed, stream, index).
double Uniform(uint64_t seed, uint64_t stream, uint64_t index);

// One context: n points of the design at threshold alpha, labels 1{x >= alpha} through the
// noise. Point i uses indices first + 2 i and first + 2 i + 1 of the stream.
void SampleContext(const Design& design, const LabelNoise& noise, double alpha, uint64_t seed,
                   uint64_t stream, uint64_t first, size_t n, double* x, uint8_t* y);

// m tasks of n points: task t's threshold alpha_t ~ U[0, 1] and context.
struct Corpus {
  int64_t m = 0, n = 0;
  std::vector<double> alpha, x;  // x[t * n + i]
  std::vector<uint8_t> y;
};
// Throws std::invalid_argument for m or n < 1.
Corpus SampleCorpus(int64_t m, int64_t n, const Design& design, const LabelNoise& noise,
                    uint64_t seed);

// b0 = m ^ n (the smaller of the two), a0 = b0 + log b0.
Params LargeResolutionInit(int64_t m, int64_t n);

// The empirical risk (1/m) sum_t (F_t - alpha_t)^2 and its gradient, with the mean |F - alpha|
// (the training prediction error); TBB-parallel over tasks, summed in task order.
struct EmpiricalRisk {
  Risk risk;
  double mean_abs_error = 0.0;
};
EmpiricalRisk CorpusRisk(const RowTransform& transform, const Params& params,
                         const Corpus& corpus);

struct PretrainPoint {
  int64_t step = 0;
  double t = 0.0;
  Params params;
  double risk = 0.0, mean_abs_error = 0.0;
};
// Full-batch gradient descent on the corpus from init; records RecordSteps(steps, records).
// The same checks as ValidateDescent.
std::vector<PretrainPoint> Pretrain(const RowTransform& transform, const Corpus& corpus,
                                    const Params& init, double step, int64_t steps, int records);

// Fresh-context evaluation of frozen parameters: `contexts` new contexts per (N, alpha) cell.
struct TransferOptions {
  std::vector<int64_t> lengths;      // N, each >= 1
  std::vector<double> alphas = {0.25, 0.5, 0.75};  // each in (0, 1)
  int64_t contexts = 400;
  Design design;
  LabelNoise noise;
  uint64_t seed = 1;
};
void ValidateTransfer(const TransferOptions& options);

struct TransferCell {
  int64_t N = 0;
  double alpha = 0.0;
  double mean_abs_error = 0.0, rms_error = 0.0;
  double empty_share = 0.0;  // thresholded: contexts with no survivor
};
// One cell per (N, alpha), N-major. TBB-parallel over contexts; the result does not depend on
// the thread count. Throws std::invalid_argument (ValidateTransfer) before any work.
std::vector<TransferCell> Transfer(const RowTransform& transform, const Params& params,
                                   const TransferOptions& options);

// The mean over alphas of each N's mean |F - alpha|, in options.lengths order.
std::vector<double> ErrorByLength(const std::vector<TransferCell>& cells, size_t lengths);

}  // namespace lpattn::onehead

#endif  // LPATTN_HARNESS_ONEHEAD_PRETRAIN_H_
