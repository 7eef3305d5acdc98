// Checkpoint files (docs/harness.md §3). Layout, all integers little-endian:
//
//   "LPATTNCK"                 8-byte magic
//   u32 version                kCheckpointVersion
//   u64 n + n bytes            the config as JSON text
//   i64 step
//   u64 n + n f32              params
//   u64 n + n f32              adam_m
//   u64 n + n f32              adam_v
//   u64 checksum               FNV-1a (64-bit) of every preceding byte
//
// The reader checks the checksum before trusting any length field, so a corrupted length can
// neither drive a huge allocation nor be mistaken for a well-formed file.
#include "harness/train/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "harness/common/atomic_file.h"

namespace lpattn::harness {
namespace {

static_assert(std::endian::native == std::endian::little,
              "checkpoints are written in host byte order, which must be little-endian");
static_assert(sizeof(float) == 4, "checkpoints store IEEE binary32 floats");

constexpr char kMagic[8] = {'L', 'P', 'A', 'T', 'T', 'N', 'C', 'K'};
// magic + version + config length + step + three array counts + checksum.
constexpr size_t kMinFileSize = 8 + 4 + 8 + 8 + 3 * 8 + 8;

uint64_t Fnv1a64(const unsigned char* data, size_t size) {
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < size; ++i) {
    hash ^= data[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

template <typename T>
void Append(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void AppendFloats(std::string& out, const std::vector<float>& values) {
  Append(out, static_cast<uint64_t>(values.size()));
  if (!values.empty()) {
    out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  }
}

std::string ErrnoText() { return std::strerror(errno); }

// Reads a regular file whole; returns an error description, empty on success. The file's own
// size bounds the allocation, and every length inside it is checked against that size.
std::string ReadWholeFile(const std::string& path, std::string& bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open (" + ErrnoText() + ")";
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const std::string error = "cannot stat (" + ErrnoText() + ")";
    ::close(fd);
    return error;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return "not a regular file";
  }
  bytes.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string error = "read error (" + ErrnoText() + ")";
      ::close(fd);
      return error;
    }
    if (n == 0) break;  // shrank while we read: judged on what was there
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  ::close(fd);
  return {};
}

// Sequential reads from a buffer whose checksum already matched; running out of bytes here
// means the writer and reader disagree on the layout, which is reported, never overrun.
class Cursor {
 public:
  Cursor(const std::string& path, const unsigned char* data, size_t size)
      : path_(path), data_(data), size_(size) {}

  template <typename T>
  T Read(const char* what) {
    Require(sizeof(T), what);
    T value;
    std::memcpy(&value, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  std::string ReadString(const char* what) {
    const auto n = Read<uint64_t>(what);
    Require(n, what);
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

  std::vector<float> ReadFloats(const char* what) {
    const auto n = Read<uint64_t>(what);
    if (n > (size_ - pos_) / sizeof(float)) Fail(std::string(what) + " extends past the end");
    std::vector<float> values(n);
    if (n > 0) std::memcpy(values.data(), data_ + pos_, n * sizeof(float));
    pos_ += n * sizeof(float);
    return values;
  }

  size_t remaining() const { return size_ - pos_; }

  [[noreturn]] void Fail(const std::string& problem) const {
    throw std::runtime_error("checkpoint " + path_ + ": " + problem);
  }

 private:
  void Require(uint64_t n, const char* what) const {
    if (n > size_ - pos_) Fail(std::string(what) + " extends past the end");
  }

  const std::string& path_;
  const unsigned char* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace

void WriteCheckpoint(const std::string& path, const CheckpointState& state) {
  if (state.adam_m.size() != state.params.size() || state.adam_v.size() != state.params.size()) {
    throw std::invalid_argument(
        "checkpoint " + path + ": array sizes differ (params " +
        std::to_string(state.params.size()) + ", adam_m " + std::to_string(state.adam_m.size()) +
        ", adam_v " + std::to_string(state.adam_v.size()) + ")");
  }
  if (state.step < 0) {
    throw std::invalid_argument("checkpoint " + path + ": step (" + std::to_string(state.step) +
                                ") must be >= 0");
  }
  nlohmann::json config_json;
  to_json(config_json, state.config);
  const std::string config_text = config_json.dump();

  std::string out;
  out.reserve(kMinFileSize + config_text.size() + 3 * state.params.size() * sizeof(float));
  out.append(kMagic, sizeof(kMagic));
  Append(out, kCheckpointVersion);
  Append(out, static_cast<uint64_t>(config_text.size()));
  out += config_text;
  Append(out, state.step);
  AppendFloats(out, state.params);
  AppendFloats(out, state.adam_m);
  AppendFloats(out, state.adam_v);
  Append(out, Fnv1a64(reinterpret_cast<const unsigned char*>(out.data()), out.size()));
  WriteFileAtomically(path, out);
}

CheckpointState ReadCheckpoint(const std::string& path) {
  const auto fail = [&](const std::string& problem) -> void {
    throw std::runtime_error("checkpoint " + path + ": " + problem);
  };

  std::string bytes;
  if (const std::string error = ReadWholeFile(path, bytes); !error.empty()) fail(error);
  const auto* data = reinterpret_cast<const unsigned char*>(bytes.data());
  const size_t size = bytes.size();

  if (size >= sizeof(kMagic) && std::memcmp(data, kMagic, sizeof(kMagic)) != 0) {
    fail("bad magic: not an lpattn checkpoint");
  }
  if (size < kMinFileSize) {
    fail("truncated: " + std::to_string(size) + " bytes, a checkpoint has at least " +
         std::to_string(kMinFileSize));
  }
  uint32_t version = 0;
  std::memcpy(&version, data + sizeof(kMagic), sizeof(version));
  if (version != kCheckpointVersion) {
    fail("unsupported format version " + std::to_string(version) + " (this build reads version " +
         std::to_string(kCheckpointVersion) + ")");
  }
  const size_t body = size - sizeof(uint64_t);
  uint64_t stored = 0;
  std::memcpy(&stored, data + body, sizeof(stored));
  if (Fnv1a64(data, body) != stored) {
    fail("checksum mismatch: the file is truncated or corrupted");
  }

  Cursor cursor(path, data, body);
  (void)cursor.Read<std::array<char, sizeof(kMagic)>>("magic");
  (void)cursor.Read<uint32_t>("version");
  const std::string config_text = cursor.ReadString("config JSON");
  CheckpointState state;
  state.step = cursor.Read<int64_t>("step");
  state.params = cursor.ReadFloats("params");
  state.adam_m = cursor.ReadFloats("adam_m");
  state.adam_v = cursor.ReadFloats("adam_v");
  if (cursor.remaining() != 0) {
    fail(std::to_string(cursor.remaining()) + " unexpected bytes before the checksum");
  }
  if (state.step < 0) fail("negative step " + std::to_string(state.step));
  if (state.adam_m.size() != state.params.size() || state.adam_v.size() != state.params.size()) {
    fail("array sizes inconsistent (params " + std::to_string(state.params.size()) +
         ", adam_m " + std::to_string(state.adam_m.size()) + ", adam_v " +
         std::to_string(state.adam_v.size()) + ")");
  }
  // Validated like any config read from a file: a corrupt checkpoint's config (its checksum
  // recomputed) must not build an absurd model.
  try {
    from_json(nlohmann::json::parse(config_text), state.config);
    ValidateConfig(state.config);
  } catch (const std::exception& e) {
    fail(std::string("bad config: ") + e.what());
  }
  return state;
}

}  // namespace lpattn::harness
