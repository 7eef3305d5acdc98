// Numbers in option text (arm specs, interference specs, command-line values), read whole:
// the C library's strto* stop at an embedded NUL or the first character they cannot take and
// saturate on overflow, so a caller that checks only `*end == '\0'` accepts "0.5\0junk" and
// 2^64 + 1. These check that every byte was consumed and that nothing overflowed.
#ifndef LPATTN_HARNESS_COMMON_NUMBER_TEXT_H_
#define LPATTN_HARNESS_COMMON_NUMBER_TEXT_H_

#include <cstdint>
#include <string>

namespace lpattn::harness {

// The whole of `text` as a finite double; false (out untouched) otherwise.
bool ReadWholeDouble(const std::string& text, double& out);
// The whole of `text` as a base-10 integer that fits int64_t; false otherwise.
bool ReadWholeInteger(const std::string& text, int64_t& out);
// The whole of `text` as a base-10 integer >= 0 (no sign) that fits uint64_t; false otherwise.
bool ReadWholeUnsigned(const std::string& text, uint64_t& out);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_COMMON_NUMBER_TEXT_H_
