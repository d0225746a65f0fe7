#pragma once
// Process memory accounting: RSS now and peak (from /proc), with a resettable peak so each run of a
// sweep measures its own high-water mark.
#include <cstddef>

namespace kvtax {

size_t rss_bytes();         // current resident set size
size_t peak_rss_bytes();    // VmHWM since process start or the last reset_peak_rss()
bool reset_peak_rss();      // writes 5 to /proc/self/clear_refs; false where the kernel refuses

}  // namespace kvtax
