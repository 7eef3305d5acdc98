// Column sums over a batch's rows with Highway (docs/harness.md §1.6).
#include "harness/model/column_sums.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "harness/model/column_sums.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep

#include "harness/model/span_tail-inl.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace lpattn::harness {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void AddColumnSums(double* HWY_RESTRICT sums, const float* HWY_RESTRICT rows, size_t N,
                   size_t stride, size_t width) {
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> df;  // as many floats as a double vector has lanes
  const size_t lanes = hn::Lanes(dd);
  const auto row = [&](size_t r, size_t column) HWY_ATTR {
    return hn::PromoteTo(dd, hn::LoadU(df, rows + r * stride + column));
  };
  size_t o = 0;
  // Four columns' vectors at once: four independent chains of adds, not one.
  for (; o + 4 * lanes <= width; o += 4 * lanes) {
    auto a0 = hn::LoadU(dd, sums + o), a1 = hn::LoadU(dd, sums + o + lanes);
    auto a2 = hn::LoadU(dd, sums + o + 2 * lanes), a3 = hn::LoadU(dd, sums + o + 3 * lanes);
    for (size_t r = 0; r < N; ++r) {
      a0 = hn::Add(a0, row(r, o));
      a1 = hn::Add(a1, row(r, o + lanes));
      a2 = hn::Add(a2, row(r, o + 2 * lanes));
      a3 = hn::Add(a3, row(r, o + 3 * lanes));
    }
    hn::StoreU(a0, dd, sums + o);
    hn::StoreU(a1, dd, sums + o + lanes);
    hn::StoreU(a2, dd, sums + o + 2 * lanes);
    hn::StoreU(a3, dd, sums + o + 3 * lanes);
  }
  for (; o + lanes <= width; o += lanes) {
    auto acc = hn::LoadU(dd, sums + o);
    for (size_t r = 0; r < N; ++r) {
      acc = hn::Add(acc, row(r, o));
    }
    hn::StoreU(acc, dd, sums + o);
  }
  for (; o < width; ++o) {
    double acc = sums[o];
    for (size_t r = 0; r < N; ++r) acc += rows[r * stride + o];
    sums[o] = acc;
  }
}

void AddLayerNormParamGrads(float* HWY_RESTRICT dweight, float* HWY_RESTRICT dbias,
                            const float* HWY_RESTRICT dout, const float* HWY_RESTRICT inp,
                            const float* HWY_RESTRICT mean, const float* HWY_RESTRICT rstd,
                            size_t N, size_t C, size_t c0, size_t c1) {
  const hn::ScalableTag<float> d;
  ForVectors(d, c1 - c0, [&](size_t i, size_t n) HWY_ATTR {
    const size_t c = c0 + i;
    auto db = LoadSome(d, dbias + c, n), dw = LoadSome(d, dweight + c, n);
    for (size_t r = 0; r < N; ++r) {
      const auto dy = LoadSome(d, dout + r * C + c, n);
      const auto norm = hn::Mul(hn::Sub(LoadSome(d, inp + r * C + c, n), hn::Set(d, mean[r])),
                                hn::Set(d, rstd[r]));
      db = hn::Add(db, dy);
      dw = hn::MulAdd(norm, dy, dw);
    }
    StoreSome(db, d, dbias + c, n);
    StoreSome(dw, d, dweight + c, n);
  });
}

// NOLINTNEXTLINE(google-readability-namespace-comments)
}  // namespace HWY_NAMESPACE
}  // namespace lpattn::harness
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lpattn::harness {

HWY_EXPORT(AddColumnSums);
HWY_EXPORT(AddLayerNormParamGrads);

void AddColumnSumsSimd(double* sums, const float* rows, size_t N, size_t stride, size_t width) {
  HWY_DYNAMIC_DISPATCH(AddColumnSums)(sums, rows, N, stride, width);
}

void AddLayerNormParamGradsSimd(float* dweight, float* dbias, const float* dout, const float* inp,
                                const float* mean, const float* rstd, size_t N, size_t C,
                                size_t c0, size_t c1) {
  HWY_DYNAMIC_DISPATCH(AddLayerNormParamGrads)(dweight, dbias, dout, inp, mean, rstd, N, C, c0,
                                               c1);
}

}  // namespace lpattn::harness
#endif  // HWY_ONCE
