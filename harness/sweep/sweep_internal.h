// What sweep.cc (running a sweep) and sweep_report.cc (its report) share: reading sweep.json
// and the run files, and the fixed-point format of the tables and progress lines. Not part of
// the sweep API (sweep.h).
#ifndef LPATTN_HARNESS_SWEEP_SWEEP_INTERNAL_H_
#define LPATTN_HARNESS_SWEEP_SWEEP_INTERNAL_H_

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/sweep/sweep.h"

namespace lpattn::harness::sweep_internal {

// The parsed file; throws std::runtime_error naming the path when it cannot be read or parsed.
nlohmann::json ReadJson(const std::filesystem::path& path);

// A sweep's extras as sweep.json records them; an older sweep.json has none.
SweepExtras ExtrasFromJson(const nlohmann::json& sweep);

// value with `digits` digits after the point ("%.*f").
std::string Fixed(double value, int digits);

}  // namespace lpattn::harness::sweep_internal

#endif  // LPATTN_HARNESS_SWEEP_SWEEP_INTERNAL_H_
