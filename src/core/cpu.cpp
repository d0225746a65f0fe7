#include "core/cpu.h"

#include <cpuid.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>
#include <utility>

namespace kvtax {
namespace {

bool os_saves(uint64_t mask) {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((uint64_t(hi) << 32 | lo) & mask) == mask;
}

int count_physical_cores() {
  // Unique (physical id, core id) pairs; falls back to the logical count.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;
  std::string line;
  int phys = 0;
  while (std::getline(in, line)) {
    if (line.rfind("physical id", 0) == 0) phys = std::atoi(line.c_str() + line.find(':') + 1);
    if (line.rfind("core id", 0) == 0) cores.insert({phys, std::atoi(line.c_str() + line.find(':') + 1)});
  }
  const int n = int(cores.size());
  return n > 0 ? n : int(std::thread::hardware_concurrency());
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    const bool fma = c & bit_FMA, f16c = c & bit_F16C, osxsave = c & bit_OSXSAVE;
    const bool ymm = osxsave && os_saves(0x6);
    const bool zmm = osxsave && os_saves(0xe6);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = ymm && fma && f16c && (b & bit_AVX2);
      f.avx512 = zmm && f.avx2 && (b & bit_AVX512F) && (b & bit_AVX512BW) && (b & bit_AVX512VL) && (b & bit_AVX512DQ);
      f.avx512_vnni = f.avx512 && (c & bit_AVX512VNNI);
      unsigned a1, b1, c1, d1;
      if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512_bf16 = f.avx512 && (a1 & (1u << 5));
    }
  }
  f.logical_cores = int(std::thread::hardware_concurrency());
  f.physical_cores = count_physical_cores();
  return f;
}

}  // namespace

const CpuFeatures& cpu() {
  static const CpuFeatures f = detect();
  return f;
}

SimdLevel simd_level() {
  static const SimdLevel level = [] {
    SimdLevel l = cpu().avx512 ? SimdLevel::avx512 : cpu().avx2 ? SimdLevel::avx2 : SimdLevel::scalar;
    if (const char* cap = std::getenv("KVTAX_SIMD")) {
      if (!std::strcmp(cap, "scalar")) l = SimdLevel::scalar;
      else if (!std::strcmp(cap, "avx2") && l == SimdLevel::avx512) l = SimdLevel::avx2;
    }
    return l;
  }();
  return level;
}

const char* simd_name(SimdLevel l) {
  switch (l) {
    case SimdLevel::avx512: return "avx512";
    case SimdLevel::avx2: return "avx2";
    default: return "scalar";
  }
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace kvtax
