// TensorBoard event files written directly as a TFRecord stream of Event protos.
#include "io/tensorboard.hpp"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <ctime>

#include <fmt/format.h>

#include "core/error.hpp"

namespace trlx::io {

namespace {

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;  // reflected Castagnoli
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

template <class T>
void put_fixed(std::string& out, T v) {
  // Protocol buffers and TFRecord are little-endian, as is every host trlx builds for.
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_bytes(std::string& out, uint32_t field, std::string_view bytes) {
  put_varint(out, (field << 3) | 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_varint(e, (1 << 3) | 1);  // wall_time: 64-bit
  put_fixed(e, wall_time);
  if (step != 0) {
    put_varint(e, (2 << 3) | 0);  // step: varint (negative steps as 10-byte two's complement)
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "localhost";
  return buf;
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  const auto& t = crc_table();
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : data) c = t[(c ^ b) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xA282EAD8u;
}

std::string event_file_version(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string event_scalar(double wall_time, int64_t step, std::string_view tag, float value) {
  std::string v;
  put_bytes(v, 1, tag);
  put_varint(v, (2 << 3) | 5);  // simple_value: 32-bit
  put_fixed(v, value);
  std::string summary;
  put_bytes(summary, 1, v);
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

std::string tfrecord(std::string_view payload) {
  std::string len;
  put_fixed(len, static_cast<uint64_t>(payload.size()));
  std::string out = len;
  put_fixed(out, masked_crc32c(len));
  out.append(payload);
  put_fixed(out, masked_crc32c(payload));
  return out;
}

EventWriter::EventWriter(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("cannot create the TensorBoard directory {}: {}", dir.string(), ec.message()));
  const double now = now_seconds();
  path_ = dir / fmt::format("events.out.tfevents.{:010d}.{}.{}.0", static_cast<int64_t>(now), hostname(), getpid());
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw Error(fmt::format("cannot write the TensorBoard event file {}", path_.string()));
  out_ << tfrecord(event_file_version(now));
  flush();
}

void EventWriter::scalar(std::string_view tag, double value, int64_t step) {
  out_ << tfrecord(event_scalar(now_seconds(), step, tag, static_cast<float>(value)));
}

void EventWriter::flush() {
  out_.flush();
  if (!out_) throw Error(fmt::format("writing the TensorBoard event file {} failed", path_.string()));
}

std::filesystem::path default_tensorboard_dir(const std::filesystem::path& output_dir) {
  const std::time_t t = std::time(nullptr);
  std::tm local{};
  localtime_r(&t, &local);
  char stamp[64];
  std::strftime(stamp, sizeof(stamp), "%b%d_%H-%M-%S", &local);
  return output_dir / "runs" / (std::string(stamp) + "_" + hostname());
}

}  // namespace trlx::io
