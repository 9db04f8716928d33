#pragma once
// TensorBoard event files written directly: a TFRecord stream (length,
// masked CRC32C of the length, payload, masked CRC32C of the payload) of
// Event protocol buffers. trlx writes only scalars, so the few proto fields
// involved are encoded by hand and no protobuf library is needed.
//
// Event        { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
// Summary      { repeated Value value = 1; }
// Summary.Value{ string tag = 1; float simple_value = 2; }
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace trlx::io {

// CRC-32C (Castagnoli), and the rotated form TFRecord stores.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One serialized Event, byte for byte as the Python protobuf runtime writes it
// (fields in number order, proto3 defaults such as step 0 left out).
std::string event_file_version(double wall_time);
std::string event_scalar(double wall_time, int64_t step, std::string_view tag, float value);
// A TFRecord frame around `payload`.
std::string tfrecord(std::string_view payload);

class EventWriter {
 public:
  // Creates `dir` and in it "events.out.tfevents.<seconds>.<host>.<pid>.0",
  // the name TensorBoard's own writer uses, starting with the
  // "brain.Event:2" file_version record.
  explicit EventWriter(const std::filesystem::path& dir);
  void scalar(std::string_view tag, double value, int64_t step);
  // Every record so far reaches the file (TensorBoard reads a growing file).
  void flush();
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

// transformers' default logging_dir under output_dir: "runs/<Mon DD_HH-MM-SS>_<host>".
std::filesystem::path default_tensorboard_dir(const std::filesystem::path& output_dir);

}  // namespace trlx::io
