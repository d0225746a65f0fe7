#include "harness/progress.h"

#include <unistd.h>

#include <fmt/format.h>

#include "core/timer.h"

namespace kvtax::harness {

std::string format_duration(double s) {
  if (s < 0) s = 0;
  const long t = long(s + 0.5);
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02d}s", t / 60, int(t % 60));
  return fmt::format("{}h{:02d}m", t / 3600, int((t % 3600) / 60));
}

Progress::Progress(std::FILE* out, int total, bool enabled)
    : out_(out), total_(total), enabled_(enabled && out), tty_(out && ::isatty(::fileno(out))), start_(now_seconds()) {}

void Progress::draw(const std::string& label) {
  const int width = 30;
  const int filled = total_ > 0 ? done_ * width / total_ : width;
  std::string bar(size_t(filled), '=');
  if (filled < width) bar += '>' + std::string(size_t(width - filled - 1), ' ');
  const double el = now_seconds() - start_;
  const std::string eta = done_ > 0 ? format_duration(el / done_ * (total_ - done_)) : "?";
  std::fprintf(out_, "\r\033[2K[%s] %d/%d  %s  elapsed %s  ETA %s", bar.c_str(), done_, total_, label.c_str(),
               format_duration(el).c_str(), eta.c_str());
  std::fflush(out_);
}

void Progress::begin_run(const std::string& label) {
  label_ = label;
  if (enabled_ && tty_) draw(label);
}

void Progress::end_run(const std::string& line) {
  ++done_;
  if (!enabled_) return;
  if (tty_) {
    draw(label_);
    return;
  }
  const double el = now_seconds() - start_;
  std::fprintf(out_, "[%d/%d] %s (elapsed %s, ETA %s)\n", done_, total_, line.c_str(), format_duration(el).c_str(),
               format_duration(el / done_ * (total_ - done_)).c_str());
  std::fflush(out_);
}

void Progress::message(const std::string& line) {
  if (!enabled_) return;
  std::fprintf(out_, tty_ ? "\r\033[2K%s\n" : "%s\n", line.c_str());
  if (tty_ && !label_.empty()) draw(label_);
  std::fflush(out_);
}

void Progress::close() {
  if (enabled_ && tty_) std::fprintf(out_, "\n");
}

}  // namespace kvtax::harness
