#include "kernel_trace.h"

#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>

#include "cuda/runtime.h"

namespace kvtax::gpu_bench {
namespace {

// The CUPTI entry points a trace uses, from libcupti opened at run time.
struct Cupti {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*result_string)(CUptiResult, const char**);
};

const Cupti& cupti() {
  static const Cupti c = [] {
    void* h = nullptr;
    for (const char* lib : {"libcupti.so.13", "libcupti.so"})
      if ((h = dlopen(lib, RTLD_NOW | RTLD_LOCAL))) break;
    if (!h)
      throw std::runtime_error("kernel trace: libcupti.so.13 not found (add CUDA's lib64 or extras/CUPTI/lib64 to "
                               "LD_LIBRARY_PATH)");
    auto sym = [&](const char* name) {
      void* p = dlsym(h, name);
      if (!p) throw std::runtime_error(fmt::format("kernel trace: libcupti lacks {}", name));
      return p;
    };
    Cupti r;
    r.register_callbacks = reinterpret_cast<decltype(r.register_callbacks)>(sym("cuptiActivityRegisterCallbacks"));
    r.enable = reinterpret_cast<decltype(r.enable)>(sym("cuptiActivityEnable"));
    r.disable = reinterpret_cast<decltype(r.disable)>(sym("cuptiActivityDisable"));
    r.flush_all = reinterpret_cast<decltype(r.flush_all)>(sym("cuptiActivityFlushAll"));
    r.next_record = reinterpret_cast<decltype(r.next_record)>(sym("cuptiActivityGetNextRecord"));
    r.result_string = reinterpret_cast<decltype(r.result_string)>(sym("cuptiGetResultString"));
    return r;
  }();
  return c;
}

void check_cupti(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* s = "unknown error";
  cupti().result_string(r, &s);
  throw std::runtime_error(fmt::format("kernel trace: {}: {}", what, s));
}

// Records land through CUPTI's buffer callbacks, which are plain functions: one trace at a time.
std::mutex g_mu;
std::vector<KernelRecord> g_records;
bool g_active = false;

// "void kvtax::cuda::detail::(anonymous namespace)::f<(kvtax::GgmlType)12, true>(kvtax::...)" -> "f<(GgmlType)12,
// true>": the name and template arguments, without namespaces or parameters.
std::string short_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  auto erase_all = [&](const char* part) {
    for (size_t at; (at = s.find(part)) != std::string::npos;) s.erase(at, std::char_traits<char>::length(part));
  };
  erase_all("(anonymous namespace)::");  // before the '(' of the parameter list is looked for
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {  // the parameter list: the first '(' outside the template arguments
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0 && i > 0) {
      s.resize(i);
      break;
    }
  }
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  for (const char* ns : {"kvtax::", "cuda::", "detail::", "ops::", "kv::"}) erase_all(ns);
  return s;
}

constexpr size_t kBufferBytes = 8 << 20;

void buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::vector<KernelRecord> got;
  CUpti_Activity* rec = nullptr;
  while (cupti().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    got.push_back({short_name(k->name), k->start, k->end, k->gridX, k->blockX});
  }
  std::free(buffer);
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.insert(g_records.end(), got.begin(), got.end());
}

}  // namespace

KernelTrace::KernelTrace() {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (g_active) throw std::runtime_error("kernel trace: one at a time");
    g_active = true;
    g_records.clear();
  }
  try {
    cuda::check(cudaDeviceSynchronize(), "kernel trace start");
    check_cupti(cupti().register_callbacks(buffer_requested, buffer_completed), "register buffers");
    check_cupti(cupti().enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernel records");
  } catch (...) {
    std::lock_guard<std::mutex> lock(g_mu);
    g_active = false;
    throw;
  }
}

KernelTrace::~KernelTrace() {
  cudaDeviceSynchronize();
  cupti().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mu);
  g_records.clear();
  g_active = false;
}

std::vector<KernelRecord> KernelTrace::take() {
  cuda::check(cudaDeviceSynchronize(), "kernel trace");
  check_cupti(cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flush records");
  std::vector<KernelRecord> r;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    r.swap(g_records);
  }
  std::sort(r.begin(), r.end(), [](const KernelRecord& a, const KernelRecord& b) { return a.end_ns < b.end_ns; });
  return r;
}

std::string trace_summary(const std::vector<KernelRecord>& records, int steps) {
  struct Kind {
    int n = 0;
    double dur = 0, added = 0, idle = 0;  // ns
  };
  std::map<std::string, Kind> kinds;
  double total = 0, total_idle = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const KernelRecord& r = records[i];
    Kind& k = kinds[fmt::format("{} [{}x{}]", r.name, r.grid, r.block)];
    const uint64_t prev_end = i ? records[i - 1].end_ns : r.start_ns;
    const double added = double(r.end_ns - prev_end), idle = r.start_ns > prev_end ? double(r.start_ns - prev_end) : 0;
    ++k.n;
    k.dur += double(r.end_ns - r.start_ns);
    k.added += added;
    k.idle += idle;
    total += added;
    total_idle += idle;
  }
  std::vector<std::pair<std::string, Kind>> sorted(kinds.begin(), kinds.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.added > b.second.added; });
  const double per = 1e6 * steps;  // ns -> ms per step
  std::string out = fmt::format("  trace ({} steps, {} kernels): {:.3f} ms per step from the first kernel's start to "
                                "the last's end, {:.3f} of it with no kernel running\n",
                                steps, records.size(), total / per, total_idle / per);
  for (const auto& [name, k] : sorted)
    out += fmt::format("    {:>7.3f} ms added ({:.3f} idle before it)  {:5.1f}/step  {:7.2f} us each  {}\n",
                       k.added / per, k.idle / per, double(k.n) / steps, k.dur / k.n / 1e3, name);
  return out;
}

}  // namespace kvtax::gpu_bench
