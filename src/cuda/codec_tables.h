// Device copies of the codecs' fixed tables: the rotation signs (q4r, tq4, tq3) and the tq codebooks with
// their decision thresholds. Uploaded on first use, kept for the process's lifetime; shared by the KV
// encoder and the prefill attention so the device holds one copy.
#pragma once

#include "cuda/runtime.h"

namespace kvtax::cuda {

struct CodecTables {
  Buffer signs, tq4, tq4_thr, tq3, tq3_thr;
};

const CodecTables& codec_tables();

}  // namespace kvtax::cuda
