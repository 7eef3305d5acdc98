// The "key=value,key=value" option text shared by the kernels' Parse functions (K-interval,
// thresholded): ',' or ':' between items, each item key=value.
#ifndef LPATTN_KERNELS_TRANSFORMS_OPTION_TEXT_H_
#define LPATTN_KERNELS_TRANSFORMS_OPTION_TEXT_H_

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>
#include <string>
#include <string_view>

namespace lpattn {

// Calls item(key, value) for each non-empty item of `text`; calls reject(message) (which must
// throw) for an item without '='.
template <class Item, class Reject>
void ForEachOption(const std::string& text, const Item& item, const Reject& reject) {
  std::string normalised = text;
  std::replace(normalised.begin(), normalised.end(), ':', ',');
  std::istringstream items(normalised);
  std::string piece;
  while (std::getline(items, piece, ',')) {
    if (piece.empty()) continue;
    const size_t eq = piece.find('=');
    if (eq == std::string::npos) reject("expected key=value, got '" + piece + "'");
    item(piece.substr(0, eq), piece.substr(eq + 1));
  }
}

// The whole of `value` as a finite double; false if it is not one.
inline bool ParseOptionNumber(const std::string& value, double& out) {
  size_t used = 0;
  try {
    out = std::stod(value, &used);
  } catch (const std::exception&) {
    return false;
  }
  return used == value.size() && !value.empty();
}

// The shortest text that parses back to the same double.
inline std::string ShortestText(double x) {
  char text[32];
  return std::string(text, size_t(std::to_chars(text, text + sizeof text, x).ptr - text));
}

}  // namespace lpattn

#endif  // LPATTN_KERNELS_TRANSFORMS_OPTION_TEXT_H_
