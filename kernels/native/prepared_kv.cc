// PreparedKv (prepared_kv.h): K and V encoded once.
#include "kernels/prepared_kv.h"

#include <stdexcept>

#include "kernels/entry/validate.h"
#include "kernels/native/prepared_kv_impl.h"

namespace lpattn {

PreparedKv::PreparedKv(const AttentionShape& shape, const Precision& precision, ConstTensor k,
                       ConstTensor v, int threads) {
  AttentionOptions options;
  options.precision = precision;
  options.threads = threads;
  ValidateShapeAndOptions(shape, options);
  ValidateKeyShaped(k, shape, "k");
  ValidateKeyShaped(v, shape, "v");
  auto impl = std::make_shared<Impl>(shape, precision);
  RunWithThreads(threads, [&] {
    impl->views = impl->storage.PrepareKv(k, v, impl->coded);
    // fp32 operands are left in place by PrepareKv: copy them, so the caller's may go.
    const bool k_read = impl->coded.int_qk.k_rows == nullptr &&
                        impl->coded.k_codes.data == nullptr && impl->coded.k_codes.codes8 == nullptr;
    if (k_read && impl->views.k.data == k.data) impl->views.k = impl->storage.OwnKeyShaped(k);
    const bool v_read = impl->coded.v_codes.data == nullptr && impl->coded.v_codes.codes8 == nullptr &&
                        !impl->coded.int_pv.set() &&
                        impl->coded.amx_pv.vt == nullptr;
    if (v_read && impl->views.v.data == v.data) {
      impl->views.v = impl->storage.OwnKeyShaped(v);
    }
  });
  impl_ = std::move(impl);
}

const AttentionShape& PreparedKv::shape() const { return impl_->shape; }
const Precision& PreparedKv::precision() const { return impl_->precision; }
size_t PreparedKv::StorageBytes() const { return impl_->storage.BytesHeld(); }

}  // namespace lpattn
