#pragma once
// Unicode helpers for the tokenizer: UTF-8 walking, the character classes the
// pre-tokenizers use, normalization forms with per-character change marks
// (the alignment bookkeeping of NormalizedString needs them) and lowercase.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace trlx::text::uni {

// Decodes the UTF-8 unit at s[i]: a code point and its byte length. Invalid
// input yields U+FFFD and the length of the maximal invalid subpart (the
// rule of Python's "replace" handler and Rust's from_utf8_lossy).
struct Unit {
  char32_t cp;
  uint32_t len;
  bool valid;
};
Unit decode(std::string_view s, size_t i);
// Fast path for text known to be valid UTF-8.
inline uint32_t seq_len(unsigned char b) {
  return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}
char32_t decode_valid(std::string_view s, size_t i, uint32_t* len);
void append_utf8(std::string& out, char32_t cp);
inline uint32_t utf8_len(char32_t cp) {
  return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
}
bool is_valid_utf8(std::string_view s);
// Replaces invalid sequences with U+FFFD, one per maximal subpart.
std::string lossy(std::string_view bytes);

// Character classes as the reference's pre-tokenizers see them (see
// scripts/fixtures/tokenizer_unicode_tables.py for how they were measured).
enum : uint8_t { kWord = 1, kNumeric = 2, kPunct = 4, kSpace = 8 };
uint8_t classes(char32_t cp);
inline bool is_whitespace(char32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 9 && cp <= 13);
  return classes(cp) & kSpace;
}
inline bool is_numeric(char32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return classes(cp) & kNumeric;
}
// \w of the Rust regex crate (Unicode): Alphabetic, marks, decimal digits,
// connector punctuation, join controls.
inline bool is_word(char32_t cp) { return classes(cp) & kWord; }
inline bool is_punctuation(char32_t cp) {
  if (cp < 0x80) {
    return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
           (cp >= 0x7B && cp <= 0x7E);
  }
  return classes(cp) & kPunct;
}

// A character of a transformed string and how it relates to the source:
// 0 replaces one source character, 1 is inserted, -n replaces one and
// removes the n that follow.
using Change = std::pair<char32_t, int32_t>;

enum class Form { NFD, NFKD, NFC, NFKC };
// Appends the normalized form of `s` (valid UTF-8) as a change list.
void normalize(std::string_view s, Form form, std::vector<Change>& out);
// Cheap test: true when `s` is certainly unchanged by `form`.
bool quick_normalized(std::string_view s, Form form);

// The Unicode version of the regex classes below (the reference's Oniguruma).
const char* regex_unicode_version();

// Rewrites an Oniguruma pattern so that its general-category classes
// (\p{L}, \p{Lu}, ..., \P{..}, \p{^..}) and \d, \D, \w, \W become explicit
// ranges of regex_unicode_version(): the system library's own tables are
// older than the reference's (Debian's Oniguruma 6.9.8 has Unicode 14).
// Other properties (scripts, long names) are left to the library.
std::string expand_unicode_classes(std::string_view pattern);

// Full lowercase mapping of one character (1 to 3 characters).
int lowercase(char32_t cp, char32_t out[3]);

}  // namespace trlx::text::uni
