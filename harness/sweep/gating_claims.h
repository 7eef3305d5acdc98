// The value-gating paper's three statements, read off a sweep report (docs/harness.md §4): each
// with a verdict, or the reason it cannot be tested at the sweep's scale.
#ifndef LPATTN_HARNESS_SWEEP_GATING_CLAIMS_H_
#define LPATTN_HARNESS_SWEEP_GATING_CLAIMS_H_

#include <string>

#include "harness/sweep/sweep.h"

namespace lpattn::harness {

// A Markdown section: (1) value-only gates keep the first-token sink and the output gate removes
// it (sink rates against exact's); (2) gains add up (per composite, the paired interaction
// L(A+B) - L(A) - L(B) + L(exact) with its 95% t interval); (3) interference is resisted in
// distinguishable ways (per interference: gates lower on corrupted rows = filtering, abstention
// up under corruption = abstaining, loss increase below exact's = protected).
std::string GatingClaims(const SweepReport& report);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_SWEEP_GATING_CLAIMS_H_
