// The whole GPT's gradient against central finite differences of its loss, per arm, on a
// sample of parameters from every tensor (docs/harness.md §1; the layers have their own
// finite-difference tests in test_layers.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "harness/model/model.h"
#include "harness/train/data.h"
#include "kernels/kinterval.h"
#include "tbb/task_arena.h"

namespace lpattn::harness {
namespace {

// Random bytes from a small alphabet, B windows of T + 1.
std::vector<uint8_t> Window(size_t B, size_t T, uint64_t seed) {
  std::vector<uint8_t> w(B * (T + 1));
  for (size_t i = 0; i < w.size(); ++i) w[i] = uint8_t('a' + SplitMix64(seed, 9, i) % 12);
  return w;
}

// The small model of these tests: 2 layers, 2 heads, 16 channels, context 8.
ModelConfig SmallModel() {
  ModelConfig m;
  m.n_layer = 2;
  m.n_head = 2;
  m.n_embd = 16;
  m.context = 8;
  return m;
}

// Inputs and next-token targets of B windows of T tokens.
struct Batch {
  std::vector<uint8_t> inputs, targets;
};
Batch MakeBatch(size_t B, size_t T, uint64_t seed) {
  const std::vector<uint8_t> w = Window(B, T, seed);
  Batch batch{std::vector<uint8_t>(B * T), std::vector<uint8_t>(B * T)};
  for (size_t b = 0; b < B; ++b) {
    std::copy_n(w.begin() + long(b * (T + 1)), T, batch.inputs.begin() + long(b * T));
    std::copy_n(w.begin() + long(b * (T + 1) + 1), T, batch.targets.begin() + long(b * T));
  }
  return batch;
}

class ModelGradientTest : public ::testing::TestWithParam<std::string> {};

// Float forward passes make the finite differences noisy: with h = 2e-3 the truncation error
// (O(h^2); at h = 1e-2 it reaches 14% on position embeddings feeding a LayerNorm) and the
// rounding error (about eps * |L| / h = 2e-4) both stay well under the bound
// 2% |g| + 5e-4. A parameter is checked when its gradient is at least 1% of the tensor's
// largest and at least 0.01, where that bound is meaningful: a gradient off by 10% fails it.
void ExpectGradientMatchesFiniteDifferences(const ModelConfig& shape, const std::string& arm,
                                            const std::string& interference = "none") {
  const size_t B = 2, T = size_t(shape.context);
  Gpt model(shape, arm, B);
  model.SetInterference(ParseInterference(interference));
  model.InitParams(5);
  // Larger than the 0.02 init so every path carries signal (and the sink logits are nonzero).
  for (float& p : model.params()) p *= 5.0f;
  const Batch batch = MakeBatch(B, T, 1);
  const std::vector<uint8_t>& in = batch.inputs;
  const std::vector<uint8_t>& tg = batch.targets;
  tbb::task_arena arena(1);
  arena.execute([&] {
    model.Forward(in.data(), tg.data(), B);
    model.Backward();
    const std::vector<float> grads = model.grads();
    size_t checked = 0;
    for (const ParamTensor& t : model.tensors()) {
      float largest = 0.0f;
      for (size_t i = t.offset; i < t.offset + t.size; ++i) largest = std::max(largest, std::abs(grads[i]));
      if (largest == 0.0f) continue;
      // Up to 6 elements per tensor: the largest gradient and evenly spaced others.
      std::vector<size_t> sample = {size_t(std::max_element(grads.begin() + long(t.offset),
                                                          grads.begin() + long(t.offset + t.size),
                                                          [](float a, float b) { return std::abs(a) < std::abs(b); }) -
                                           grads.begin())};
      for (size_t k = 1; k < 6; ++k) sample.push_back(t.offset + k * t.size / 6);
      for (size_t i : sample) {
        if (std::abs(grads[i]) < std::max(0.01f * largest, 0.01f)) continue;
        const float saved = model.params()[i];
        const float h = 2e-3f;
        model.params()[i] = saved + h;
        const double up = model.Forward(in.data(), tg.data(), B);
        model.params()[i] = saved - h;
        const double down = model.Forward(in.data(), tg.data(), B);
        model.params()[i] = saved;
        const double fd = (up - down) / (2.0 * h);
        const double bound = 0.02 * std::abs(grads[i]) + 5e-4;
        EXPECT_NEAR(fd, grads[i], bound) << t.name << " element " << i - t.offset;
        EXPECT_GT(std::abs(fd - 1.1 * grads[i]), bound)
            << "the bound would not catch a 10% error at " << t.name;
        ++checked;
      }
    }
    EXPECT_GT(checked, model.tensors().size());
  });
}

TEST_P(ModelGradientTest, MatchesFiniteDifferences) {
  ExpectGradientMatchesFiniteDifferences(SmallModel(), GetParam());
}

// Rotary positions (docs/harness.md §1.1): no wpe, q and k turned after the qkv product; the
// backward's transposed rotation is checked through every parameter that feeds q and k.
class RopeGradientTest : public ::testing::TestWithParam<std::string> {};
TEST_P(RopeGradientTest, MatchesFiniteDifferences) {
  ModelConfig shape = SmallModel();
  shape.pos = "rope";
  ExpectGradientMatchesFiniteDifferences(shape, GetParam());
}
INSTANTIATE_TEST_SUITE_P(Arms, RopeGradientTest,
                         ::testing::Values("exact", "sink", "outgate+normgate"));

// Interference in training (docs/harness.md §1.5): the noise's path through rms(v) and the
// swap's routing of a replaced row's gradient to its source row.
class InterferenceGradientTest
    : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};
TEST_P(InterferenceGradientTest, MatchesFiniteDifferences) {
  ExpectGradientMatchesFiniteDifferences(SmallModel(), GetParam().first, GetParam().second);
}
INSTANTIATE_TEST_SUITE_P(
    Arms, InterferenceGradientTest,
    ::testing::Values(std::pair{"exact", "noise:rho=0.5,sigma=1"},
                      std::pair{"normgate", "noise:rho=0.3,sigma=2,layer=1"},
                      std::pair{"sink", "swap:rho=0.5"},
                      std::pair{"outgate+projgate", "swap:rho=0.4,layer=0,seed=3"}));

TEST(RopeModel, HasNoPositionEmbeddingAndServesAnyContext) {
  ModelConfig shape = SmallModel();
  shape.pos = "rope";
  Gpt rope(shape, "exact", 1);
  Gpt learned(SmallModel(), "exact", 1);
  EXPECT_EQ(learned.params().size() - rope.params().size(), size_t(8 * 16));  // wpe [T, C]
  for (const ParamTensor& t : rope.tensors()) EXPECT_NE(t.name, "wpe");
  // The same weights in a model of 4 times the context: the first 8 positions' logits agree
  // (causal attention: a prefix does not see what follows it).
  ModelConfig longer = shape;
  longer.context = 32;
  Gpt wide(longer, "exact", 1);
  ASSERT_EQ(wide.params().size(), rope.params().size());
  rope.InitParams(3);
  wide.params() = rope.params();
  const std::vector<uint8_t> tokens = Window(1, 32, 4);
  rope.Forward(tokens.data(), nullptr, 1);
  wide.Forward(tokens.data(), nullptr, 1);
  for (size_t i = 0; i < 8 * 256; ++i) {
    ASSERT_NEAR(rope.logits()[i], wide.logits()[i], 1e-5f) << i;
  }
}

// (K-interval arms are not here: a parameter step moves many scores at once, so the finite
// differences cross the grid's nodes, where lerp's slope jumps. Its kernels are checked
// against the reference, whose gradient is checked by finite differences; the arm's wiring
// is checked below.)
// (tda arms are not here either: see ThresholdArmMatchesFiniteDifferences below.)
INSTANTIATE_TEST_SUITE_P(Arms, ModelGradientTest,
                         ::testing::Values("exact", "sink", "offbyone", "outgate", "normgate",
                                           "projgate", "sink+normgate", "sink+projgate",
                                           "outgate+sink", "outgate+normgate",
                                           "outgate+projgate", "outgate+sink+normgate",
                                           "exact:softcap=2", "sink:softcap=2", "exact:alibi=1",
                                           "sink:softcap=3,alibi=1", "exact:window=3",
                                           "sink:window=2,alibi=1"));

// Normal inputs of one tda arm layer: parameters (0.3 sigma; lambda 0.6, inside [0, 1], when
// the arm has two views), qkv, the residual x and the loss weights w.
struct ThresholdArmInputs {
  std::vector<float> params, qkv, x, w;
  ThresholdArmInputs(const AttentionArm& arm, const ArmShape& s, unsigned seed, bool two_views)
      : qkv(s.B * s.T * 3 * s.C), x(s.B * s.T * s.C), w(s.B * s.T * s.C) {
    size_t n_params = 0;
    for (const ArmParam& p : arm.LayerParams(SmallModel())) n_params += p.size;
    params.resize(n_params);
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& p : params) p = 0.3f * normal(rng);
    if (two_views) params.back() = 0.6f;
    for (std::vector<float>* v : {&qkv, &x, &w}) {
      for (float& e : *v) e = normal(rng);
    }
  }
};

// The tda arm on its own, loss = sum(w * out), against central differences of every 7th input
// and parameter (lambda inside [0, 1]). The whole-model test above does not suit it: a row
// whose kernel output is near zero (no or barely surviving weights, or a1 ~ lambda a2) is
// scaled up to unit RMS by the RMSNorm after the kernel, so a step that lets one weight
// survive moves the output by O(1) there. Such rows are rare here, and at most 2% of the
// checked entries may miss; a wiring error misses nearly all of them.
TEST(Model, ThresholdArmMatchesFiniteDifferences) {
  for (const char* spec : {"tda", "tda:views=1,p=3"}) {
    const ArmShape s{2, 8, 16, 2};
    const std::unique_ptr<AttentionArm> arm = MakeArm(spec);
    ThresholdArmInputs in(*arm, s, 3, std::string(spec) == "tda");
    std::vector<float>&params = in.params, &qkv = in.qkv, &x = in.x, &w = in.w;
    const size_t n_params = params.size();
    std::vector<float> act(arm->ActivationFloats(s)), out(w.size());
    auto loss = [&] {
      arm->Forward(s, params.data(), qkv.data(), x.data(), act.data(), out.data());
      double sum = 0.0;
      for (size_t i = 0; i < w.size(); ++i) sum += double(w[i]) * out[i];
      return sum;
    };
    loss();
    std::vector<float> dparams(n_params, 0.0f), dqkv(qkv.size()), dx(x.size(), 0.0f);
    arm->Backward(s, params.data(), dparams.data(), qkv.data(), x.data(), act.data(),
                  out.data(), w.data(), dqkv.data(), dx.data());
    size_t checked = 0, missed = 0;
    auto check = [&](std::vector<float>& v, const std::vector<float>& grad) {
      for (size_t i = 0; i < v.size(); i += 7) {
        const float saved = v[i];
        v[i] = saved + 1e-3f;
        const double up = loss();
        v[i] = saved - 1e-3f;
        const double down = loss();
        v[i] = saved;
        const double fd = (up - down) / 2e-3;
        ++checked;
        missed += std::abs(fd - grad[i]) > 0.02 * std::abs(fd) + 2e-3 ? 1 : 0;
      }
    };
    check(qkv, dqkv);
    check(x, dx);
    check(params, dparams);
    EXPECT_LE(missed, checked / 50) << spec << ": " << missed << " of " << checked;
    EXPECT_GT(checked, 100u);
  }
}

// The tda arm trains with a low-precision backward too (docs/math.md §4.2): the same forward,
// and gradients that move off the fp32 backward's by about bf16's resolution, no more.
TEST(Model, ThresholdArmTakesALowPrecisionBackward) {
  const ArmShape s{2, 16, 16, 2};
  const std::unique_ptr<AttentionArm> fp32 = MakeArm("tda"), bf16 = MakeArm("tda+bwd=bf16");
  EXPECT_EQ(bf16->Name(), "tda+bwd=bf16");
  const ThresholdArmInputs in(*fp32, s, 5, true);
  const std::vector<float>&params = in.params, &qkv = in.qkv, &x = in.x, &w = in.w;
  const size_t n_params = params.size();
  struct Pass {
    std::vector<float> out, dqkv, dparams;
  };
  const auto run = [&](const AttentionArm& arm) {
    std::vector<float> act(arm.ActivationFloats(s)), dx(x.size(), 0.0f);
    Pass r{std::vector<float>(w.size()), std::vector<float>(qkv.size()),
           std::vector<float>(n_params, 0.0f)};
    arm.Forward(s, params.data(), qkv.data(), x.data(), act.data(), r.out.data());
    arm.Backward(s, params.data(), r.dparams.data(), qkv.data(), x.data(), act.data(),
                 r.out.data(), w.data(), r.dqkv.data(), dx.data());
    return r;
  };
  const Pass a = run(*fp32), b = run(*bf16);
  EXPECT_EQ(a.out, b.out);
  const auto relative = [](const std::vector<float>& got, const std::vector<float>& want) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < want.size(); ++i) {
      num += double(got[i] - want[i]) * (got[i] - want[i]);
      den += double(want[i]) * want[i];
    }
    return std::sqrt(num / den);
  };
  for (const auto& [got, want] : {std::pair(&b.dqkv, &a.dqkv), std::pair(&b.dparams, &a.dparams)}) {
    const double e = relative(*got, *want);
    EXPECT_GT(e, 1e-4);
    EXPECT_LT(e, 3e-2);
  }
}

// Diagnostics on attention whose weights are known: zero queries and keys make every score 0,
// so the off-by-one softmax gives each of row i's i + 1 keys and the sink 1 / (i + 2), and the
// thresholded weights (cosines 0, tau >= 0) are all exact zeros.
TEST(Model, DiagnosticsOfKnownWeights) {
  const ArmShape s{2, 4, 8, 2};
  const std::vector<float> qkv(s.B * s.T * 3 * s.C, 0.0f), x(s.B * s.T * s.C, 0.0f);
  double first = 0.0;
  for (size_t i = 0; i < s.T; ++i) first += 1.0 / double(i + 2);
  {
    const std::unique_ptr<AttentionArm> arm = MakeArm("offbyone");
    EXPECT_TRUE(arm->HasSink());
    std::vector<HeadDiagnostics> heads(s.n_head);
    arm->Diagnose(s, nullptr, qkv.data(), x.data(), nullptr, heads.data());
    for (const HeadDiagnostics& d : heads) {
      EXPECT_EQ(d.rows, double(s.B * s.T));
      EXPECT_EQ(d.visible, double(s.B * s.T * (s.T + 1) / 2));
      EXPECT_EQ(d.zeros, 0.0);
      EXPECT_NEAR(d.first_mass, double(s.B) * first, 1e-12);
      EXPECT_NEAR(d.abstention, double(s.B) * first, 1e-12);
    }
  }
  {
    const std::unique_ptr<AttentionArm> arm = MakeArm("tda");
    EXPECT_FALSE(arm->HasSink());
    ModelConfig m = SmallModel();
    m.n_embd = int(s.C);
    size_t n_params = 0;
    for (const ArmParam& p : arm->LayerParams(m)) n_params += p.size;
    std::vector<float> params(n_params, 0.0f);  // view 2's projection and bias 0: q2 = k2 = 0
    params.back() = 0.5f;                        // lambda
    std::vector<float> act(arm->ActivationFloats(s)), out(x.size());
    arm->Forward(s, params.data(), qkv.data(), x.data(), act.data(), out.data());
    std::vector<HeadDiagnostics> heads(s.n_head);
    arm->Diagnose(s, params.data(), qkv.data(), x.data(), act.data(), heads.data());
    for (const HeadDiagnostics& d : heads) {
      EXPECT_EQ(d.zeros, d.visible);
      EXPECT_EQ(d.first_mass, 0.0);
    }
  }
}

// The kint arm is exactly the K-interval kernels on the [B, T, H, D] views of qkv: the same
// bits as calling them directly, forward and backward, with its saved statistics (indices
// included) carried through the activation arena.
TEST(Model, KIntervalArmIsTheKernel) {
  const ArmShape s{2, 8, 16, 2};
  const std::string spec = "kint:K=4,cal=window,W=3,ste=weight";
  const std::unique_ptr<AttentionArm> arm = MakeArm(spec);
  EXPECT_EQ(arm->Name(), spec);
  EXPECT_TRUE(arm->LayerParams(ModelConfig{}).empty());
  std::vector<float> qkv(s.B * s.T * 3 * s.C), dout(s.B * s.T * s.C);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float(SplitMix64(3, 0, i) % 2001) / 500.0f - 2.0f;
  for (size_t i = 0; i < dout.size(); ++i) dout[i] = float(SplitMix64(3, 1, i) % 2001) / 1000.0f - 1.0f;
  std::vector<float> act(arm->ActivationFloats(s)), out(dout.size()), dqkv(qkv.size());
  arm->Forward(s, nullptr, qkv.data(), nullptr, act.data(), out.data());
  arm->Backward(s, nullptr, nullptr, qkv.data(), nullptr, act.data(), out.data(), dout.data(),
                dqkv.data(), nullptr);

  const size_t rows = s.B * s.n_head * s.T;
  const Strides in{int64_t(s.T * 3 * s.C), int64_t(s.head_dim()), int64_t(3 * s.C)};
  const Strides o{int64_t(s.T * s.C), int64_t(s.head_dim()), int64_t(s.C)};
  const AttentionShape shape{2, 2, 2, 8, 8, 8};
  AttentionOptions options;
  options.causal = true;
  const KIntervalOptions kint = ParseKInterval("K=4,cal=window,W=3,ste=weight");
  std::vector<float> stats(4 * rows), out2(out.size()), dqkv2(dqkv.size());
  std::vector<int32_t> argmax(rows), argmin(rows);
  const KIntervalSaved saved{stats.data(), stats.data() + rows, stats.data() + 2 * rows,
                             stats.data() + 3 * rows, argmax.data(), argmin.data()};
  KIntervalForward(shape, options, kint,
                   {{qkv.data(), in}, {qkv.data() + s.C, in}, {qkv.data() + 2 * s.C, in},
                    {out2.data(), o}, saved});
  KIntervalBackward(shape, options, kint,
                    {{qkv.data(), in}, {qkv.data() + s.C, in}, {qkv.data() + 2 * s.C, in},
                     {out2.data(), o}, {dout.data(), o}, saved, {dqkv2.data(), in},
                     {dqkv2.data() + s.C, in}, {dqkv2.data() + 2 * s.C, in}});
  EXPECT_EQ(out, out2);
  EXPECT_EQ(dqkv, dqkv2);
  EXPECT_TRUE(std::any_of(dqkv.begin(), dqkv.end(), [](float x) { return x != 0.0f; }));
}

TEST(Model, UnknownArmIsRejected) {
  EXPECT_THROW(Gpt(ModelConfig{}, "softmax2", 1), std::invalid_argument);
  for (const char* bad : {"exact:softcap=0", "exact:softcap=-3", "exact:softcap=inf",
                          "exact:softcap=", "exact:softcap=3x", "exact:window=0",
                          "exact:window=-4", "exact:window=2.5", "exact:alibi=2", "exact:",
                          "exact:alibi=1,softcap=-1", "exact:gate=1"}) {
    EXPECT_THROW(MakeArm(bad), std::invalid_argument) << bad;
  }
  try {
    Gpt(ModelConfig{}, "kint:K=4,round=nearest,ste=exact", 1);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("nearest"), std::string::npos) << e.what();
  }
}

// A softcap arm (docs/math.md §1.3) is exact attention with capped scores: the loss moves
// once the scores are large, and a cap far above them changes nothing measurable.
// Arm spec numbers are read whole: an embedded NUL, a window past int64 or a softcap past
// float's range is rejected, not cut short or saturated.
TEST(Model, ArmSpecNumbersAreReadWhole) {
  for (const std::string& bad :
       {std::string("exact:softcap=30\0x", 18), std::string("exact:window=8\09", 16),
        std::string("exact:window=99999999999999999999"), std::string("exact:softcap=1e39")}) {
    EXPECT_THROW(MakeArm(bad), std::invalid_argument) << bad;
  }
  EXPECT_NO_THROW(MakeArm("exact:softcap=30,window=8"));
}

// ParamCount is the size of the arena a model allocates, for every arm and position kind, and
// says so without allocating for sizes that overflow.
TEST(Model, ParamCountIsTheArenaSize) {
  for (const char* arm : {"exact", "sink", "normgate", "projgate", "tda", "outgate"}) {
    for (const char* pos : {"learned", "rope"}) {
      ModelConfig model{.n_layer = 2, .n_head = 2, .n_embd = 16, .context = 8, .vocab = 256};
      model.pos = pos;
      EXPECT_EQ(Gpt::ParamCount(model, arm), Gpt(model, arm, 1).params().size())
          << arm << " " << pos;
    }
  }
  ModelConfig huge{.n_layer = 1 << 30, .n_head = 1, .n_embd = 1 << 30, .context = 1, .vocab = 256};
  EXPECT_THROW(Gpt::ParamCount(huge, "exact"), std::invalid_argument);
}

TEST(Model, SoftcapArmCapsTheScores) {
  EXPECT_EQ(MakeArm("exact:softcap=30")->Name(), "exact:softcap=30");
  EXPECT_EQ(MakeArm("sink:softcap=30+qk=bf16")->Name(), "sink:softcap=30+qk=bf16");
  Gpt model(SmallModel(), "exact", 2);
  model.InitParams(7);
  for (float& p : model.params()) p *= 5.0f;
  const Batch batch = MakeBatch(2, 8, 2);
  const float exact = model.Forward(batch.inputs.data(), batch.targets.data(), 2);
  model.SetArm("exact:softcap=1");
  const float capped = model.Forward(batch.inputs.data(), batch.targets.data(), 2);
  model.SetArm("exact:softcap=1e6");
  const float loose = model.Forward(batch.inputs.data(), batch.targets.data(), 2);
  EXPECT_NE(capped, exact);
  EXPECT_NEAR(loose, exact, 1e-4 * std::abs(exact));
  model.SetArm("exact:alibi=1");
  EXPECT_NE(model.Forward(batch.inputs.data(), batch.targets.data(), 2), exact);
  model.SetArm("exact:window=2");
  EXPECT_NE(model.Forward(batch.inputs.data(), batch.targets.data(), 2), exact);
  model.SetArm("exact:window=1000");  // longer than the context: exact attention
  EXPECT_EQ(model.Forward(batch.inputs.data(), batch.targets.data(), 2), exact);
}

// The evaluation swap both ways between exact softmax and K-interval (neither has per-layer
// parameters): the loss changes, and large K brings it close to exact's.
TEST(Model, KIntervalEvaluationSwap) {
  Gpt model(SmallModel(), "exact", 2);
  model.InitParams(7);
  for (float& p : model.params()) p *= 5.0f;
  const Batch batch = MakeBatch(2, 8, 2);
  const std::vector<uint8_t>& in = batch.inputs;
  const std::vector<uint8_t>& tg = batch.targets;
  const float exact = model.Forward(in.data(), tg.data(), 2);
  model.SetArm("kint:K=2");
  const float coarse = model.Forward(in.data(), tg.data(), 2);
  model.SetArm("kint:K=64");
  const float fine = model.Forward(in.data(), tg.data(), 2);
  model.SetArm("exact");
  EXPECT_EQ(model.Forward(in.data(), tg.data(), 2), exact);
  EXPECT_NE(coarse, exact);
  EXPECT_LT(std::abs(fine - exact), std::abs(coarse - exact));
}

// "+<precision>" gives any arm low-precision operands (docs/harness.md §1), composite arms
// included (their inner softmax is what quantizes): the loss moves a little, not a lot, and
// the arm's name is the canonical spec.
TEST(Model, LowPrecisionArms) {
  EXPECT_EQ(MakeArm("exact+qk=int8,pv=fp8e4m3")->Name(), "exact+qk=int8:pv=fp8e4m3");
  EXPECT_EQ(MakeArm("sink+normgate+qk=bf16")->Name(), "sink+normgate+qk=bf16");
  EXPECT_EQ(MakeArm("kint:K=4,cal=window+qk=int8")->precision().qk, quant::Format::kInt8);
  EXPECT_EQ(MakeArm("tda:views=1+pv=int8,gran=token")->Name(), "tda:views=1+pv=int8:gran=token");
  EXPECT_EQ(MakeArm("exact+qk=fp32")->Name(), "exact");
  EXPECT_EQ(MakeArm("sink+p=int8")->Name(), "sink+p=int8");
  EXPECT_EQ(MakeArm("kint:K=4+p=int8")->precision().p, quant::Format::kInt8);
  EXPECT_EQ(MakeArm("tda+p=fp8e4m3")->Name(), "tda+p=fp8e4m3");
  try {
    MakeArm("exact+qk=int4");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exact+qk=int4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int4"), std::string::npos) << e.what();
  }
  const Batch batch = MakeBatch(2, 8, 3);
  for (const char* arm : {"exact", "sink+normgate", "outgate", "kint:K=16", "tda:views=1,beta=0"}) {
    Gpt model(SmallModel(), arm, 2);
    model.InitParams(4);
    for (float& p : model.params()) p *= 5.0f;
    const float fp32 = model.Forward(batch.inputs.data(), batch.targets.data(), 2);
    model.SetArm(std::string(arm) + "+qk=int8,pv=int8,gran=token");
    const float int8 = model.Forward(batch.inputs.data(), batch.targets.data(), 2);
    EXPECT_NE(int8, fp32) << arm;
    EXPECT_LT(std::abs(int8 - fp32), 0.05f * fp32) << arm;
    model.Backward();
    for (float g : model.grads()) ASSERT_TRUE(std::isfinite(g)) << arm;
  }
}

// The dense products' format (docs/harness.md §1.1): the run's (SetDenseFormat) unless the arm
// names its own with dense=, which wins in either direction; it reaches outgate's own product.
TEST(Model, ArmDenseItemOverridesTheRunsDenseFormat) {
  const ModelConfig m = SmallModel();
  const Batch batch = MakeBatch(2, size_t(m.context), 5);
  const auto loss = [&](const std::string& arm, DenseFormat run) {
    Gpt model(m, arm, 2);
    model.InitParams(7);
    model.SetDenseFormat(run);
    return model.Forward(batch.inputs.data(), batch.targets.data(), 2);
  };
  for (const char* arm : {"exact", "outgate"}) {
    SCOPED_TRACE(arm);
    const std::string base(arm);
    const float fp32 = loss(base, DenseFormat::kFp32), bf16 = loss(base, DenseFormat::kBf16);
    EXPECT_NE(fp32, bf16);
    EXPECT_NEAR(fp32, bf16, 0.02);
    EXPECT_EQ(loss(base + "+dense=bf16", DenseFormat::kFp32), bf16);
    EXPECT_EQ(loss(base + "+dense=fp32", DenseFormat::kBf16), fp32);
  }
  EXPECT_EQ(MakeArm("exact+qk=bf16,pv=bf16,dense=bf16")->Name(),
            "exact+qk=bf16:pv=bf16:dense=bf16");
  EXPECT_EQ(MakeArm("exact+dense=bf16")->precision().qk, MakeArm("exact")->precision().qk);
  try {
    MakeArm("exact+qk=int8:dense=fp16");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("precision 'fp16': the dense products take fp32 or bf16"),
              std::string::npos)
        << e.what();
  }
}

// Issue 20: precision items may be joined by '+' as benchmark names write them; the arm's
// canonical name joins them with ':'. '+' between arm names stays the kernel's.
TEST(Model, PrecisionItemsJoinedByPlusAreAccepted) {
  EXPECT_EQ(MakeArm("exact+qk=int8+pv=bf16")->Name(), "exact+qk=int8:pv=bf16");
  EXPECT_EQ(MakeArm("sink+normgate+qk=int8+pv=bf16")->Name(), "sink+normgate+qk=int8:pv=bf16");
  EXPECT_EQ(MakeArm("sink+normgate")->Name(), "sink+normgate");
  EXPECT_EQ(MakeArm("exact+qk=int8+pv=bf16+dense=bf16")->Name(),
            "exact+qk=int8:pv=bf16:dense=bf16");
  EXPECT_EQ(MakeArm("kint:K=4,cal=window+qk=int8")->precision().qk, quant::Format::kInt8);
  EXPECT_THROW(MakeArm("exact+qk=int8+nonsense"), std::invalid_argument);
}

TEST(Model, InitIsDeterministic) {
  Gpt a(ModelConfig{}, "exact", 1), b(ModelConfig{}, "exact", 1);
  a.InitParams(3);
  b.InitParams(3);
  EXPECT_EQ(a.params(), b.params());
  b.InitParams(4);
  EXPECT_NE(a.params(), b.params());
}

// The fused passes (docs/harness.md §1.6) cut the batch into several row blocks here (24
// windows of 16: 384 rows, blocks of 64) and gather several layers' weight gradients into one
// set of tasks: a step's loss, gradients and logits must not depend on the thread count, for
// fp32 and bf16 products, rotary positions, and an arm that adds to ln1's gradient (outgate).
TEST(Model, StepIsBitIdenticalForOneAndTwoThreads) {
  struct Case {
    const char* arm;
    DenseFormat dense;
    const char* pos;
  };
  for (const Case& c : {Case{"exact", DenseFormat::kFp32, "learned"},
                        Case{"outgate+normgate", DenseFormat::kFp32, "rope"},
                        Case{"exact", DenseFormat::kBf16, "learned"}}) {
    ModelConfig shape = SmallModel();
    shape.n_layer = 3;
    shape.context = 16;
    shape.pos = c.pos;
    const size_t B = 24;
    const Batch batch = MakeBatch(B, size_t(shape.context), 5);
    struct Step {
      float loss = 0.0f;
      std::vector<float> grads, logits;
    };
    auto run = [&](int threads) {
      Step step;
      tbb::task_arena(threads).execute([&] {
        Gpt model(shape, c.arm, B);
        model.SetDenseFormat(c.dense);
        model.InitParams(8);
        for (float& p : model.params()) p *= 5.0f;
        step.loss = model.Forward(batch.inputs.data(), batch.targets.data(), B);
        model.Backward();
        step.grads = model.grads();
        const float* logits = model.logits();
        step.logits.assign(logits, logits + B * size_t(shape.context) * 256);
      });
      return step;
    };
    const Step one = run(1), two = run(2);
    const std::string name = std::string(c.arm) + " " + DenseFormatName(c.dense) + " " + c.pos;
    EXPECT_TRUE(std::isfinite(one.loss)) << name;
    EXPECT_EQ(std::memcmp(&one.loss, &two.loss, sizeof(float)), 0) << name;
    EXPECT_EQ(one.grads, two.grads) << name;
    EXPECT_EQ(one.logits, two.logits) << name;
    EXPECT_NE(*std::max_element(one.grads.begin(), one.grads.end()), 0.0f) << name;
  }
}

}  // namespace
}  // namespace lpattn::harness
