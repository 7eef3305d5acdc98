// The checkpoint reader (docs/harness.md §3.3): "LPATTNCK", u32 version 1, u64 n + the config
// as n bytes of JSON, i64 step, then params, adam_m and adam_v each as u64 n + n f32, and an
// FNV-1a 64 checksum of every byte before it; little-endian. The engine needs only params.
#include "checkpoint.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace engine {
namespace {

[[noreturn]] void Fail(const std::string& path, const std::string& problem) {
  throw std::runtime_error("checkpoint " + path + ": " + problem);
}

uint64_t Fnv1a64(const std::string& bytes, size_t size) {
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= static_cast<unsigned char>(bytes[i]);
    hash *= 1099511628211ull;
  }
  return hash;
}

// Fields read in order from a buffer whose checksum matched; never past its end.
struct Reader {
  const std::string& path;
  const std::string& bytes;
  size_t end, pos = 0;

  void Need(uint64_t n, const char* what) const {
    if (n > end - pos) Fail(path, std::string(what) + " extends past the end");
  }
  template <typename T>
  T Read(const char* what) {
    Need(sizeof(T), what);
    T value;
    std::memcpy(&value, bytes.data() + pos, sizeof(T));
    pos += sizeof(T);
    return value;
  }
  std::string Bytes(uint64_t n, const char* what) {
    Need(n, what);
    pos += n;
    return bytes.substr(pos - n, n);
  }
};

// Walks params in the harness's order (docs/harness.md §3.6), checking that they add up.
void LayOut(const std::string& path, Checkpoint& ck) {
  const ModelShape& m = ck.model;
  const size_t C = size_t(m.n_embd);
  size_t offset = 0;
  const auto take = [&](size_t size) {
    const float* view = ck.params.data() + offset;
    offset += size;
    return view;
  };
  ck.wte = take(size_t(m.vocab) * C);
  ck.wpe = take(size_t(m.context) * C);
  ck.layers.resize(size_t(m.n_layer));
  for (LayerWeights& l : ck.layers) {
    l.ln1_w = take(C), l.ln1_b = take(C);
    l.qkv_w = take(3 * C * C), l.qkv_b = take(3 * C);
    l.attproj_w = take(C * C), l.attproj_b = take(C);
    l.ln2_w = take(C), l.ln2_b = take(C);
    l.fc_w = take(4 * C * C), l.fc_b = take(4 * C);
    l.fcproj_w = take(4 * C * C), l.fcproj_b = take(C);
    if (ck.arm.sink == lpattn::SinkMode::kLearned) l.sink = take(size_t(m.n_head));
  }
  ck.lnf_w = take(C), ck.lnf_b = take(C);
  if (offset != ck.params.size()) {
    Fail(path, "holds " + std::to_string(ck.params.size()) + " parameters; its model and arm '" +
                   ck.arm_text + "' have " + std::to_string(offset));
  }
}

}  // namespace

AttentionArm ParseArm(const std::string& text) {
  const auto fail = [&](const std::string& why) -> void {
    throw std::runtime_error("arm '" + text + "': " + why);
  };
  std::string spec = text;
  const size_t plus = spec.rfind('+');
  if (plus != std::string::npos && spec.find('=', plus) != std::string::npos) {
    spec.resize(plus);  // "+qk=int8,...": the trained operand precision
  }
  const size_t colon = spec.find(':');
  const std::string base = spec.substr(0, colon);
  AttentionArm arm;
  if (base == "sink") {
    arm.sink = lpattn::SinkMode::kLearned;
  } else if (base == "offbyone" && colon == std::string::npos) {
    arm.sink = lpattn::SinkMode::kOffByOne;
  } else if (base != "exact") {
    fail("the engine serves exact, sink, offbyone, exact:<options> and sink:<options>");
  }
  std::string rest = colon == std::string::npos ? "" : spec.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string item = rest.substr(0, comma);
    rest = comma == std::string::npos ? "" : rest.substr(comma + 1);
    const size_t eq = item.find('=');
    const std::string key = item.substr(0, eq), value = eq == item.npos ? "" : item.substr(eq + 1);
    try {
      if (key == "softcap") {
        arm.softcap = std::stof(value);
      } else if (key == "alibi") {
        arm.alibi = std::stoi(value) != 0;
      } else if (key == "window") {
        arm.window = std::stoll(value);
      } else {
        fail("unknown option '" + key + "' (softcap, alibi, window)");
      }
    } catch (const std::logic_error&) {  // stof and friends on a bad number
      fail("option " + key + " has no number ('" + value + "')");
    }
  }
  return arm;
}

Checkpoint LoadCheckpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Fail(path, "cannot open");
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (bytes.size() < 8 || bytes.compare(0, 8, "LPATTNCK") != 0) Fail(path, "not a checkpoint");
  if (bytes.size() < 8 + 4 + 8 + 8 + 3 * 8 + 8) Fail(path, "truncated");
  uint64_t stored = 0;
  const size_t body = bytes.size() - sizeof(stored);
  std::memcpy(&stored, bytes.data() + body, sizeof(stored));
  if (Fnv1a64(bytes, body) != stored) Fail(path, "checksum mismatch (corrupt or truncated)");

  Reader r{path, bytes, body, 8};
  if (const auto version = r.Read<uint32_t>("version"); version != 1) {
    Fail(path, "format version " + std::to_string(version) + " (this engine reads version 1)");
  }
  Checkpoint ck;
  const auto config = nlohmann::json::parse(r.Bytes(r.Read<uint64_t>("config"), "config"));
  const auto& model = config.at("model");
  ck.model = {model.at("n_layer"), model.at("n_head"), model.at("n_embd"), model.at("context"),
              model.at("vocab")};
  if (model.value("pos", std::string("learned")) != "learned") {
    // Rotary positions (`--pos rope`) are not served by this example: its decode adds wpe.
    Fail(path, "uses positions '" + model.at("pos").get<std::string>() +
                   "'; this engine serves learned positions only");
  }
  ck.arm_text = config.at("arm");
  ck.arm = ParseArm(ck.arm_text);
  ck.step = r.Read<int64_t>("step");
  const auto count = r.Read<uint64_t>("params");
  if (count > (r.end - r.pos) / sizeof(float)) Fail(path, "params extend past the end");
  ck.params.resize(count);
  std::memcpy(ck.params.data(), bytes.data() + r.pos, count * sizeof(float));
  const ModelShape& m = ck.model;
  if (m.n_layer < 1 || m.n_head < 1 || m.n_embd < 1 || m.n_embd % m.n_head != 0 ||
      m.context < 1 || m.vocab < 1) {
    Fail(path, "has an invalid model shape");
  }
  LayOut(path, ck);
  return ck;
}

}  // namespace engine
