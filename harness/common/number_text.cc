// Numbers in option text, read whole (harness/common/number_text.h).
#include "harness/common/number_text.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace lpattn::harness {
namespace {

// strto*'s end pointer must reach the string's own end, past any embedded NUL.
bool ConsumedWhole(const std::string& text, const char* end) {
  return !text.empty() && end == text.c_str() + text.size();
}

}  // namespace

bool ReadWholeDouble(const std::string& text, double& out) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (!ConsumedWhole(text, end) || !std::isfinite(value)) return false;
  out = value;
  return true;
}

bool ReadWholeInteger(const std::string& text, int64_t& out) {
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (!ConsumedWhole(text, end) || errno == ERANGE) return false;
  out = int64_t(value);
  return true;
}

bool ReadWholeUnsigned(const std::string& text, uint64_t& out) {
  // strtoull reads "-1" as 2^64 - 1: only digits may start the number.
  if (text.empty() || text[0] < '0' || text[0] > '9') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (!ConsumedWhole(text, end) || errno == ERANGE) return false;
  out = uint64_t(value);
  return true;
}

}  // namespace lpattn::harness
