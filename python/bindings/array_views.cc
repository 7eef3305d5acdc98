// Numpy arrays as lpattn tensor views: docs/python.md §2.
#include "python/bindings/array_views.h"

#include <cstdint>
#include <string>
#include <vector>

namespace lpattn::python {
namespace {

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + "]";
}

std::vector<int64_t> ShapeOf(const py::array& array) {
  return std::vector<int64_t>(array.shape(), array.shape() + array.ndim());
}

template <typename T>
void CheckDtype(const py::array& array, const char* name, const char* dtype_name) {
  if (!array.dtype().is(py::dtype::of<T>())) {
    throw py::value_error(std::string(name) + " must be " + dtype_name + ", got " +
                          std::string(py::str(array.dtype())));
  }
}

void CheckWritable(const py::array& array, const char* name) {
  if (!array.writeable()) throw py::value_error(std::string(name) + " must be writable");
}

template <typename T>
const char* DtypeName();
template <>
const char* DtypeName<float>() {
  return "float32";
}
template <>
const char* DtypeName<int32_t>() {
  return "int32";
}

}  // namespace

Layout ParseLayout(const std::string& name) {
  if (name == "bhtd") return Layout::kBHTD;
  if (name == "bthd") return Layout::kBTHD;
  throw py::value_error("layout must be 'bhtd' ([B, H, T, D]) or 'bthd' ([B, T, H, D]), got '" +
                        name + "'");
}

Tensor4 View4(const py::array& array, Layout layout, const char* name, bool writable) {
  if (array.ndim() != 4) {
    throw py::value_error(std::string(name) + " must be 4-d (" +
                          (layout == Layout::kBHTD ? "[B, H, T, D]" : "[B, T, H, D]") +
                          "), got shape " + ShapeText(ShapeOf(array)));
  }
  CheckDtype<float>(array, name, "float32");
  if (writable) CheckWritable(array, name);
  int64_t strides[4];
  for (int axis = 0; axis < 4; ++axis) {
    const int64_t bytes = array.strides(axis);
    if (bytes % static_cast<int64_t>(sizeof(float)) != 0) {
      throw py::value_error(std::string(name) + " has a stride of " + std::to_string(bytes) +
                            " bytes on axis " + std::to_string(axis) +
                            ", not a whole number of float32 elements");
    }
    strides[axis] = bytes / static_cast<int64_t>(sizeof(float));
  }
  if (array.shape(3) > 1 && strides[3] != 1) {
    throw py::value_error(std::string(name) + "'s head dimension (the last axis) must be "
                          "contiguous, got an element stride of " + std::to_string(strides[3]) +
                          "; pass a tensor whose last axis has stride 1 (.contiguous())");
  }
  const bool bhtd = layout == Layout::kBHTD;
  Tensor4 view;
  // Numpy (and torch) allow a read-only view; kernels only write through views checked above.
  view.data = static_cast<float*>(const_cast<void*>(array.data()));
  view.batch = array.shape(0);
  view.heads = array.shape(bhtd ? 1 : 2);
  view.tokens = array.shape(bhtd ? 2 : 1);
  view.dim = array.shape(3);
  view.strides = {strides[0], strides[bhtd ? 1 : 2], strides[bhtd ? 2 : 1]};
  return view;
}

Tensor4 View4Like(const py::array& array, Layout layout, const char* name, bool writable,
                  int64_t batch, int64_t heads, int64_t tokens, int64_t dim) {
  const Tensor4 view = View4(array, layout, name, writable);
  if (view.batch != batch || view.heads != heads || view.tokens != tokens || view.dim != dim) {
    const bool bhtd = layout == Layout::kBHTD;
    const std::vector<int64_t> expected =
        bhtd ? std::vector<int64_t>{batch, heads, tokens, dim}
             : std::vector<int64_t>{batch, tokens, heads, dim};
    throw py::value_error(std::string(name) + " must have shape " + ShapeText(expected) +
                          ", got " + ShapeText(ShapeOf(array)));
  }
  return view;
}

template <typename T>
T* DenseData(const py::array& array, std::initializer_list<int64_t> shape, const char* name,
             bool writable) {
  CheckDtype<T>(array, name, DtypeName<T>());
  if (writable) CheckWritable(array, name);
  if (ShapeOf(array) != std::vector<int64_t>(shape)) {
    throw py::value_error(std::string(name) + " must have shape " + ShapeText(shape) + ", got " +
                          ShapeText(ShapeOf(array)));
  }
  if (!(array.flags() & py::array::c_style)) {
    throw py::value_error(std::string(name) + " must be C-contiguous");
  }
  return static_cast<T*>(const_cast<void*>(array.data()));
}

template float* DenseData<float>(const py::array&, std::initializer_list<int64_t>, const char*,
                                 bool);
template int32_t* DenseData<int32_t>(const py::array&, std::initializer_list<int64_t>,
                                     const char*, bool);

}  // namespace lpattn::python
