// Regular expressions (Oniguruma, as the reference) and tokenizer.json's String/Regex patterns cut into pieces.
#include "text/tokenizer/pipeline.hpp"

namespace trlx::text::pipeline {
namespace {

std::once_flag g_onig_once;

}  // namespace

Regex::Regex(const std::string& pattern, const Node& where) {
  std::call_once(g_onig_once, [] {
    OnigEncoding encs[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encs, 1);
  });
  OnigErrorInfo info;
  const std::string widened = uni::expand_unicode_classes(pattern);
  const auto* p = reinterpret_cast<const OnigUChar*>(widened.data());
  const int r = onig_new(&re_, p, p + widened.size(), ONIG_OPTION_NONE, ONIG_ENCODING_UTF8, ONIG_SYNTAX_RUBY, &info);
  if (r != ONIG_NORMAL) {
    re_ = nullptr;
    OnigUChar msg[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(msg, r, &info);
    fail_input("{}: key `{}`: invalid regular expression \"{}\": {}", where.file, where.path, pattern,
               reinterpret_cast<const char*>(msg));
  }
}

std::vector<Piece> regex_pieces(const Regex& re, std::string_view text, bool invert) {
  std::vector<Piece> out;
  if (text.empty()) {
    out.push_back({0, 0, invert});
    return out;
  }
  size_t prev = 0;
  re.find_iter(text, [&](size_t b, size_t e) {
    if (prev != b) out.push_back({prev, b, invert});
    out.push_back({b, e, !invert});
    prev = e;
  });
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
  return out;
}

std::vector<Piece> literal_pieces(std::string_view lit, std::string_view text, bool invert) {
  std::vector<Piece> out;
  if (lit.empty()) {
    out.push_back({0, text.size(), invert});
    return out;
  }
  if (text.empty()) {
    out.push_back({0, 0, invert});
    return out;
  }
  size_t prev = 0, pos;
  while ((pos = text.find(lit, prev)) != std::string_view::npos) {
    if (prev != pos) out.push_back({prev, pos, invert});
    out.push_back({pos, pos + lit.size(), !invert});
    prev = pos + lit.size();
  }
  if (prev != text.size()) out.push_back({prev, text.size(), invert});
  return out;
}

}  // namespace trlx::text::pipeline
