// Fuzzing of the run configuration's JSON (docs/design.md §10): any text is refused (a JSON
// parse error, or std::invalid_argument from from_json or ValidateConfig) or read into a
// config that validates, writes back to JSON that reads back to the same config, and names a
// model whose parameter count is computed without overflow (Gpt::ParamCount, which refuses
// counts past size_t). Anything else is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "harness/model/config.h"
#include "harness/model/model.h"

namespace {

[[noreturn]] void Finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_config finding: %s\n", what.c_str());
  std::abort();
}

}  // namespace

// docs/design.md §10: the input is the config.json text.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using lpattn::harness::TrainConfig;
  const nlohmann::json parsed = nlohmann::json::parse(data, data + size, nullptr, false);
  if (parsed.is_discarded()) return 0;
  TrainConfig config;
  try {
    from_json(parsed, config);
    lpattn::harness::ValidateConfig(config);
  } catch (const std::invalid_argument&) {
    return 0;  // refused, naming the field
  }
  nlohmann::json written;
  to_json(written, config);
  TrainConfig back;
  try {
    from_json(nlohmann::json::parse(written.dump()), back);
    lpattn::harness::ValidateConfig(back);
  } catch (const std::exception& e) {
    Finding(std::string("the written config is refused: ") + e.what() + " in " + written.dump());
  }
  nlohmann::json rewritten;
  to_json(rewritten, back);
  if (rewritten != written) Finding("config does not round-trip: " + written.dump());
  try {
    (void)lpattn::harness::Gpt::ParamCount(config.model, config.arm);
  } catch (const std::invalid_argument&) {
    // a model too large to count is refused
  }
  return 0;
}
