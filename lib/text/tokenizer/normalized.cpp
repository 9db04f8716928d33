// A string under normalization that maps every byte back to the input it came from (token offsets).
#include "text/tokenizer/normalized.hpp"

#include <algorithm>

namespace trlx::text::detail {

NStr NStr::from_input(std::string_view input) {
  NStr n;
  n.s.reserve(input.size());
  n.al.reserve(input.size());
  size_t i = 0;
  while (i < input.size()) {
    const auto b = static_cast<unsigned char>(input[i]);
    if (b < 0x80) {
      n.s.push_back(static_cast<char>(b));
      n.al.emplace_back(i, i + 1);
      ++i;
      continue;
    }
    const uni::Unit u = uni::decode(input, i);
    const Align a{static_cast<uint32_t>(i), static_cast<uint32_t>(i + u.len)};
    if (u.valid) {
      n.s.append(input.substr(i, u.len));
    } else {
      n.s.append("\xEF\xBF\xBD");
    }
    n.al.insert(n.al.end(), u.valid ? u.len : 3, a);
    i += u.len;
  }
  return n;
}

NStr NStr::slice(size_t b, size_t e) const {
  NStr r;
  r.s.assign(s, b, e - b);
  r.al.assign(al.begin() + static_cast<std::ptrdiff_t>(b), al.begin() + static_cast<std::ptrdiff_t>(e));
  r.ob = b < e ? al[b].first : ob;
  return r;
}

void NStr::transform_range(size_t b, size_t e, const std::vector<uni::Change>& dest, size_t skip) {
  size_t offset = b;
  for (size_t k = 0; k < skip && offset < e; ++k) offset += uni::seq_len(static_cast<unsigned char>(s[offset]));
  std::string ns;
  std::vector<Align> nal;
  ns.reserve(e - b + dest.size());
  nal.reserve(e - b + dest.size());
  auto consume = [&]() {
    if (offset < e) offset += uni::seq_len(static_cast<unsigned char>(s[offset]));
  };
  for (const auto& [c, change] : dest) {
    Align a;
    if (change > 0) {
      a = offset < 1 ? Align{ob, ob} : al[offset - 1];
    } else {
      a = offset < al.size() ? al[offset] : (al.empty() ? Align{ob, ob} : al.back());
      consume();
      for (int32_t k = 0; k < -change; ++k) consume();
    }
    const size_t before = ns.size();
    uni::append_utf8(ns, c);
    nal.insert(nal.end(), ns.size() - before, a);
  }
  s.replace(b, e - b, ns);
  al.erase(al.begin() + static_cast<std::ptrdiff_t>(b), al.begin() + static_cast<std::ptrdiff_t>(e));
  al.insert(al.begin() + static_cast<std::ptrdiff_t>(b), nal.begin(), nal.end());
}

void NStr::prepend(std::string_view p) {
  if (s.empty() || p.empty()) return;
  uint32_t n;
  const char32_t first = uni::decode_valid(s, 0, &n);
  std::vector<uni::Change> dest;
  bool firstc = true;
  for (size_t i = 0; i < p.size();) {
    uint32_t l;
    dest.emplace_back(uni::decode_valid(p, i, &l), firstc ? 0 : 1);
    firstc = false;
    i += l;
  }
  dest.emplace_back(first, 1);
  transform_range(0, n, dest, 0);
}

void NStr::lrstrip(bool left, bool right) {
  size_t b = 0, e = s.size();
  if (left) {
    while (b < e) {
      uint32_t l;
      if (!uni::is_whitespace(uni::decode_valid(s, b, &l))) break;
      b += l;
    }
  }
  if (right) {
    while (e > b) {
      size_t p = e - 1;
      while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
      uint32_t l;
      if (!uni::is_whitespace(uni::decode_valid(s, p, &l))) break;
      e = p;
    }
  }
  if (b == 0 && e == s.size()) return;
  // Stripping only removes characters at the ends: the kept bytes keep
  // their alignments.
  s = s.substr(b, e - b);
  al.erase(al.begin() + static_cast<std::ptrdiff_t>(e), al.end());
  al.erase(al.begin(), al.begin() + static_cast<std::ptrdiff_t>(b));
}

void NStr::replace(const std::vector<std::pair<size_t, size_t>>& matches, std::string_view content) {
  if (matches.empty()) return;
  std::string ns;
  std::vector<Align> nal;
  ns.reserve(s.size());
  nal.reserve(s.size());
  size_t last = 0;
  for (const auto& [b, e] : matches) {
    ns.append(s, last, b - last);
    nal.insert(nal.end(), al.begin() + static_cast<std::ptrdiff_t>(last), al.begin() + static_cast<std::ptrdiff_t>(b));
    // Inserted characters take the alignment of the byte before the end of
    // the match: the last replaced character's origin.
    const Align a = e < 1 ? Align{ob, ob} : al[e - 1];
    const size_t before = ns.size();
    ns.append(content);
    nal.insert(nal.end(), ns.size() - before, a);
    last = e;
  }
  ns.append(s, last, std::string::npos);
  nal.insert(nal.end(), al.begin() + static_cast<std::ptrdiff_t>(last), al.end());
  s = std::move(ns);
  al = std::move(nal);
}

void split_by(const NStr& n, const std::vector<Piece>& pieces, Behavior behavior, std::vector<NStr>& out) {
  std::vector<std::pair<size_t, size_t>> keep;
  keep.reserve(pieces.size());
  switch (behavior) {
    case Behavior::Isolated:
      for (const auto& p : pieces) keep.emplace_back(p.b, p.e);
      break;
    case Behavior::Removed:
      for (const auto& p : pieces)
        if (!p.match) keep.emplace_back(p.b, p.e);
      break;
    case Behavior::Contiguous: {
      bool prev = false;
      for (const auto& p : pieces) {
        if (p.match == prev && !keep.empty()) {
          keep.back().second = p.e;
        } else {
          keep.emplace_back(p.b, p.e);
        }
        prev = p.match;
      }
      break;
    }
    case Behavior::MergedWithPrevious: {
      bool prev = false;
      for (const auto& p : pieces) {
        if (p.match && !prev && !keep.empty()) {
          keep.back().second = p.e;
        } else {
          keep.emplace_back(p.b, p.e);
        }
        prev = p.match;
      }
      break;
    }
    case Behavior::MergedWithNext: {
      bool prev = false;
      for (size_t i = pieces.size(); i-- > 0;) {
        const auto& p = pieces[i];
        if (p.match && !prev && !keep.empty()) {
          keep.back().first = p.b;
        } else {
          keep.emplace_back(p.b, p.e);
        }
        prev = p.match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    }
  }
  for (const auto& [b, e] : keep) {
    if (b < e) out.push_back(n.slice(b, e));
  }
}

}  // namespace trlx::text::detail
