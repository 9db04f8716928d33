#pragma once
// A string under normalization that remembers, for every byte, the byte range
// of the original input it came from, so that token offsets can be reported
// in the caller's bytes whatever the normalizers and pre-tokenizers did.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "text/tokenizer/unicode.hpp"

namespace trlx::text::detail {

using Align = std::pair<uint32_t, uint32_t>;

struct NStr {
  std::string s;
  std::vector<Align> al;  // one per byte of s, absolute original offsets
  uint32_t ob = 0;        // where this piece starts in the original

  static NStr from_input(std::string_view input);  // also repairs invalid UTF-8
  NStr slice(size_t b, size_t e) const;
  // Rewrites bytes [b, e) with `dest`; see uni::Change. `skip` source chars at
  // the start of the range are dropped.
  void transform_range(size_t b, size_t e, const std::vector<uni::Change>& dest, size_t skip);
  void transform(const std::vector<uni::Change>& dest, size_t skip) { transform_range(0, s.size(), dest, skip); }
  void prepend(std::string_view p);
  void lrstrip(bool left, bool right);
  // Replaces each [b, e) match by `content`.
  void replace(const std::vector<std::pair<size_t, size_t>>& matches, std::string_view content);
  Align original(size_t b, size_t e) const {
    return b < e ? Align{al[b].first, al[e - 1].second} : Align{ob, ob};
  }
};

// Pattern matches over a string, covering it: (begin, end, is_match).
struct Piece {
  size_t b, e;
  bool match;
};
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };
void split_by(const NStr& n, const std::vector<Piece>& pieces, Behavior behavior, std::vector<NStr>& out);

}  // namespace trlx::text::detail
