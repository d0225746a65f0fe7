#pragma once
// Sweep progress on a stream: a redrawn bar with ETA on a terminal, otherwise one line per finished run
// (so logs of unattended sweeps stay readable).
#include <cstdio>
#include <string>

namespace kvtax::harness {

std::string format_duration(double seconds);  // "42s", "3m05s", "2h10m"

class Progress {
 public:
  Progress(std::FILE* out, int total, bool enabled);
  void begin_run(const std::string& label);
  void end_run(const std::string& result_line);
  void message(const std::string& line);  // a line that must not be overwritten by the bar
  void close();

 private:
  void draw(const std::string& label);
  std::FILE* out_;
  int total_, done_ = 0;
  bool enabled_, tty_;
  double start_;
  std::string label_;
};

}  // namespace kvtax::harness
