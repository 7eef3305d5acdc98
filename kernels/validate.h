// Argument checks shared by every kernel entry point: they run before any work and throw
// std::invalid_argument with a message that names the offending argument.
#ifndef LPATTN_KERNELS_VALIDATE_H_
#define LPATTN_KERNELS_VALIDATE_H_

#include "kernels/attention.h"

namespace lpattn {

void ValidateForward(const AttentionShape& shape, const AttentionOptions& options,
                     const ForwardArgs& args);
void ValidateBackward(const AttentionShape& shape, const AttentionOptions& options,
                      const BackwardArgs& args);

}  // namespace lpattn

#endif  // LPATTN_KERNELS_VALIDATE_H_
