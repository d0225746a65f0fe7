#pragma once
// Every kernel's start and end on the device while a KernelTrace lives, from CUPTI's activity records: a timeline of
// the decode step in place (its CUDA graph, PDL overlap and all), where ncu runs kernels one at a time and nsys may
// not be installed. libcupti is opened at run time (dlopen), so the benches start without it; a trace then fails
// with a clear error. Used by kvtax_gpu_decode_bench --trace.
#include <cstdint>
#include <string>
#include <vector>

namespace kvtax::gpu_bench {

struct KernelRecord {
  std::string name;  // demangled, without namespaces and parameter list (template arguments kept)
  uint64_t start_ns = 0, end_ns = 0;
  int grid = 0, block = 0;  // x dimensions
};

class KernelTrace {
 public:
  KernelTrace();  // starts recording (throws if libcupti cannot be loaded or refuses)
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;
  // Waits for the device, then returns the kernels recorded since the last call, by end time.
  std::vector<KernelRecord> take();
};

// Per kernel kind over `steps` steps (records by end time): launches per step, mean duration, and the time each adds
// to the step, end - previous end (with PDL a kernel starts before the one ahead of it ends; what it adds is the
// span between their ends). Idle: the time no kernel ran. Lines sorted by added time, ms per step.
std::string trace_summary(const std::vector<KernelRecord>& records, int steps);

}  // namespace kvtax::gpu_bench
