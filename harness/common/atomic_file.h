// Files written atomically: every file the harness writes (run and sweep files, reports,
// checkpoints) goes to a temporary name and is renamed over its path, so a reader never sees a
// half-written file and a failed write leaves the old one in place (docs/design.md §7).
#ifndef LPATTN_HARNESS_COMMON_ATOMIC_FILE_H_
#define LPATTN_HARNESS_COMMON_ATOMIC_FILE_H_

#include <string>

namespace lpattn::harness {

// Writes `contents` to path + ".tmp", flushes it (fsync), renames it over path and syncs the
// directory (best effort). Throws std::runtime_error naming the path, the failed step and the
// system's reason; the temporary file is removed on failure.
void WriteFileAtomically(const std::string& path, const std::string& contents);

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_COMMON_ATOMIC_FILE_H_
