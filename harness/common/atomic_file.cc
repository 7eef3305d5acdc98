// Atomic file writes (atomic_file.h).
#include "harness/common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace lpattn::harness {
namespace {

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

void WriteFileAtomically(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  const auto fail = [&](const std::string& step, bool remove_tmp) {
    const std::string reason = ErrnoText();
    if (remove_tmp) ::unlink(tmp.c_str());
    throw std::runtime_error("cannot write " + path + ": " + step + ": " + reason);
  };

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  // Not created by us (e.g. the temporary name is a directory): nothing to remove.
  if (fd < 0) fail("open " + tmp, false);

  const char* data = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      ::close(fd);
      errno = saved;
      fail("write " + tmp, true);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int saved = errno;
    ::close(fd);
    errno = saved;
    fail("fsync " + tmp, true);
  }
  if (::close(fd) != 0) fail("close " + tmp, true);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("rename " + tmp + " to " + path, true);

  // Make the rename itself durable. Best effort: the new contents are already in place, and a
  // failure here (some filesystems refuse fsync on directories) is not a failed write.
  const auto slash = path.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? std::string(".") : (slash == 0 ? "/" : path.substr(0, slash));
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    (void)::fsync(dir_fd);
    ::close(dir_fd);
  }
}

}  // namespace lpattn::harness
