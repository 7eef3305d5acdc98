// The processes of a data-parallel job (docs/harness.md §3.7): rank r of P, started by mpirun,
// or this process alone. Every collective the harness needs, written so that results are the
// same bits run to run: sums are added in rank order, not in the order MPI's reduction
// algorithm picks. A build without MPI (or a process not started by mpirun) has one rank.
#ifndef LPATTN_HARNESS_COMMON_RANKS_H_
#define LPATTN_HARNESS_COMMON_RANKS_H_

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace lpattn::harness {

class Ranks {
 public:
  // This process alone: rank 0 of 1; every collective is the identity.
  static const Ranks& Self();
  // Every process of the job: MPI's world once MpiSession has started it, else Self().
  static const Ranks& World();

  int rank() const { return rank_; }
  int size() const { return size_; }
  bool leader() const { return rank_ == 0; }  // owns run directories, files and reports

  // values[i] := the sum over ranks of values[i], added in the order rank 0, 1, ..., P-1 on
  // every rank (a reduce-scatter by slices, then an all-gather), so all ranks hold the same bits.
  void SumInRankOrder(std::vector<float>& values) const;
  void SumInRankOrder(std::vector<double>& values) const;
  // Rank 0's bytes to every rank.
  void Broadcast(void* data, size_t bytes) const;
  template <class T>
  void Broadcast(std::vector<T>& values) const {
    size_t count = values.size();
    Broadcast(&count, sizeof(count));
    values.resize(count);
    Broadcast(values.data(), count * sizeof(T));
  }
  // Runs fn on every rank. If it throws on any rank, throws on every rank: the local exception
  // where fn failed here, else std::runtime_error with the lowest failing rank's message. So a
  // rank never waits in a collective for one that has given up.
  void Agree(const std::function<void()>& fn) const;
  // Ends every rank of the job (MPI_Abort) with exit status 1 after printing the message.
  [[noreturn]] void Abort(const std::string& message) const;

 private:
  friend class MpiSession;
  Ranks(int rank, int size) : rank_(rank), size_(size) {}
  int rank_, size_;
};

// Starts MPI for the process's lifetime when the process was started by mpirun (Open MPI's or
// PMIx's environment says so) and the build has MPI; otherwise does nothing and World() stays
// Self(). Construct one, first thing in main.
class MpiSession {
 public:
  MpiSession(int& argc, char**& argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

 private:
  bool started_ = false;
};

}  // namespace lpattn::harness

#endif  // LPATTN_HARNESS_COMMON_RANKS_H_
