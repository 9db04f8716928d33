// LibTorch archives (optimizer and RNG state) written crash-safely through an AtomicFile.
#include "io/torch_file.hpp"

#include <optional>
#include <streambuf>
#include <string>

#include "core/error.hpp"
#include "io/atomic_write.hpp"

namespace trlx::io {

namespace {

// Hands every byte to an AtomicFile and reports success to the writer
// whatever happens; `error` holds the first failure.
class ErrorKeepingBuffer : public std::streambuf {
 public:
  explicit ErrorKeepingBuffer(AtomicFile& file) : file_(file) {}
  std::optional<std::string> error;

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    put(s, n);
    return n;
  }
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      const char ch = traits_type::to_char_type(c);
      put(&ch, 1);
    }
    return traits_type::not_eof(c);
  }

 private:
  void put(const char* s, std::streamsize n) {
    if (error || n <= 0) return;
    try {
      file_.write(s, static_cast<size_t>(n));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  AtomicFile& file_;
};

}  // namespace

void write_torch_file(const std::filesystem::path& target, const std::function<void(std::ostream&)>& save) {
  AtomicFile file(target);
  ErrorKeepingBuffer buffer(file);
  std::ostream out(&buffer);
  save(out);
  out.flush();
  if (buffer.error) throw Error(fmt::format("writing {} failed: {}", target.string(), *buffer.error));
  file.commit();
}

}  // namespace trlx::io
