// What the fuzz targets share (docs/design.md §10): a reader that turns libFuzzer's bytes into
// bounded choices, and a scratch file for the targets whose entry point reads a path.
#ifndef LPATTN_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define LPATTN_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace lpattn::fuzz {

// Reads choices off the front of the input; past its end every read gives 0 (the smallest
// choice), so a short input is a small, plain case rather than a rejected one.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  uint8_t Byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  bool Bool() { return Byte() & 1; }
  // A value in [lo, hi] (hi - lo < 2^16).
  int64_t Range(int64_t lo, int64_t hi) {
    const uint32_t span = uint32_t(hi - lo) + 1;
    const uint32_t raw = uint32_t(Byte()) | uint32_t(Byte()) << 8;
    return lo + int64_t(raw % span);
  }
  // One of n choices.
  size_t Pick(size_t n) { return size_t(Range(0, int64_t(n) - 1)); }
  // The four bytes of a float as they come: any bit pattern, NaNs and infinities included.
  float RawFloat() {
    uint32_t bits = 0;
    for (int i = 0; i < 4; ++i) bits |= uint32_t(Byte()) << (8 * i);
    float x;
    std::memcpy(&x, &bits, sizeof x);
    return x;
  }
  // The bytes not read yet, as text.
  std::string Rest() {
    const std::string rest(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return rest;
  }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A file holding `bytes`, removed when it goes out of scope, for readers that take a path.
// One per process (libFuzzer runs one input at a time), named by the process id.
class ScratchFile {
 public:
  ScratchFile(const char* name, const uint8_t* data, size_t size) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir && *dir ? dir : "/tmp") + "/lpattn_" + name + "_" +
            std::to_string(::getpid());
    std::FILE* f = std::fopen(path_.c_str(), "wb");
    if (!f) std::abort();  // the fuzzer cannot run without its scratch file
    if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
    std::fclose(f);
  }
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace lpattn::fuzz

#endif  // LPATTN_TESTS_FUZZ_FUZZ_SUPPORT_H_
