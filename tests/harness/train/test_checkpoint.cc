// Checkpoints (harness/train/checkpoint.cc, docs/harness.md §3): a bit-exact round trip, and every
// damaged file (truncated, a flipped byte, wrong magic, future version, missing) rejected with
// an error naming the file; atomic replacement of files that leaves nothing behind on failure.
#include "harness/common/atomic_file.h"
#include "harness/train/checkpoint.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace lpattn::harness {
namespace {

namespace fs = std::filesystem;

std::string ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteBytes(const fs::path& path, const std::string& bytes) {
  // A fresh file rather than a truncated one: ext4 flushes a file truncated and rewritten
  // (auto_da_alloc), which would make the loops below slow.
  fs::remove(path);
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

uint64_t Fnv1a64(const std::string& bytes) {
  uint64_t hash = 14695981039346656037ull;
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void PutFloats(std::string& out, const std::vector<float>& values) {
  Put(out, static_cast<uint64_t>(values.size()));
  out.append(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

// The documented layout, built independently of the writer: magic, u32 version, config JSON,
// i64 step, three float arrays, FNV-1a checksum of everything before it.
std::string BuildFile(uint32_t version, const std::string& config_text, int64_t step,
                      const std::vector<float>& params, const std::vector<float>& adam_m,
                      const std::vector<float>& adam_v) {
  std::string out = "LPATTNCK";
  Put(out, version);
  Put(out, static_cast<uint64_t>(config_text.size()));
  out += config_text;
  Put(out, step);
  PutFloats(out, params);
  PutFloats(out, adam_m);
  PutFloats(out, adam_v);
  Put(out, Fnv1a64(out));
  return out;
}

std::vector<float> Floats(size_t n, uint32_t seed) {
  std::vector<float> values(n);
  uint32_t state = seed;
  for (size_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;
    uint32_t bits = state;
    std::memcpy(&values[i], &bits, sizeof(bits));  // arbitrary bit patterns, NaNs included
  }
  if (n >= 4) {
    values[0] = -0.0f;
    values[1] = std::numeric_limits<float>::denorm_min();
    values[2] = std::numeric_limits<float>::infinity();
    values[3] = 1.0f;
  }
  return values;
}

CheckpointState SampleState() {
  CheckpointState s;
  s.config = PresetConfig("small");
  s.config.arm = "kint:K=4,cal=window";
  s.config.seed = 42;
  s.config.data = "/tmp/corpus.txt";
  s.step = 1234;
  s.params = Floats(1000, 1);
  s.adam_m = Floats(1000, 2);
  s.adam_v = Floats(1000, 3);
  return s;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    dir_ = fs::temp_directory_path() / ("lpattn_checkpoint_test_" + std::to_string(::getpid()) +
                                        "_" + std::to_string(counter++));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ignored);
    fs::remove_all(dir_, ignored);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Files in the test directory, so a leftover temporary file shows up.
  std::set<std::string> Listing() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

  // The message of the std::runtime_error ReadCheckpoint throws for `path`.
  static std::string ReadError(const std::string& path) {
    try {
      ReadCheckpoint(path);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    ADD_FAILURE() << "ReadCheckpoint accepted " << path;
    return "";
  }

  fs::path dir_;
};

TEST_F(CheckpointTest, RoundTripIsBitExact) {
  const CheckpointState state = SampleState();
  const std::string path = Path("checkpoint.bin");
  WriteCheckpoint(path, state);
  const CheckpointState back = ReadCheckpoint(path);

  EXPECT_EQ(back.step, state.step);
  EXPECT_TRUE(SameBits(back.params, state.params));
  EXPECT_TRUE(SameBits(back.adam_m, state.adam_m));
  EXPECT_TRUE(SameBits(back.adam_v, state.adam_v));
  EXPECT_EQ(nlohmann::json(back.config), nlohmann::json(state.config));
  EXPECT_EQ(back.config.arm, state.config.arm);
  EXPECT_EQ(back.config.seed, state.config.seed);
  EXPECT_EQ(back.config.model.n_embd, state.config.model.n_embd);
  EXPECT_EQ(back.config.lr, state.config.lr);
  EXPECT_EQ(Listing(), std::set<std::string>{"checkpoint.bin"});
}

TEST_F(CheckpointTest, FileFollowsTheDocumentedLayout) {
  const CheckpointState state = SampleState();
  const std::string path = Path("checkpoint.bin");
  WriteCheckpoint(path, state);
  const std::string expected = BuildFile(kCheckpointVersion, nlohmann::json(state.config).dump(),
                                         state.step, state.params, state.adam_m, state.adam_v);
  EXPECT_TRUE(ReadBytes(path) == expected);
}

TEST_F(CheckpointTest, EmptyArraysRoundTrip) {
  CheckpointState state;
  const std::string path = Path("empty.bin");
  WriteCheckpoint(path, state);
  const CheckpointState back = ReadCheckpoint(path);
  EXPECT_EQ(back.step, 0);
  EXPECT_TRUE(back.params.empty());
  EXPECT_TRUE(back.adam_m.empty());
  EXPECT_TRUE(back.adam_v.empty());
}

TEST_F(CheckpointTest, OverwriteReplacesThePreviousCheckpoint) {
  const std::string path = Path("checkpoint.bin");
  CheckpointState first = SampleState();
  WriteCheckpoint(path, first);
  CheckpointState second = SampleState();
  second.step = 2000;
  second.params = Floats(10, 9);
  second.adam_m = Floats(10, 10);
  second.adam_v = Floats(10, 11);
  WriteCheckpoint(path, second);
  const CheckpointState back = ReadCheckpoint(path);
  EXPECT_EQ(back.step, 2000);
  EXPECT_TRUE(SameBits(back.params, second.params));
  EXPECT_EQ(Listing(), std::set<std::string>{"checkpoint.bin"});
}

TEST_F(CheckpointTest, WriterRejectsInconsistentState) {
  CheckpointState state = SampleState();
  state.adam_v.pop_back();
  EXPECT_THROW(WriteCheckpoint(Path("bad.bin"), state), std::invalid_argument);
  state = SampleState();
  state.step = -1;
  EXPECT_THROW(WriteCheckpoint(Path("bad.bin"), state), std::invalid_argument);
  EXPECT_TRUE(Listing().empty());
}

TEST_F(CheckpointTest, TruncatedFileIsRejected) {
  const std::string good_path = Path("good.bin");
  WriteCheckpoint(good_path, SampleState());
  const std::string bytes = ReadBytes(good_path);
  const size_t n = bytes.size();
  const std::vector<size_t> lengths = {0,      1,      7,      8,     11,    12,     19,
                                       20,     59,     60,     61,    100,   n / 3,  n / 2,
                                       n - 4001, n - 16, n - 9, n - 8, n - 7, n - 1};
  const std::string path = Path("truncated.bin");
  for (const size_t length : lengths) {
    SCOPED_TRACE(length);
    ASSERT_LT(length, n);
    WriteBytes(path, bytes.substr(0, length));
    const std::string message = ReadError(path);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  }
}

TEST_F(CheckpointTest, FlippedByteFailsTheChecksum) {
  const std::string good_path = Path("good.bin");
  WriteCheckpoint(good_path, SampleState());
  const std::string bytes = ReadBytes(good_path);
  std::vector<size_t> positions;
  for (size_t i = 0; i < 64; ++i) positions.push_back(i);                   // header, config
  for (size_t i = 64; i < bytes.size(); i += 97) positions.push_back(i);    // everywhere
  for (size_t i = bytes.size() - 16; i < bytes.size(); ++i) positions.push_back(i);  // tail

  const std::string path = Path("flipped.bin");
  for (const size_t pos : positions) {
    SCOPED_TRACE(pos);
    std::string damaged = bytes;
    damaged[pos] = static_cast<char>(damaged[pos] ^ (1 << (pos % 8)));
    WriteBytes(path, damaged);
    const std::string message = ReadError(path);
    EXPECT_NE(message.find(path), std::string::npos) << message;
    // The magic and the version are checked first (their own messages); everything after
    // them, lengths included, is covered by the checksum.
    const char* expected = pos < 8 ? "bad magic" : pos < 12 ? "unsupported format version"
                                                            : "checksum mismatch";
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  }
}

TEST_F(CheckpointTest, WrongMagicIsRejected) {
  const CheckpointState s = SampleState();
  std::string bytes = BuildFile(kCheckpointVersion, nlohmann::json(s.config).dump(), s.step,
                                s.params, s.adam_m, s.adam_v);
  bytes.replace(0, 8, "GGUF\0\0\0\0", 8);
  const std::string path = Path("magic.bin");
  WriteBytes(path, bytes);
  const std::string message = ReadError(path);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("bad magic"), std::string::npos) << message;

  WriteBytes(path, "{\"not\": \"a checkpoint\"}\n");
  EXPECT_NE(ReadError(path).find("bad magic"), std::string::npos);
}

TEST_F(CheckpointTest, FutureVersionIsRejected) {
  const CheckpointState s = SampleState();
  const std::string path = Path("future.bin");
  WriteBytes(path, BuildFile(kCheckpointVersion + 1, nlohmann::json(s.config).dump(), s.step,
                             s.params, s.adam_m, s.adam_v));
  const std::string message = ReadError(path);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("unsupported format version " + std::to_string(kCheckpointVersion + 1)),
            std::string::npos)
      << message;
}

TEST_F(CheckpointTest, MissingFileIsRejected) {
  const std::string path = Path("nowhere.bin");
  const std::string message = ReadError(path);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("cannot open"), std::string::npos) << message;

  const std::string dir_message = ReadError(dir_.string());
  EXPECT_NE(dir_message.find("not a regular file"), std::string::npos) << dir_message;
}

TEST_F(CheckpointTest, InconsistentArraySizesAreRejected) {
  const CheckpointState s = SampleState();
  const std::string path = Path("sizes.bin");
  WriteBytes(path, BuildFile(kCheckpointVersion, nlohmann::json(s.config).dump(), s.step,
                             s.params, s.adam_m, Floats(999, 4)));
  const std::string message = ReadError(path);
  EXPECT_NE(message.find("array sizes inconsistent"), std::string::npos) << message;
}

TEST_F(CheckpointTest, LengthPastTheEndIsRejectedWithoutAllocating) {
  // A well-checksummed file whose params count claims far more floats than the file holds.
  const CheckpointState s = SampleState();
  const std::string config_text = nlohmann::json(s.config).dump();
  std::string out = "LPATTNCK";
  Put(out, kCheckpointVersion);
  Put(out, static_cast<uint64_t>(config_text.size()));
  out += config_text;
  Put(out, int64_t{5});
  Put(out, uint64_t{1} << 61);  // 8 EiB of floats
  Put(out, uint64_t{0});
  Put(out, uint64_t{0});
  Put(out, Fnv1a64(out));
  const std::string path = Path("huge.bin");
  WriteBytes(path, out);
  const std::string message = ReadError(path);
  EXPECT_NE(message.find("params extends past the end"), std::string::npos) << message;

  std::string long_config = "LPATTNCK";
  Put(long_config, kCheckpointVersion);
  Put(long_config, std::numeric_limits<uint64_t>::max());
  long_config.append(40, '\0');
  Put(long_config, Fnv1a64(long_config));
  WriteBytes(path, long_config);
  const std::string config_message = ReadError(path);
  EXPECT_NE(config_message.find("config JSON extends past the end"), std::string::npos)
      << config_message;
}

TEST_F(CheckpointTest, BadConfigIsRejected) {
  const CheckpointState s = SampleState();
  const std::string path = Path("config.bin");
  nlohmann::json config = s.config;
  config["stepz"] = 3;
  WriteBytes(path, BuildFile(kCheckpointVersion, config.dump(), s.step, s.params, s.adam_m,
                             s.adam_v));
  std::string message = ReadError(path);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("unknown field 'stepz'"), std::string::npos) << message;

  WriteBytes(path, BuildFile(kCheckpointVersion, "{not json", s.step, s.params, s.adam_m,
                             s.adam_v));
  message = ReadError(path);
  EXPECT_NE(message.find("bad config"), std::string::npos) << message;
}

// A config that parses but does not validate (a corrupt checkpoint whose checksum was
// recomputed, as a fuzzer makes them) is rejected on read, before any model is sized from it.
TEST_F(CheckpointTest, ConfigThatDoesNotValidateIsRejected) {
  const CheckpointState s = SampleState();
  const std::string path = Path("invalid.bin");
  for (const auto& [field, value] : {std::pair<const char*, int>{"n_embd", 0}, {"n_head", 3},
                                     {"context", -1}}) {
    nlohmann::json config = s.config;
    config["model"][field] = value;
    WriteBytes(path, BuildFile(kCheckpointVersion, config.dump(), s.step, s.params, s.adam_m,
                               s.adam_v));
    const std::string message = ReadError(path);
    EXPECT_NE(message.find("bad config"), std::string::npos) << field << ": " << message;
    EXPECT_NE(message.find(field), std::string::npos) << message;
  }
  nlohmann::json config = s.config;
  config["threads"] = 1 << 20;
  WriteBytes(path, BuildFile(kCheckpointVersion, config.dump(), s.step, s.params, s.adam_m,
                             s.adam_v));
  EXPECT_NE(ReadError(path).find("threads"), std::string::npos);
}

// ---- WriteFileAtomically -------------------------------------------------------------------

TEST_F(CheckpointTest, AtomicWriteCreatesAndReplaces) {
  const std::string path = Path("config.json");
  WriteFileAtomically(path, "first");
  EXPECT_EQ(ReadBytes(path), "first");
  WriteFileAtomically(path, std::string("second\0with nul", 15));
  EXPECT_EQ(ReadBytes(path), std::string("second\0with nul", 15));
  WriteFileAtomically(path, "");
  EXPECT_EQ(ReadBytes(path), "");
  EXPECT_EQ(Listing(), std::set<std::string>{"config.json"});
}

TEST_F(CheckpointTest, AtomicWriteReplacesByRenameNotInPlace) {
  // A reader holding the old file keeps seeing the old contents in full: the new contents
  // went to a different file that was renamed over the name, never into the old one.
  const std::string path = Path("metrics.csv");
  const std::string old_contents(100000, 'a');
  WriteFileAtomically(path, old_contents);
  std::ifstream reader(path, std::ios::binary);
  ASSERT_TRUE(reader.good());
  WriteFileAtomically(path, "b");
  const std::string seen((std::istreambuf_iterator<char>(reader)),
                         std::istreambuf_iterator<char>());
  EXPECT_EQ(seen, old_contents);
  EXPECT_EQ(ReadBytes(path), "b");
}

TEST_F(CheckpointTest, AtomicWriteOverwritesAStaleTemporaryFile) {
  const std::string path = Path("summary.json");
  WriteBytes(path + ".tmp", "left over from a crash, and longer than the new contents");
  WriteFileAtomically(path, "{}");
  EXPECT_EQ(ReadBytes(path), "{}");
  EXPECT_EQ(Listing(), std::set<std::string>{"summary.json"});
}

TEST_F(CheckpointTest, FailedWriteLeavesTheTargetIntact) {
  // The temporary name is taken by a directory: open fails, the old file stays, and the
  // directory (not ours) is not removed.
  const std::string path = Path("checkpoint.bin");
  WriteFileAtomically(path, "old");
  fs::create_directory(path + ".tmp");
  try {
    WriteFileAtomically(path, "new");
    ADD_FAILURE() << "expected a failure";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_EQ(ReadBytes(path), "old");
  EXPECT_TRUE(fs::is_directory(path + ".tmp"));
}

TEST_F(CheckpointTest, FailedRenameRemovesTheTemporaryFile) {
  // The target is a non-empty directory: the temporary file is written but cannot be renamed
  // over it; it must be removed and the directory left as it was.
  const std::string path = Path("run");
  fs::create_directory(path);
  WriteBytes(path + "/inside", "kept");
  EXPECT_THROW(WriteFileAtomically(path, "new"), std::runtime_error);
  EXPECT_TRUE(fs::is_directory(path));
  EXPECT_EQ(ReadBytes(path + "/inside"), "kept");
  EXPECT_EQ(Listing(), std::set<std::string>{"run"});
}

TEST_F(CheckpointTest, MissingDirectoryFails) {
  const std::string path = Path("no/such/dir/file.json");
  try {
    WriteFileAtomically(path, "x");
    ADD_FAILURE() << "expected a failure";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  EXPECT_TRUE(Listing().empty());
}

}  // namespace
}  // namespace lpattn::harness
