// Numpy arrays as lpattn tensor views (docs/python.md §2). Every check happens here, before a
// kernel runs, and fails with a ValueError that names the argument: the views carry the
// array's own shape, so a kernel can never read or write past the buffer it was given.
#ifndef LPATTN_PYTHON_BINDINGS_ARRAY_VIEWS_H_
#define LPATTN_PYTHON_BINDINGS_ARRAY_VIEWS_H_

#include <cstdint>
#include <optional>
#include <string>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include "kernels/attention.h"

namespace lpattn::python {

namespace py = pybind11;

// Which axes of a 4-d array are heads and tokens: [B, H, T, D] or [B, T, H, D].
enum class Layout { kBHTD, kBTHD };
Layout ParseLayout(const std::string& name);

// A 4-d float32 array read as (batch, heads, tokens, head_dim) under a layout.
struct Tensor4 {
  float* data = nullptr;
  int64_t batch = 0, heads = 0, tokens = 0, dim = 0;
  Strides strides;
  ConstTensor In() const { return {data, strides}; }
  Tensor Out() const { return {data, strides}; }
};

// Checks that `array` is a 4-d float32 array with a contiguous last axis and element-aligned
// strides (and writeable when `writable`), then returns its view.
Tensor4 View4(const py::array& array, Layout layout, const char* name, bool writable);

// The same view, also required to have exactly the given sizes.
Tensor4 View4Like(const py::array& array, Layout layout, const char* name, bool writable,
                  int64_t batch, int64_t heads, int64_t tokens, int64_t dim);

// A C-contiguous array of `dtype` with exactly `shape` (per-row statistics and parameters).
template <typename T>
T* DenseData(const py::array& array, std::initializer_list<int64_t> shape, const char* name,
             bool writable);

// The same for an optional argument (None gives null).
template <typename T>
T* OptionalDenseData(const std::optional<py::array>& array, std::initializer_list<int64_t> shape,
                     const char* name, bool writable) {
  return array ? DenseData<T>(*array, shape, name, writable) : nullptr;
}

}  // namespace lpattn::python

#endif  // LPATTN_PYTHON_BINDINGS_ARRAY_VIEWS_H_
