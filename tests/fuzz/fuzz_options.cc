// Fuzzing of the option-text parsers (docs/design.md §10): K-interval (ParseKInterval),
// thresholded attention (ParseThreshold), precision (ParsePrecision), attention arm specs
// (MakeArm), interference specs (ParseInterference) and dense formats (ParseDenseFormat). Any
// text is either refused with std::invalid_argument or parsed into options whose canonical
// text parses back to the same options (the same canonical text). Anything else is a finding:
// another exception, a crash, a sanitizer report, or a canonical text that does not round-trip.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

#include "harness/model/attention_arm.h"
#include "harness/model/dense_product.h"
#include "harness/model/interference.h"
#include "kernels/kinterval.h"
#include "kernels/precision.h"
#include "kernels/threshold.h"
#include "tests/fuzz/fuzz_support.h"

namespace lpattn::fuzz {
namespace {

// docs/design.md §10: parse(text) either refuses or gives options whose canonical text
// format(options) parses again (never refused) to the same canonical text.
template <class Parse, class Format>
void ExpectRoundTrip(const char* what, const std::string& text, const Parse& parse,
                     const Format& format) {
  std::string canonical;
  try {
    canonical = format(parse(text));
  } catch (const std::invalid_argument&) {
    return;  // refused, as documented
  }
  std::string again;
  try {
    again = format(parse(canonical));
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: canonical text '%s' of an accepted spec is refused: %s\n", what,
                 canonical.c_str(), e.what());
    std::abort();
  }
  if (again != canonical) {
    std::fprintf(stderr, "%s: '%s' formats as '%s', which formats as '%s'\n", what, text.c_str(),
                 canonical.c_str(), again.c_str());
    std::abort();
  }
}

}  // namespace
}  // namespace lpattn::fuzz

// docs/design.md §10: the first byte picks the parser, the rest is its text.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lpattn;
  using namespace lpattn::fuzz;
  ByteReader in(data, size);
  const uint8_t which = in.Byte();
  const std::string text = in.Rest();
  switch (which % 6) {
    case 0:
      ExpectRoundTrip("kint", text, ParseKInterval, FormatKInterval);
      break;
    case 1:
      ExpectRoundTrip("tda", text, ParseThreshold, FormatThreshold);
      break;
    case 2:
      ExpectRoundTrip("precision", text, ParsePrecision, FormatPrecision);
      break;
    case 3:
      ExpectRoundTrip("arm", text, harness::MakeArm,
                      [](const std::unique_ptr<harness::AttentionArm>& arm) { return arm->Name(); });
      break;
    case 4:
      ExpectRoundTrip("interference", text, harness::ParseInterference,
                      harness::FormatInterference);
      break;
    case 5:
      ExpectRoundTrip("dense format", text, harness::ParseDenseFormat,
                      harness::DenseFormatName);
      break;
  }
  return 0;
}
