#pragma once
// What the losses' custom autograd Functions share (included by their .cpp
// files only): switching autocast off inside a Function, whose inputs
// already have the compute dtype, and shapes in error messages.
#include <string>

#include <ATen/autocast_mode.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

namespace trlx::losses::detail {

// Inside a Function the inputs already have the compute dtype, so autocast
// must not recast anything (fp32 softmax math stays fp32 and in-place
// accumulations keep their buffers' dtypes).
class AutocastOff {
 public:
  explicit AutocastOff(c10::DeviceType device) : device_(device), prev_(at::autocast::is_autocast_enabled(device)) {
    at::autocast::set_autocast_enabled(device_, false);
  }
  ~AutocastOff() { at::autocast::set_autocast_enabled(device_, prev_); }
  AutocastOff(const AutocastOff&) = delete;
  AutocastOff& operator=(const AutocastOff&) = delete;

 private:
  c10::DeviceType device_;
  bool prev_;
};

inline std::string shape(c10::IntArrayRef sizes) { return fmt::format("[{}]", fmt::join(sizes, ", ")); }

}  // namespace trlx::losses::detail
