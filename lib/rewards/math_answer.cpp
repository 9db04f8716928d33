// How trlx grades numeric answers the way math_verify does (see the header).
//
// math_verify works on Python strings with Python's `re` module; to select
// the same text it selects, this file carries a small backtracking regex
// engine with Python's semantics (leftmost-first alternation, lazy and
// greedy repeats, look-around, scoped case folding, Unicode \d \s \w) over
// code points, and writes the search patterns in that syntax. Numbers are
// exact (a small big-integer type): math_verify compares with SymPy, whose
// rounding and float-equality rules are reproduced below, not approximated
// with doubles.
#include "rewards/math_answer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/utf8.hpp"

namespace trlx::rewards::math {
namespace {

using U32 = std::u32string;

// ---------------------------------------------------------------- text ----

U32 from_utf8(std::string_view s) {
  U32 out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    char32_t cp = 0;
    size_t len = 0;
    if (c < 0x80) {
      cp = c;
      len = 1;
    } else if ((c >> 5) == 6) {
      cp = c & 0x1f;
      len = 2;
    } else if ((c >> 4) == 14) {
      cp = c & 0x0f;
      len = 3;
    } else if ((c >> 3) == 30) {
      cp = c & 0x07;
      len = 4;
    }
    bool ok = len > 0 && i + len <= s.size();
    for (size_t k = 1; ok && k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 2) ok = false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    if (!ok) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string to_utf8(const U32& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

struct CodeRange {
  char32_t lo, hi;
};

// Python's \d (Unicode decimal digits) and \w (str.isalnum() and '_'),
// generated from Python 3.11's Unicode database.
constexpr CodeRange kDigitRanges[] = {
    {0x30, 0x39}, {0x660, 0x669}, {0x6F0, 0x6F9}, {0x7C0, 0x7C9}, {0x966, 0x96F}, {0x9E6, 0x9EF},
    {0xA66, 0xA6F}, {0xAE6, 0xAEF}, {0xB66, 0xB6F}, {0xBE6, 0xBEF}, {0xC66, 0xC6F}, {0xCE6, 0xCEF},
    {0xD66, 0xD6F}, {0xDE6, 0xDEF}, {0xE50, 0xE59}, {0xED0, 0xED9}, {0xF20, 0xF29}, {0x1040, 0x1049},
    {0x1090, 0x1099}, {0x17E0, 0x17E9}, {0x1810, 0x1819}, {0x1946, 0x194F}, {0x19D0, 0x19D9},
    {0x1A80, 0x1A89}, {0x1A90, 0x1A99}, {0x1B50, 0x1B59}, {0x1BB0, 0x1BB9}, {0x1C40, 0x1C49},
    {0x1C50, 0x1C59}, {0xA620, 0xA629}, {0xA8D0, 0xA8D9}, {0xA900, 0xA909}, {0xA9D0, 0xA9D9},
    {0xA9F0, 0xA9F9}, {0xAA50, 0xAA59}, {0xABF0, 0xABF9}, {0xFF10, 0xFF19}, {0x104A0, 0x104A9},
    {0x10D30, 0x10D39}, {0x11066, 0x1106F}, {0x110F0, 0x110F9}, {0x11136, 0x1113F}, {0x111D0, 0x111D9},
    {0x112F0, 0x112F9}, {0x11450, 0x11459}, {0x114D0, 0x114D9}, {0x11650, 0x11659}, {0x116C0, 0x116C9},
    {0x11730, 0x11739}, {0x118E0, 0x118E9}, {0x11950, 0x11959}, {0x11C50, 0x11C59}, {0x11D50, 0x11D59},
    {0x11DA0, 0x11DA9}, {0x16A60, 0x16A69}, {0x16AC0, 0x16AC9}, {0x16B50, 0x16B59}, {0x1D7CE, 0x1D7FF},
    {0x1E140, 0x1E149}, {0x1E2F0, 0x1E2F9}, {0x1E950, 0x1E959}, {0x1FBF0, 0x1FBF9},
};
constexpr CodeRange kWordRanges[] = {
    {0x30, 0x39}, {0x41, 0x5A}, {0x5F, 0x5F}, {0x61, 0x7A}, {0xAA, 0xAA}, {0xB2, 0xB3}, {0xB5, 0xB5},
    {0xB9, 0xBA}, {0xBC, 0xBE}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x2C1}, {0x2C6, 0x2D1}, {0x2E0, 0x2E4},
    {0x2EC, 0x2EC}, {0x2EE, 0x2EE}, {0x370, 0x374}, {0x376, 0x377}, {0x37A, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x559, 0x559}, {0x560, 0x588}, {0x5D0, 0x5EA}, {0x5EF, 0x5F2},
    {0x620, 0x64A}, {0x660, 0x669}, {0x66E, 0x66F}, {0x671, 0x6D3}, {0x6D5, 0x6D5}, {0x6E5, 0x6E6},
    {0x6EE, 0x6FC}, {0x6FF, 0x6FF}, {0x710, 0x710}, {0x712, 0x72F}, {0x74D, 0x7A5}, {0x7B1, 0x7B1},
    {0x7C0, 0x7EA}, {0x7F4, 0x7F5}, {0x7FA, 0x7FA}, {0x800, 0x815}, {0x81A, 0x81A}, {0x824, 0x824},
    {0x828, 0x828}, {0x840, 0x858}, {0x860, 0x86A}, {0x870, 0x887}, {0x889, 0x88E}, {0x8A0, 0x8C9},
    {0x904, 0x939}, {0x93D, 0x93D}, {0x950, 0x950}, {0x958, 0x961}, {0x966, 0x96F}, {0x971, 0x980},
    {0x985, 0x98C}, {0x98F, 0x990}, {0x993, 0x9A8}, {0x9AA, 0x9B0}, {0x9B2, 0x9B2}, {0x9B6, 0x9B9},
    {0x9BD, 0x9BD}, {0x9CE, 0x9CE}, {0x9DC, 0x9DD}, {0x9DF, 0x9E1}, {0x9E6, 0x9F1}, {0x9F4, 0x9F9},
    {0x9FC, 0x9FC}, {0xA05, 0xA0A}, {0xA0F, 0xA10}, {0xA13, 0xA28}, {0xA2A, 0xA30}, {0xA32, 0xA33},
    {0xA35, 0xA36}, {0xA38, 0xA39}, {0xA59, 0xA5C}, {0xA5E, 0xA5E}, {0xA66, 0xA6F}, {0xA72, 0xA74},
    {0xA85, 0xA8D}, {0xA8F, 0xA91}, {0xA93, 0xAA8}, {0xAAA, 0xAB0}, {0xAB2, 0xAB3}, {0xAB5, 0xAB9},
    {0xABD, 0xABD}, {0xAD0, 0xAD0}, {0xAE0, 0xAE1}, {0xAE6, 0xAEF}, {0xAF9, 0xAF9}, {0xB05, 0xB0C},
    {0xB0F, 0xB10}, {0xB13, 0xB28}, {0xB2A, 0xB30}, {0xB32, 0xB33}, {0xB35, 0xB39}, {0xB3D, 0xB3D},
    {0xB5C, 0xB5D}, {0xB5F, 0xB61}, {0xB66, 0xB6F}, {0xB71, 0xB77}, {0xB83, 0xB83}, {0xB85, 0xB8A},
    {0xB8E, 0xB90}, {0xB92, 0xB95}, {0xB99, 0xB9A}, {0xB9C, 0xB9C}, {0xB9E, 0xB9F}, {0xBA3, 0xBA4},
    {0xBA8, 0xBAA}, {0xBAE, 0xBB9}, {0xBD0, 0xBD0}, {0xBE6, 0xBF2}, {0xC05, 0xC0C}, {0xC0E, 0xC10},
    {0xC12, 0xC28}, {0xC2A, 0xC39}, {0xC3D, 0xC3D}, {0xC58, 0xC5A}, {0xC5D, 0xC5D}, {0xC60, 0xC61},
    {0xC66, 0xC6F}, {0xC78, 0xC7E}, {0xC80, 0xC80}, {0xC85, 0xC8C}, {0xC8E, 0xC90}, {0xC92, 0xCA8},
    {0xCAA, 0xCB3}, {0xCB5, 0xCB9}, {0xCBD, 0xCBD}, {0xCDD, 0xCDE}, {0xCE0, 0xCE1}, {0xCE6, 0xCEF},
    {0xCF1, 0xCF2}, {0xD04, 0xD0C}, {0xD0E, 0xD10}, {0xD12, 0xD3A}, {0xD3D, 0xD3D}, {0xD4E, 0xD4E},
    {0xD54, 0xD56}, {0xD58, 0xD61}, {0xD66, 0xD78}, {0xD7A, 0xD7F}, {0xD85, 0xD96}, {0xD9A, 0xDB1},
    {0xDB3, 0xDBB}, {0xDBD, 0xDBD}, {0xDC0, 0xDC6}, {0xDE6, 0xDEF}, {0xE01, 0xE30}, {0xE32, 0xE33},
    {0xE40, 0xE46}, {0xE50, 0xE59}, {0xE81, 0xE82}, {0xE84, 0xE84}, {0xE86, 0xE8A}, {0xE8C, 0xEA3},
    {0xEA5, 0xEA5}, {0xEA7, 0xEB0}, {0xEB2, 0xEB3}, {0xEBD, 0xEBD}, {0xEC0, 0xEC4}, {0xEC6, 0xEC6},
    {0xED0, 0xED9}, {0xEDC, 0xEDF}, {0xF00, 0xF00}, {0xF20, 0xF33}, {0xF40, 0xF47}, {0xF49, 0xF6C},
    {0xF88, 0xF8C}, {0x1000, 0x102A}, {0x103F, 0x1049}, {0x1050, 0x1055}, {0x105A, 0x105D}, {0x1061, 0x1061},
    {0x1065, 0x1066}, {0x106E, 0x1070}, {0x1075, 0x1081}, {0x108E, 0x108E}, {0x1090, 0x1099},
    {0x10A0, 0x10C5}, {0x10C7, 0x10C7}, {0x10CD, 0x10CD}, {0x10D0, 0x10FA}, {0x10FC, 0x1248},
    {0x124A, 0x124D}, {0x1250, 0x1256}, {0x1258, 0x1258}, {0x125A, 0x125D}, {0x1260, 0x1288},
    {0x128A, 0x128D}, {0x1290, 0x12B0}, {0x12B2, 0x12B5}, {0x12B8, 0x12BE}, {0x12C0, 0x12C0},
    {0x12C2, 0x12C5}, {0x12C8, 0x12D6}, {0x12D8, 0x1310}, {0x1312, 0x1315}, {0x1318, 0x135A},
    {0x1369, 0x137C}, {0x1380, 0x138F}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1401, 0x166C},
    {0x166F, 0x167F}, {0x1681, 0x169A}, {0x16A0, 0x16EA}, {0x16EE, 0x16F8}, {0x1700, 0x1711},
    {0x171F, 0x1731}, {0x1740, 0x1751}, {0x1760, 0x176C}, {0x176E, 0x1770}, {0x1780, 0x17B3},
    {0x17D7, 0x17D7}, {0x17DC, 0x17DC}, {0x17E0, 0x17E9}, {0x17F0, 0x17F9}, {0x1810, 0x1819},
    {0x1820, 0x1878}, {0x1880, 0x1884}, {0x1887, 0x18A8}, {0x18AA, 0x18AA}, {0x18B0, 0x18F5},
    {0x1900, 0x191E}, {0x1946, 0x196D}, {0x1970, 0x1974}, {0x1980, 0x19AB}, {0x19B0, 0x19C9},
    {0x19D0, 0x19DA}, {0x1A00, 0x1A16}, {0x1A20, 0x1A54}, {0x1A80, 0x1A89}, {0x1A90, 0x1A99},
    {0x1AA7, 0x1AA7}, {0x1B05, 0x1B33}, {0x1B45, 0x1B4C}, {0x1B50, 0x1B59}, {0x1B83, 0x1BA0},
    {0x1BAE, 0x1BE5}, {0x1C00, 0x1C23}, {0x1C40, 0x1C49}, {0x1C4D, 0x1C7D}, {0x1C80, 0x1C88},
    {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1CE9, 0x1CEC}, {0x1CEE, 0x1CF3}, {0x1CF5, 0x1CF6},
    {0x1CFA, 0x1CFA}, {0x1D00, 0x1DBF}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4},
    {0x1FC6, 0x1FCC}, {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4},
    {0x1FF6, 0x1FFC}, {0x2070, 0x2071}, {0x2074, 0x2079}, {0x207F, 0x2089}, {0x2090, 0x209C},
    {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
    {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2139},
    {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2150, 0x2189}, {0x2460, 0x249B},
    {0x24EA, 0x24FF}, {0x2776, 0x2793}, {0x2C00, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0x2CFD, 0x2CFD}, {0x2D00, 0x2D25}, {0x2D27, 0x2D27}, {0x2D2D, 0x2D2D}, {0x2D30, 0x2D67},
    {0x2D6F, 0x2D6F}, {0x2D80, 0x2D96}, {0x2DA0, 0x2DA6}, {0x2DA8, 0x2DAE}, {0x2DB0, 0x2DB6},
    {0x2DB8, 0x2DBE}, {0x2DC0, 0x2DC6}, {0x2DC8, 0x2DCE}, {0x2DD0, 0x2DD6}, {0x2DD8, 0x2DDE},
    {0x2E2F, 0x2E2F}, {0x3005, 0x3007}, {0x3021, 0x3029}, {0x3031, 0x3035}, {0x3038, 0x303C},
    {0x3041, 0x3096}, {0x309D, 0x309F}, {0x30A1, 0x30FA}, {0x30FC, 0x30FF}, {0x3105, 0x312F},
    {0x3131, 0x318E}, {0x3192, 0x3195}, {0x31A0, 0x31BF}, {0x31F0, 0x31FF}, {0x3220, 0x3229},
    {0x3248, 0x324F}, {0x3251, 0x325F}, {0x3280, 0x3289}, {0x32B1, 0x32BF}, {0x3400, 0x4DBF},
    {0x4E00, 0xA48C}, {0xA4D0, 0xA4FD}, {0xA500, 0xA60C}, {0xA610, 0xA62B}, {0xA640, 0xA66E},
    {0xA67F, 0xA69D}, {0xA6A0, 0xA6EF}, {0xA717, 0xA71F}, {0xA722, 0xA788}, {0xA78B, 0xA7CA},
    {0xA7D0, 0xA7D1}, {0xA7D3, 0xA7D3}, {0xA7D5, 0xA7D9}, {0xA7F2, 0xA801}, {0xA803, 0xA805},
    {0xA807, 0xA80A}, {0xA80C, 0xA822}, {0xA830, 0xA835}, {0xA840, 0xA873}, {0xA882, 0xA8B3},
    {0xA8D0, 0xA8D9}, {0xA8F2, 0xA8F7}, {0xA8FB, 0xA8FB}, {0xA8FD, 0xA8FE}, {0xA900, 0xA925},
    {0xA930, 0xA946}, {0xA960, 0xA97C}, {0xA984, 0xA9B2}, {0xA9CF, 0xA9D9}, {0xA9E0, 0xA9E4},
    {0xA9E6, 0xA9FE}, {0xAA00, 0xAA28}, {0xAA40, 0xAA42}, {0xAA44, 0xAA4B}, {0xAA50, 0xAA59},
    {0xAA60, 0xAA76}, {0xAA7A, 0xAA7A}, {0xAA7E, 0xAAAF}, {0xAAB1, 0xAAB1}, {0xAAB5, 0xAAB6},
    {0xAAB9, 0xAABD}, {0xAAC0, 0xAAC0}, {0xAAC2, 0xAAC2}, {0xAADB, 0xAADD}, {0xAAE0, 0xAAEA},
    {0xAAF2, 0xAAF4}, {0xAB01, 0xAB06}, {0xAB09, 0xAB0E}, {0xAB11, 0xAB16}, {0xAB20, 0xAB26},
    {0xAB28, 0xAB2E}, {0xAB30, 0xAB5A}, {0xAB5C, 0xAB69}, {0xAB70, 0xABE2}, {0xABF0, 0xABF9},
    {0xAC00, 0xD7A3}, {0xD7B0, 0xD7C6}, {0xD7CB, 0xD7FB}, {0xF900, 0xFA6D}, {0xFA70, 0xFAD9},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFB1D, 0xFB1D}, {0xFB1F, 0xFB28}, {0xFB2A, 0xFB36},
    {0xFB38, 0xFB3C}, {0xFB3E, 0xFB3E}, {0xFB40, 0xFB41}, {0xFB43, 0xFB44}, {0xFB46, 0xFBB1},
    {0xFBD3, 0xFD3D}, {0xFD50, 0xFD8F}, {0xFD92, 0xFDC7}, {0xFDF0, 0xFDFB}, {0xFE70, 0xFE74},
    {0xFE76, 0xFEFC}, {0xFF10, 0xFF19}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0xFF66, 0xFFBE},
    {0xFFC2, 0xFFC7}, {0xFFCA, 0xFFCF}, {0xFFD2, 0xFFD7}, {0xFFDA, 0xFFDC}, {0x10000, 0x1000B},
    {0x1000D, 0x10026}, {0x10028, 0x1003A}, {0x1003C, 0x1003D}, {0x1003F, 0x1004D}, {0x10050, 0x1005D},
    {0x10080, 0x100FA}, {0x10107, 0x10133}, {0x10140, 0x10178}, {0x1018A, 0x1018B}, {0x10280, 0x1029C},
    {0x102A0, 0x102D0}, {0x102E1, 0x102FB}, {0x10300, 0x10323}, {0x1032D, 0x1034A}, {0x10350, 0x10375},
    {0x10380, 0x1039D}, {0x103A0, 0x103C3}, {0x103C8, 0x103CF}, {0x103D1, 0x103D5}, {0x10400, 0x1049D},
    {0x104A0, 0x104A9}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10500, 0x10527}, {0x10530, 0x10563},
    {0x10570, 0x1057A}, {0x1057C, 0x1058A}, {0x1058C, 0x10592}, {0x10594, 0x10595}, {0x10597, 0x105A1},
    {0x105A3, 0x105B1}, {0x105B3, 0x105B9}, {0x105BB, 0x105BC}, {0x10600, 0x10736}, {0x10740, 0x10755},
    {0x10760, 0x10767}, {0x10780, 0x10785}, {0x10787, 0x107B0}, {0x107B2, 0x107BA}, {0x10800, 0x10805},
    {0x10808, 0x10808}, {0x1080A, 0x10835}, {0x10837, 0x10838}, {0x1083C, 0x1083C}, {0x1083F, 0x10855},
    {0x10858, 0x10876}, {0x10879, 0x1089E}, {0x108A7, 0x108AF}, {0x108E0, 0x108F2}, {0x108F4, 0x108F5},
    {0x108FB, 0x1091B}, {0x10920, 0x10939}, {0x10980, 0x109B7}, {0x109BC, 0x109CF}, {0x109D2, 0x10A00},
    {0x10A10, 0x10A13}, {0x10A15, 0x10A17}, {0x10A19, 0x10A35}, {0x10A40, 0x10A48}, {0x10A60, 0x10A7E},
    {0x10A80, 0x10A9F}, {0x10AC0, 0x10AC7}, {0x10AC9, 0x10AE4}, {0x10AEB, 0x10AEF}, {0x10B00, 0x10B35},
    {0x10B40, 0x10B55}, {0x10B58, 0x10B72}, {0x10B78, 0x10B91}, {0x10BA9, 0x10BAF}, {0x10C00, 0x10C48},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x10CFA, 0x10D23}, {0x10D30, 0x10D39}, {0x10E60, 0x10E7E},
    {0x10E80, 0x10EA9}, {0x10EB0, 0x10EB1}, {0x10F00, 0x10F27}, {0x10F30, 0x10F45}, {0x10F51, 0x10F54},
    {0x10F70, 0x10F81}, {0x10FB0, 0x10FCB}, {0x10FE0, 0x10FF6}, {0x11003, 0x11037}, {0x11052, 0x1106F},
    {0x11071, 0x11072}, {0x11075, 0x11075}, {0x11083, 0x110AF}, {0x110D0, 0x110E8}, {0x110F0, 0x110F9},
    {0x11103, 0x11126}, {0x11136, 0x1113F}, {0x11144, 0x11144}, {0x11147, 0x11147}, {0x11150, 0x11172},
    {0x11176, 0x11176}, {0x11183, 0x111B2}, {0x111C1, 0x111C4}, {0x111D0, 0x111DA}, {0x111DC, 0x111DC},
    {0x111E1, 0x111F4}, {0x11200, 0x11211}, {0x11213, 0x1122B}, {0x11280, 0x11286}, {0x11288, 0x11288},
    {0x1128A, 0x1128D}, {0x1128F, 0x1129D}, {0x1129F, 0x112A8}, {0x112B0, 0x112DE}, {0x112F0, 0x112F9},
    {0x11305, 0x1130C}, {0x1130F, 0x11310}, {0x11313, 0x11328}, {0x1132A, 0x11330}, {0x11332, 0x11333},
    {0x11335, 0x11339}, {0x1133D, 0x1133D}, {0x11350, 0x11350}, {0x1135D, 0x11361}, {0x11400, 0x11434},
    {0x11447, 0x1144A}, {0x11450, 0x11459}, {0x1145F, 0x11461}, {0x11480, 0x114AF}, {0x114C4, 0x114C5},
    {0x114C7, 0x114C7}, {0x114D0, 0x114D9}, {0x11580, 0x115AE}, {0x115D8, 0x115DB}, {0x11600, 0x1162F},
    {0x11644, 0x11644}, {0x11650, 0x11659}, {0x11680, 0x116AA}, {0x116B8, 0x116B8}, {0x116C0, 0x116C9},
    {0x11700, 0x1171A}, {0x11730, 0x1173B}, {0x11740, 0x11746}, {0x11800, 0x1182B}, {0x118A0, 0x118F2},
    {0x118FF, 0x11906}, {0x11909, 0x11909}, {0x1190C, 0x11913}, {0x11915, 0x11916}, {0x11918, 0x1192F},
    {0x1193F, 0x1193F}, {0x11941, 0x11941}, {0x11950, 0x11959}, {0x119A0, 0x119A7}, {0x119AA, 0x119D0},
    {0x119E1, 0x119E1}, {0x119E3, 0x119E3}, {0x11A00, 0x11A00}, {0x11A0B, 0x11A32}, {0x11A3A, 0x11A3A},
    {0x11A50, 0x11A50}, {0x11A5C, 0x11A89}, {0x11A9D, 0x11A9D}, {0x11AB0, 0x11AF8}, {0x11C00, 0x11C08},
    {0x11C0A, 0x11C2E}, {0x11C40, 0x11C40}, {0x11C50, 0x11C6C}, {0x11C72, 0x11C8F}, {0x11D00, 0x11D06},
    {0x11D08, 0x11D09}, {0x11D0B, 0x11D30}, {0x11D46, 0x11D46}, {0x11D50, 0x11D59}, {0x11D60, 0x11D65},
    {0x11D67, 0x11D68}, {0x11D6A, 0x11D89}, {0x11D98, 0x11D98}, {0x11DA0, 0x11DA9}, {0x11EE0, 0x11EF2},
    {0x11FB0, 0x11FB0}, {0x11FC0, 0x11FD4}, {0x12000, 0x12399}, {0x12400, 0x1246E}, {0x12480, 0x12543},
    {0x12F90, 0x12FF0}, {0x13000, 0x1342E}, {0x14400, 0x14646}, {0x16800, 0x16A38}, {0x16A40, 0x16A5E},
    {0x16A60, 0x16A69}, {0x16A70, 0x16ABE}, {0x16AC0, 0x16AC9}, {0x16AD0, 0x16AED}, {0x16B00, 0x16B2F},
    {0x16B40, 0x16B43}, {0x16B50, 0x16B59}, {0x16B5B, 0x16B61}, {0x16B63, 0x16B77}, {0x16B7D, 0x16B8F},
    {0x16E40, 0x16E96}, {0x16F00, 0x16F4A}, {0x16F50, 0x16F50}, {0x16F93, 0x16F9F}, {0x16FE0, 0x16FE1},
    {0x16FE3, 0x16FE3}, {0x17000, 0x187F7}, {0x18800, 0x18CD5}, {0x18D00, 0x18D08}, {0x1AFF0, 0x1AFF3},
    {0x1AFF5, 0x1AFFB}, {0x1AFFD, 0x1AFFE}, {0x1B000, 0x1B122}, {0x1B150, 0x1B152}, {0x1B164, 0x1B167},
    {0x1B170, 0x1B2FB}, {0x1BC00, 0x1BC6A}, {0x1BC70, 0x1BC7C}, {0x1BC80, 0x1BC88}, {0x1BC90, 0x1BC99},
    {0x1D2E0, 0x1D2F3}, {0x1D360, 0x1D378}, {0x1D400, 0x1D454}, {0x1D456, 0x1D49C}, {0x1D49E, 0x1D49F},
    {0x1D4A2, 0x1D4A2}, {0x1D4A5, 0x1D4A6}, {0x1D4A9, 0x1D4AC}, {0x1D4AE, 0x1D4B9}, {0x1D4BB, 0x1D4BB},
    {0x1D4BD, 0x1D4C3}, {0x1D4C5, 0x1D505}, {0x1D507, 0x1D50A}, {0x1D50D, 0x1D514}, {0x1D516, 0x1D51C},
    {0x1D51E, 0x1D539}, {0x1D53B, 0x1D53E}, {0x1D540, 0x1D544}, {0x1D546, 0x1D546}, {0x1D54A, 0x1D550},
    {0x1D552, 0x1D6A5}, {0x1D6A8, 0x1D6C0}, {0x1D6C2, 0x1D6DA}, {0x1D6DC, 0x1D6FA}, {0x1D6FC, 0x1D714},
    {0x1D716, 0x1D734}, {0x1D736, 0x1D74E}, {0x1D750, 0x1D76E}, {0x1D770, 0x1D788}, {0x1D78A, 0x1D7A8},
    {0x1D7AA, 0x1D7C2}, {0x1D7C4, 0x1D7CB}, {0x1D7CE, 0x1D7FF}, {0x1DF00, 0x1DF1E}, {0x1E100, 0x1E12C},
    {0x1E137, 0x1E13D}, {0x1E140, 0x1E149}, {0x1E14E, 0x1E14E}, {0x1E290, 0x1E2AD}, {0x1E2C0, 0x1E2EB},
    {0x1E2F0, 0x1E2F9}, {0x1E7E0, 0x1E7E6}, {0x1E7E8, 0x1E7EB}, {0x1E7ED, 0x1E7EE}, {0x1E7F0, 0x1E7FE},
    {0x1E800, 0x1E8C4}, {0x1E8C7, 0x1E8CF}, {0x1E900, 0x1E943}, {0x1E94B, 0x1E94B}, {0x1E950, 0x1E959},
    {0x1EC71, 0x1ECAB}, {0x1ECAD, 0x1ECAF}, {0x1ECB1, 0x1ECB4}, {0x1ED01, 0x1ED2D}, {0x1ED2F, 0x1ED3D},
    {0x1EE00, 0x1EE03}, {0x1EE05, 0x1EE1F}, {0x1EE21, 0x1EE22}, {0x1EE24, 0x1EE24}, {0x1EE27, 0x1EE27},
    {0x1EE29, 0x1EE32}, {0x1EE34, 0x1EE37}, {0x1EE39, 0x1EE39}, {0x1EE3B, 0x1EE3B}, {0x1EE42, 0x1EE42},
    {0x1EE47, 0x1EE47}, {0x1EE49, 0x1EE49}, {0x1EE4B, 0x1EE4B}, {0x1EE4D, 0x1EE4F}, {0x1EE51, 0x1EE52},
    {0x1EE54, 0x1EE54}, {0x1EE57, 0x1EE57}, {0x1EE59, 0x1EE59}, {0x1EE5B, 0x1EE5B}, {0x1EE5D, 0x1EE5D},
    {0x1EE5F, 0x1EE5F}, {0x1EE61, 0x1EE62}, {0x1EE64, 0x1EE64}, {0x1EE67, 0x1EE6A}, {0x1EE6C, 0x1EE72},
    {0x1EE74, 0x1EE77}, {0x1EE79, 0x1EE7C}, {0x1EE7E, 0x1EE7E}, {0x1EE80, 0x1EE89}, {0x1EE8B, 0x1EE9B},
    {0x1EEA1, 0x1EEA3}, {0x1EEA5, 0x1EEA9}, {0x1EEAB, 0x1EEBB}, {0x1F100, 0x1F10C}, {0x1FBF0, 0x1FBF9},
    {0x20000, 0x2A6DF}, {0x2A700, 0x2B738}, {0x2B740, 0x2B81D}, {0x2B820, 0x2CEA1}, {0x2CEB0, 0x2EBE0},
    {0x2F800, 0x2FA1D}, {0x30000, 0x3134A},
};

template <size_t N>
bool in_ranges(const CodeRange (&table)[N], char32_t c) {
  size_t lo = 0, hi = N;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (c < table[mid].lo) {
      hi = mid;
    } else if (c > table[mid].hi) {
      lo = mid + 1;
    } else {
      return true;
    }
  }
  return false;
}

// Python's str.isspace(), which is also what `\s` matches in a str pattern.
bool py_space(char32_t c) {
  return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f ||
         c == 0x3000;
}
bool py_digit(char32_t c) { return c < 0x80 ? (c >= '0' && c <= '9') : in_ranges(kDigitRanges, c); }
bool py_word(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return in_ranges(kWordRanges, c);
}
bool ascii_digit(char32_t c) { return c >= '0' && c <= '9'; }
bool ascii_alpha(char32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
char32_t ascii_lower(char32_t c) { return (c >= 'A' && c <= 'Z') ? c + 32 : c; }

U32 strip(const U32& s) {
  size_t b = 0, e = s.size();
  while (b < e && py_space(s[b])) ++b;
  while (e > b && py_space(s[e - 1])) --e;
  return s.substr(b, e - b);
}
U32 lstrip(const U32& s) {
  size_t b = 0;
  while (b < s.size() && py_space(s[b])) ++b;
  return s.substr(b);
}
bool contains(const U32& s, const U32& part) { return s.find(part) != U32::npos; }

// str.replace: every non-overlapping occurrence, left to right.
U32 replace_all(const U32& s, const U32& from, const U32& to) {
  U32 out;
  size_t pos = 0;
  while (true) {
    const size_t at = s.find(from, pos);
    if (at == U32::npos) break;
    out.append(s, pos, at - pos);
    out += to;
    pos = at + from.size();
  }
  out.append(s, pos, U32::npos);
  return out;
}

std::vector<U32> split(const U32& s, const U32& sep) {
  std::vector<U32> parts;
  size_t pos = 0;
  while (true) {
    const size_t at = s.find(sep, pos);
    if (at == U32::npos) break;
    parts.push_back(s.substr(pos, at - pos));
    pos = at + sep.size();
  }
  parts.push_back(s.substr(pos));
  return parts;
}

// str.rfind(part, 0, end): the last start whose occurrence ends by `end`.
std::ptrdiff_t rfind_before(const U32& s, const U32& part, size_t end) {
  if (part.size() > end) return -1;
  const size_t at = s.rfind(part, end - part.size());
  return at == U32::npos ? -1 : static_cast<std::ptrdiff_t>(at);
}

// A reason the grader cannot reproduce math_verify on some input.
struct Unsupported : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// ------------------------------------------------------------- numbers ----

// Just enough arbitrary-precision integer arithmetic for exact rationals.
class BigInt {
 public:
  BigInt() = default;
  BigInt(long long v) {  // NOLINT: implicit on purpose, for literals
    neg_ = v < 0;
    unsigned long long m = neg_ ? 0ull - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
    while (m) {
      mag_.push_back(static_cast<uint32_t>(m));
      m >>= 32;
    }
  }
  static BigInt from_digits(const U32& digits) {
    BigInt r;
    for (char32_t c : digits) r = r * BigInt(10) + BigInt(static_cast<long long>(c - '0'));
    return r;
  }
  static BigInt pow10(int k) {
    BigInt r(1);
    for (int i = 0; i < k; ++i) r = r * BigInt(10);
    return r;
  }
  bool is_zero() const { return mag_.empty(); }
  bool negative() const { return neg_; }
  BigInt abs() const {
    BigInt r = *this;
    r.neg_ = false;
    return r;
  }
  BigInt operator-() const {
    BigInt r = *this;
    if (!r.is_zero()) r.neg_ = !r.neg_;
    return r;
  }
  bool is_odd() const { return !mag_.empty() && (mag_[0] & 1); }
  int bit_length() const {
    if (mag_.empty()) return 0;
    int bits = static_cast<int>(mag_.size() - 1) * 32;
    for (uint32_t top = mag_.back(); top; top >>= 1) ++bits;
    return bits;
  }
  BigInt shl(int bits) const {
    if (is_zero() || bits == 0) return *this;
    BigInt r;
    r.neg_ = neg_;
    const int words = bits / 32, rest = bits % 32;
    r.mag_.assign(words, 0);
    uint32_t carry = 0;
    for (uint32_t w : mag_) {
      r.mag_.push_back(rest ? (w << rest) | carry : w);
      carry = rest ? w >> (32 - rest) : 0;
    }
    if (carry) r.mag_.push_back(carry);
    return r;
  }

  friend int cmp(const BigInt& a, const BigInt& b) {
    if (a.neg_ != b.neg_) return a.neg_ ? -1 : 1;
    const int m = cmp_mag(a.mag_, b.mag_);
    return a.neg_ ? -m : m;
  }
  friend bool operator==(const BigInt& a, const BigInt& b) { return cmp(a, b) == 0; }
  friend bool operator<(const BigInt& a, const BigInt& b) { return cmp(a, b) < 0; }
  friend BigInt operator+(const BigInt& a, const BigInt& b) {
    if (a.neg_ == b.neg_) return make(a.neg_, add_mag(a.mag_, b.mag_));
    const int m = cmp_mag(a.mag_, b.mag_);
    if (m == 0) return BigInt();
    return m > 0 ? make(a.neg_, sub_mag(a.mag_, b.mag_)) : make(b.neg_, sub_mag(b.mag_, a.mag_));
  }
  friend BigInt operator-(const BigInt& a, const BigInt& b) { return a + (-b); }
  friend BigInt operator*(const BigInt& a, const BigInt& b) {
    std::vector<uint32_t> r(a.mag_.size() + b.mag_.size(), 0);
    for (size_t i = 0; i < a.mag_.size(); ++i) {
      uint64_t carry = 0;
      for (size_t j = 0; j < b.mag_.size(); ++j) {
        const uint64_t cur = r[i + j] + static_cast<uint64_t>(a.mag_[i]) * b.mag_[j] + carry;
        r[i + j] = static_cast<uint32_t>(cur);
        carry = cur >> 32;
      }
      size_t k = i + b.mag_.size();
      while (carry) {
        const uint64_t cur = r[k] + carry;
        r[k++] = static_cast<uint32_t>(cur);
        carry = cur >> 32;
      }
    }
    return make(a.neg_ != b.neg_, std::move(r));
  }
  // Truncating division of magnitudes: |a| = q |b| + r.
  static void divmod_abs(const BigInt& a, const BigInt& b, BigInt& q, BigInt& r) {
    if (b.is_zero()) throw std::logic_error("division by zero");
    q = BigInt();
    r = BigInt();
    const BigInt bb = b.abs();
    std::vector<uint32_t> qm(a.mag_.size(), 0);
    for (int bit = a.bit_length() - 1; bit >= 0; --bit) {
      r = r.shl(1);
      if ((a.mag_[bit / 32] >> (bit % 32)) & 1) {
        if (r.mag_.empty()) r.mag_.push_back(0);
        r.mag_[0] |= 1;
      }
      if (cmp_mag(r.mag_, bb.mag_) >= 0) {
        r = r - bb;
        qm[bit / 32] |= 1u << (bit % 32);
      }
    }
    q = make(false, std::move(qm));
  }
  std::string str() const {
    if (is_zero()) return "0";
    std::string digits;
    std::vector<uint32_t> m = mag_;
    while (!m.empty()) {
      uint64_t rem = 0;
      for (size_t i = m.size(); i-- > 0;) {
        const uint64_t cur = (rem << 32) | m[i];
        m[i] = static_cast<uint32_t>(cur / 10);
        rem = cur % 10;
      }
      digits.push_back(static_cast<char>('0' + rem));
      while (!m.empty() && m.back() == 0) m.pop_back();
    }
    if (neg_) digits.push_back('-');
    std::reverse(digits.begin(), digits.end());
    return digits;
  }

 private:
  static BigInt make(bool neg, std::vector<uint32_t> m) {
    while (!m.empty() && m.back() == 0) m.pop_back();
    BigInt r;
    r.mag_ = std::move(m);
    r.neg_ = neg && !r.mag_.empty();
    return r;
  }
  static int cmp_mag(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    if (a.size() != b.size()) return a.size() < b.size() ? -1 : 1;
    for (size_t i = a.size(); i-- > 0;)
      if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
    return 0;
  }
  static std::vector<uint32_t> add_mag(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    std::vector<uint32_t> r;
    uint64_t carry = 0;
    for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
      const uint64_t cur = carry + (i < a.size() ? a[i] : 0) + (i < b.size() ? b[i] : 0);
      r.push_back(static_cast<uint32_t>(cur));
      carry = cur >> 32;
    }
    if (carry) r.push_back(static_cast<uint32_t>(carry));
    return r;
  }
  // |a| >= |b|.
  static std::vector<uint32_t> sub_mag(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
    std::vector<uint32_t> r;
    int64_t borrow = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      int64_t cur = static_cast<int64_t>(a[i]) - borrow - (i < b.size() ? static_cast<int64_t>(b[i]) : 0);
      borrow = cur < 0;
      if (cur < 0) cur += (int64_t{1} << 32);
      r.push_back(static_cast<uint32_t>(cur));
    }
    return r;
  }

  bool neg_ = false;
  std::vector<uint32_t> mag_;  // little-endian 32-bit words, no leading zero words
};

BigInt gcd(BigInt a, BigInt b) {
  a = a.abs();
  b = b.abs();
  while (!b.is_zero()) {
    BigInt q, r;
    BigInt::divmod_abs(a, b, q, r);
    a = std::move(b);
    b = std::move(r);
  }
  return a;
}

// An exact rational, always reduced, denominator positive.
class Rat {
 public:
  Rat() : num_(0), den_(1) {}
  Rat(BigInt n, BigInt d = BigInt(1)) : num_(std::move(n)), den_(std::move(d)) { normalize(); }  // NOLINT
  const BigInt& num() const { return num_; }
  const BigInt& den() const { return den_; }
  bool is_zero() const { return num_.is_zero(); }
  bool is_integer() const { return den_ == BigInt(1); }
  int sign() const { return num_.is_zero() ? 0 : (num_.negative() ? -1 : 1); }
  Rat abs() const { return Rat(num_.abs(), den_); }
  friend Rat operator+(const Rat& a, const Rat& b) { return Rat(a.num_ * b.den_ + b.num_ * a.den_, a.den_ * b.den_); }
  friend Rat operator-(const Rat& a, const Rat& b) { return Rat(a.num_ * b.den_ - b.num_ * a.den_, a.den_ * b.den_); }
  friend Rat operator*(const Rat& a, const Rat& b) { return Rat(a.num_ * b.num_, a.den_ * b.den_); }
  friend Rat operator/(const Rat& a, const Rat& b) { return Rat(a.num_ * b.den_, a.den_ * b.num_); }
  friend int cmp(const Rat& a, const Rat& b) { return cmp(a.num_ * b.den_, b.num_ * a.den_); }
  friend bool operator==(const Rat& a, const Rat& b) { return a.num_ == b.num_ && a.den_ == b.den_; }
  friend bool operator!=(const Rat& a, const Rat& b) { return !(a == b); }
  std::string str() const { return is_integer() ? num_.str() : num_.str() + "/" + den_.str(); }

 private:
  void normalize() {
    if (den_.is_zero()) throw Unsupported("division by zero");
    if (den_.negative()) {
      num_ = -num_;
      den_ = -den_;
    }
    const BigInt g = gcd(num_, den_);
    if (!(g == BigInt(1)) && !g.is_zero()) {
      BigInt q, r;
      BigInt::divmod_abs(num_, g, q, r);
      num_ = num_.negative() ? -q : q;
      BigInt::divmod_abs(den_, g, q, r);
      den_ = q;
    }
  }
  BigInt num_, den_;
};

Rat pow10(int k) { return k >= 0 ? Rat(BigInt::pow10(k)) : Rat(BigInt(1), BigInt::pow10(-k)); }

// The integer nearest to x, ties to even (Python's round()).
BigInt round_half_even(const Rat& x) {
  BigInt q, r;
  BigInt::divmod_abs(x.num(), x.den(), q, r);
  const int c = cmp(r.shl(1), x.den());
  if (c > 0 || (c == 0 && q.is_odd())) q = q + BigInt(1);
  return x.sign() < 0 ? -q : q;
}

// x rounded to a binary float with a `bits`-bit mantissa, nearest with ties
// to even: what mpmath (SymPy's Float) stores.
Rat round_to_bits(const Rat& x, int bits) {
  if (x.is_zero()) return x;
  const Rat a = x.abs();
  // 2^(e) scaling such that the mantissa a / 2^e has `bits` bits.
  int e = a.num().bit_length() - a.den().bit_length() - bits;
  auto scaled = [&](int ex) { return ex >= 0 ? Rat(a.num(), a.den().shl(ex)) : Rat(a.num().shl(-ex), a.den()); };
  Rat m = scaled(e);
  const BigInt top = BigInt(1).shl(bits);
  while (cmp(m, Rat(top)) >= 0) m = scaled(++e);
  BigInt mant = round_half_even(m);
  if (mant == top) {
    mant = BigInt(1).shl(bits - 1);
    ++e;
  }
  Rat v = e >= 0 ? Rat(mant.shl(e)) : Rat(mant, BigInt(1).shl(-e));
  return x.sign() < 0 ? Rat(-v.num(), v.den()) : v;
}

// mpmath's decimal-digits-to-bits conversion.
int dps_to_prec(int dps) {
  const double bits = (dps + 1) * 3.3219280948873626;
  const double r = std::nearbyint(bits);
  return std::max(1, static_cast<int>(r));
}

// --------------------------------------------------------------- regex ----
//
// Python `re` semantics on code points, for the patterns in this file:
// literals and escapes, classes with ranges and \d \s \w, `.` (with or
// without DOTALL), ^ and $ (no MULTILINE: $ also matches before a final
// newline), \b, (?:...), (...), (?P<name>...), (?i:...), look-ahead and
// fixed-width look-behind, greedy and lazy *, +, ?, {m,n}. A pattern that
// uses anything else fails to compile (a bug here, not bad input).

struct CharClass {
  bool negate = false;
  bool digit = false, space = false, word = false;
  std::vector<std::pair<char32_t, char32_t>> ranges;
  bool matches(char32_t c) const {
    bool in = (digit && py_digit(c)) || (space && py_space(c)) || (word && py_word(c));
    for (size_t i = 0; !in && i < ranges.size(); ++i) in = c >= ranges[i].first && c <= ranges[i].second;
    return in != negate;
  }
};

// Case-insensitive comparison of a text character with an ASCII letter of
// the pattern, including the four non-ASCII letters Python's Unicode case
// folding pairs with ASCII ones.
bool fold_equal(char32_t text, char32_t pattern) {
  const char32_t p = ascii_lower(pattern);
  if (ascii_lower(text) == p && text < 0x80) return true;
  switch (p) {
    case 'i': return text == 0x130 || text == 0x131;
    case 's': return text == 0x17f;
    case 'k': return text == 0x212a;
    default: return false;
  }
}

struct Node {
  enum Kind { kCat, kAlt, kChar, kAny, kClass, kRepeat, kGroup, kLook, kBol, kEol, kWordB } kind = kCat;
  char32_t ch = 0;
  bool fold = false;    // kChar
  bool dotall = false;  // kAny
  bool negate = false;  // kLook, kWordB (\B)
  bool behind = false;  // kLook
  CharClass cls;
  std::vector<Node> kids;
  int min = 0, max = 0;  // kRepeat; max < 0: unbounded
  bool greedy = true;
  int group = -1;  // kGroup: capture number
};

enum class Op : uint8_t { Char, Any, AnyNoNL, Class, Split, Jmp, Save, Bol, Eol, WordB, Look, Match };

struct Inst {
  Op op;
  bool flag = false;  // Char: fold; WordB, Look: negate
  char32_t ch = 0;
  int x = 0, y = 0;  // Split: preferred, other; Jmp: target; Save: slot; Class/Look: index; Look y: behind
};

struct Program {
  std::vector<Inst> code;
  std::vector<CharClass> classes;
  std::vector<std::shared_ptr<const Program>> looks;
  std::vector<int> look_width;
  std::vector<int> memo_slot;  // per instruction: index among the join points, or -1
  int memo_points = 0;
};

class PatternParser {
 public:
  PatternParser(const U32& p, bool dotall) : p_(p), dotall_(dotall) {}
  Node parse() {
    Node n = alternation(false);
    if (i_ != p_.size()) bad("unbalanced parenthesis");
    return n;
  }
  int groups() const { return groups_; }
  std::vector<std::pair<std::string, int>> names() const { return names_; }

 private:
  [[noreturn]] void bad(const char* what) const {
    throw std::logic_error(std::string("bad pattern (") + what + ") at " + std::to_string(i_) + ": " + to_utf8(p_));
  }
  bool at(const char* s) const {
    size_t k = 0;
    for (; s[k]; ++k)
      if (i_ + k >= p_.size() || p_[i_ + k] != static_cast<char32_t>(s[k])) return false;
    return true;
  }
  Node alternation(bool fold) {
    Node first = sequence(fold);
    if (i_ >= p_.size() || p_[i_] != '|') return first;
    Node alt;
    alt.kind = Node::kAlt;
    alt.kids.push_back(std::move(first));
    while (i_ < p_.size() && p_[i_] == '|') {
      ++i_;
      alt.kids.push_back(sequence(fold));
    }
    return alt;
  }
  Node sequence(bool fold) {
    Node n;
    n.kind = Node::kCat;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') n.kids.push_back(repeat(fold));
    return n;
  }
  Node repeat(bool fold) {
    Node a = atom(fold);
    int mn = 0, mx = 0;
    if (!quantifier(mn, mx)) return a;
    Node r;
    r.kind = Node::kRepeat;
    r.min = mn;
    r.max = mx;
    if (i_ < p_.size() && p_[i_] == '?') {
      r.greedy = false;
      ++i_;
    }
    r.kids.push_back(std::move(a));
    return r;
  }
  bool quantifier(int& mn, int& mx) {
    if (i_ >= p_.size()) return false;
    const char32_t c = p_[i_];
    if (c == '*' || c == '+' || c == '?') {
      ++i_;
      mn = c == '+' ? 1 : 0;
      mx = c == '?' ? 1 : -1;
      return true;
    }
    if (c != '{') return false;
    // `{` that does not start a valid {m}, {m,}, {,n} or {m,n} is a literal.
    size_t j = i_ + 1;
    auto number = [&](int& v) {
      const size_t s = j;
      v = 0;
      while (j < p_.size() && ascii_digit(p_[j])) v = v * 10 + static_cast<int>(p_[j++] - '0');
      return j > s;
    };
    int a = 0, b = 0;
    const bool has_a = number(a);
    if (j < p_.size() && p_[j] == '}' && has_a) {
      mn = mx = a;
      i_ = j + 1;
      return true;
    }
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      const bool has_b = number(b);
      if (j < p_.size() && p_[j] == '}') {
        mn = has_a ? a : 0;
        mx = has_b ? b : -1;
        i_ = j + 1;
        return true;
      }
    }
    return false;
  }
  Node atom(bool fold) {
    const char32_t c = p_[i_++];
    Node n;
    switch (c) {
      case '(': return group(fold);
      case '[': n.kind = Node::kClass; n.cls = char_class(); return n;
      case '.': n.kind = Node::kAny; n.dotall = dotall_; return n;
      case '^': n.kind = Node::kBol; return n;
      case '$': n.kind = Node::kEol; return n;
      case '\\': return escape(fold);
      case '*': case '+': case '?': case ')': bad("misplaced operator");
      default: n.kind = Node::kChar; n.ch = c; n.fold = fold && ascii_alpha(c); return n;
    }
  }
  Node group(bool fold) {
    Node n;
    if (at("?:")) {
      i_ += 2;
      n = alternation(fold);
    } else if (at("?i:")) {
      i_ += 3;
      n = alternation(true);
    } else if (at("?P<")) {
      i_ += 3;
      std::string name;
      while (i_ < p_.size() && p_[i_] != '>') name.push_back(static_cast<char>(p_[i_++]));
      ++i_;
      n.kind = Node::kGroup;
      n.group = ++groups_;
      names_.emplace_back(name, n.group);
      n.kids.push_back(alternation(fold));
    } else if (at("?=") || at("?!") || at("?<=") || at("?<!")) {
      n.kind = Node::kLook;
      n.behind = p_[i_ + 1] == '<';
      i_ += n.behind ? 2 : 1;
      n.negate = p_[i_] == '!';
      ++i_;
      n.kids.push_back(alternation(fold));
    } else if (at("?")) {
      bad("unsupported group");
    } else {
      n.kind = Node::kGroup;
      n.group = ++groups_;
      n.kids.push_back(alternation(fold));
    }
    if (i_ >= p_.size() || p_[i_] != ')') bad("missing )");
    ++i_;
    return n;
  }
  char32_t escaped_char(char32_t e) {
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case 'f': return '\f';
      case 'v': return '\v';
      default:
        if (ascii_alpha(e) || ascii_digit(e)) bad("unsupported escape");
        return e;
    }
  }
  Node escape(bool fold) {
    if (i_ >= p_.size()) bad("trailing backslash");
    const char32_t e = p_[i_++];
    Node n;
    switch (e) {
      case 'd': case 's': case 'w': case 'D': case 'S': case 'W':
        n.kind = Node::kClass;
        n.cls.digit = e == 'd' || e == 'D';
        n.cls.space = e == 's' || e == 'S';
        n.cls.word = e == 'w' || e == 'W';
        n.cls.negate = e == 'D' || e == 'S' || e == 'W';
        return n;
      case 'b': case 'B':
        n.kind = Node::kWordB;
        n.negate = e == 'B';
        return n;
      default:
        n.kind = Node::kChar;
        n.ch = escaped_char(e);
        n.fold = fold && ascii_alpha(n.ch);
        return n;
    }
  }
  CharClass char_class() {
    CharClass cc;
    if (i_ < p_.size() && p_[i_] == '^') {
      cc.negate = true;
      ++i_;
    }
    bool first = true;
    while (true) {
      if (i_ >= p_.size()) bad("unterminated class");
      char32_t c = p_[i_++];
      if (c == ']' && !first) break;
      first = false;
      if (c == '\\') {
        const char32_t e = p_[i_++];
        if (e == 'd') { cc.digit = true; continue; }
        if (e == 's') { cc.space = true; continue; }
        if (e == 'w') { cc.word = true; continue; }
        c = escaped_char(e);
      }
      char32_t hi = c;
      if (i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        hi = p_[i_++];
        if (hi == '\\') hi = escaped_char(p_[i_++]);
      }
      cc.ranges.emplace_back(c, hi);
    }
    return cc;
  }

  const U32& p_;
  bool dotall_;
  size_t i_ = 0;
  int groups_ = 0;
  std::vector<std::pair<std::string, int>> names_;
};

int fixed_width(const Node& n) {
  switch (n.kind) {
    case Node::kChar: case Node::kAny: case Node::kClass: return 1;
    case Node::kBol: case Node::kEol: case Node::kWordB: case Node::kLook: return 0;
    case Node::kGroup: return fixed_width(n.kids[0]);
    case Node::kCat: {
      int w = 0;
      for (const Node& k : n.kids) w += fixed_width(k);
      return w;
    }
    case Node::kAlt: {
      const int w = fixed_width(n.kids[0]);
      for (const Node& k : n.kids)
        if (fixed_width(k) != w) throw std::logic_error("look-behind of varying width");
      return w;
    }
    case Node::kRepeat:
      if (n.min != n.max) throw std::logic_error("look-behind of varying width");
      return n.min * fixed_width(n.kids[0]);
  }
  return 0;
}

class Compiler {
 public:
  explicit Compiler(Program& p) : p_(p) {}
  void finish() {
    emit({Op::Match});
    // Backtracking revisits a (instruction, position) state only through a
    // jump or a split; remembering failed states there keeps every search
    // linear in the text.
    p_.memo_slot.assign(p_.code.size(), -1);
    auto mark = [&](int pc) {
      if (p_.memo_slot[pc] < 0) p_.memo_slot[pc] = p_.memo_points++;
    };
    for (const Inst& in : p_.code) {
      if (in.op == Op::Split) {
        mark(in.x);
        mark(in.y);
      } else if (in.op == Op::Jmp) {
        mark(in.x);
      }
    }
    mark(0);
  }
  void compile(const Node& n) {
    switch (n.kind) {
      case Node::kCat:
        for (const Node& k : n.kids) compile(k);
        break;
      case Node::kChar: emit({Op::Char, n.fold, n.ch}); break;
      case Node::kAny: emit({n.dotall ? Op::Any : Op::AnyNoNL}); break;
      case Node::kClass:
        p_.classes.push_back(n.cls);
        emit({Op::Class, false, 0, static_cast<int>(p_.classes.size() - 1)});
        break;
      case Node::kBol: emit({Op::Bol}); break;
      case Node::kEol: emit({Op::Eol}); break;
      case Node::kWordB: emit({Op::WordB, n.negate}); break;
      case Node::kAlt: {
        std::vector<int> exits;
        for (size_t k = 0; k + 1 < n.kids.size(); ++k) {
          const int split = emit({Op::Split});
          p_.code[split].x = split + 1;
          compile(n.kids[k]);
          exits.push_back(emit({Op::Jmp}));
          p_.code[split].y = here();
        }
        compile(n.kids.back());
        for (int j : exits) p_.code[j].x = here();
        break;
      }
      case Node::kRepeat: {
        const Node& body = n.kids[0];
        for (int i = 0; i < n.min; ++i) compile(body);
        if (n.max < 0) {
          const int split = emit({Op::Split});
          compile(body);
          emit({Op::Jmp, false, 0, split});
          prefer(split, split + 1, here(), n.greedy);
        } else {
          std::vector<int> splits;
          for (int i = n.min; i < n.max; ++i) {
            splits.push_back(emit({Op::Split}));
            compile(body);
          }
          for (int s : splits) prefer(s, s + 1, here(), n.greedy);
        }
        break;
      }
      case Node::kGroup:
        emit({Op::Save, false, 0, 2 * n.group});
        compile(n.kids[0]);
        emit({Op::Save, false, 0, 2 * n.group + 1});
        break;
      case Node::kLook: {
        auto sub = std::make_shared<Program>();
        Compiler c(*sub);
        c.compile(n.kids[0]);
        c.finish();
        p_.looks.push_back(sub);
        p_.look_width.push_back(n.behind ? fixed_width(n.kids[0]) : 0);
        emit({Op::Look, n.negate, 0, static_cast<int>(p_.looks.size() - 1), n.behind ? 1 : 0});
        break;
      }
    }
  }

 private:
  int here() const { return static_cast<int>(p_.code.size()); }
  int emit(Inst in) {
    p_.code.push_back(in);
    return here() - 1;
  }
  void prefer(int split, int body, int out, bool greedy) {
    p_.code[split].x = greedy ? body : out;
    p_.code[split].y = greedy ? out : body;
  }
  Program& p_;
};

// Runs a program at one position by backtracking, in the priority order of
// Python's engine, so the first match found is the one Python reports.
class Runner {
 public:
  Runner(const Program& p, const U32& text, bool memo) : p_(p), t_(text), memo_(memo) {
    if (memo_) bits_.assign((static_cast<size_t>(p_.memo_points) * (t_.size() + 1) + 63) / 64, 0);
  }
  // caps[0] must hold `start`; on success caps[1] is the end.
  bool run(size_t start, std::vector<int>& caps) {
    struct Job {
      int pc;
      size_t sp;
      int slot;  // >= 0: restore caps[slot] = old
      int old;
    };
    std::vector<Job> stack{{0, start, -1, 0}};
    const size_t n = t_.size();
    while (!stack.empty()) {
      const Job job = stack.back();
      stack.pop_back();
      if (job.slot >= 0) {
        caps[job.slot] = job.old;
        continue;
      }
      int pc = job.pc;
      size_t sp = job.sp;
      while (true) {
        if (memo_ && p_.memo_slot[pc] >= 0) {
          const size_t k = static_cast<size_t>(p_.memo_slot[pc]) * (n + 1) + sp;
          const uint64_t bit = uint64_t{1} << (k & 63);
          if (bits_[k >> 6] & bit) break;
          bits_[k >> 6] |= bit;
          touched_.push_back(k);
        }
        const Inst& in = p_.code[pc];
        bool ok = true;
        switch (in.op) {
          case Op::Char:
            ok = sp < n && (t_[sp] == in.ch || (in.flag && fold_equal(t_[sp], in.ch)));
            if (ok) ++sp;
            break;
          case Op::Any: ok = sp < n; if (ok) ++sp; break;
          case Op::AnyNoNL: ok = sp < n && t_[sp] != '\n'; if (ok) ++sp; break;
          case Op::Class: ok = sp < n && p_.classes[in.x].matches(t_[sp]); if (ok) ++sp; break;
          case Op::Split:
            stack.push_back({in.y, sp, -1, 0});
            pc = in.x;
            continue;
          case Op::Jmp: pc = in.x; continue;
          case Op::Save:
            stack.push_back({0, 0, in.x, caps[in.x]});
            caps[in.x] = static_cast<int>(sp);
            break;
          case Op::Bol: ok = sp == 0; break;
          case Op::Eol: ok = sp == n || (sp + 1 == n && t_[sp] == '\n'); break;
          case Op::WordB: {
            const bool before = sp > 0 && py_word(t_[sp - 1]);
            const bool after = sp < n && py_word(t_[sp]);
            ok = (before != after) != in.flag;
            break;
          }
          case Op::Look: {
            const Program& sub = *p_.looks[in.x];
            const auto w = static_cast<size_t>(p_.look_width[in.x]);
            bool found = false;
            if (!in.y || sp >= w) {
              Runner r(sub, t_, false);
              std::vector<int> sub_caps(2, -1);
              const size_t from = in.y ? sp - w : sp;
              sub_caps[0] = static_cast<int>(from);
              found = r.run(from, sub_caps);
            }
            ok = found != in.flag;
            break;
          }
          case Op::Match: caps[1] = static_cast<int>(sp); return true;
        }
        if (!ok) break;
        ++pc;
      }
    }
    return false;
  }
  // A match ends the search that states were remembered for.
  void forget() {
    for (size_t k : touched_) bits_[k >> 6] &= ~(uint64_t{1} << (k & 63));
    touched_.clear();
  }

 private:
  const Program& p_;
  const U32& t_;
  bool memo_;
  std::vector<uint64_t> bits_;
  std::vector<size_t> touched_;
};

class Regex;

class Match {
 public:
  Match(const Regex* re, const U32* text, std::vector<int> caps) : re_(re), text_(text), caps_(std::move(caps)) {}
  size_t start() const { return static_cast<size_t>(caps_[0]); }
  size_t end() const { return static_cast<size_t>(caps_[1]); }
  // The group's text; nullopt when it did not take part (Python's None).
  std::optional<U32> group(int g) const {
    if (caps_[2 * g] < 0 || caps_[2 * g + 1] < 0) return std::nullopt;
    return text_->substr(static_cast<size_t>(caps_[2 * g]), static_cast<size_t>(caps_[2 * g + 1] - caps_[2 * g]));
  }
  std::optional<U32> group(std::string_view name) const;
  const Regex& regex() const { return *re_; }

 private:
  const Regex* re_;
  const U32* text_;
  std::vector<int> caps_;
};

class Regex {
 public:
  Regex(std::string_view pattern, bool dotall = false) {
    const U32 p = from_utf8(pattern);
    PatternParser parser(p, dotall);
    const Node root = parser.parse();
    groups_ = parser.groups();
    names_ = parser.names();
    Compiler c(prog_);
    c.compile(root);
    c.finish();
  }
  // re.finditer: non-overlapping matches, left to right.
  std::vector<Match> find_all(const U32& text) const {
    std::vector<Match> out;
    Runner runner(prog_, text, true);
    size_t pos = 0;
    while (pos <= text.size()) {
      std::optional<std::vector<int>> hit;
      for (size_t s = pos; s <= text.size() && !hit; ++s) {
        std::vector<int> caps(2 * (groups_ + 1), -1);
        caps[0] = static_cast<int>(s);
        if (runner.run(s, caps)) hit = std::move(caps);
      }
      if (!hit) break;
      runner.forget();
      const size_t b = static_cast<size_t>((*hit)[0]), e = static_cast<size_t>((*hit)[1]);
      out.emplace_back(this, &text, std::move(*hit));
      pos = e > b ? e : e + 1;
    }
    return out;
  }
  bool search(const U32& text) const { return !find_all(text).empty(); }
  // re.sub with a function computing each replacement.
  U32 sub(const U32& text, const std::function<U32(const Match&)>& repl) const {
    U32 out;
    size_t last = 0;
    for (const Match& m : find_all(text)) {
      out.append(text, last, m.start() - last);
      out += repl(m);
      last = m.end();
    }
    out.append(text, last, U32::npos);
    return out;
  }
  U32 sub(const U32& text, const U32& with) const {
    return sub(text, [&](const Match&) { return with; });
  }
  int group_index(std::string_view name) const {
    for (const auto& [n, g] : names_)
      if (n == name) return g;
    return -1;
  }
  // Named groups in the order they appear in the pattern (Python's groupdict()).
  const std::vector<std::pair<std::string, int>>& names() const { return names_; }

 private:
  Program prog_;
  int groups_ = 0;
  std::vector<std::pair<std::string, int>> names_;
};

std::optional<U32> Match::group(std::string_view name) const {
  const int g = re_->group_index(name);
  if (g < 0) return std::nullopt;
  return group(g);
}

// ------------------------------------------------------- normalisation ----
//
// math_verify's LaTeX clean-up before parsing, step by step;
// the result is also the text math_verify compares as a string when
// parsing fails, so it is reproduced exactly, not just "well enough".

struct NormConfig {
  bool units = true;
  bool malformed_operators = false;
  bool nits = false;
  enum Boxed { kAll, kLast } boxed = kAll;
};

// The unit words math_verify strips from the end of an answer ("5 cm" ->
// "5"); they are regular-expression fragments, joined as alternatives.
const char* const kUnitWords[] = {
  "integerpoint", "feet", "sue", "digit", "pound", "meal", "edge", "student", "children ticket",
  "multiple", "east", "degree", "mph", "kmph", "ft", "m square", " m east", "sq m", "deg", "mile",
  "q .", "monkey", "prime", "ratio", "profit of rs", "rd", "o", "gm", "p . m", "lb", "tile", "per",
  "dm", "lt", "gain", "ab", "way", "west", "a .", "b .", "c .", "d .", "e .", "f .", "g .", "h .",
  "t", "h", "no change", "men", "soldier", "pie", "bc", "excess", "st", "inches", "noon", "cent",
  "by", "gal", "kmh", "c", "acre", "rise", "a . m", "th", "π r 2", "sq", "mark", "l", "toy",
  "coin", "sq . m", "gallon", "° f", "profit", "minw", "yr", "women", "am", "pm", "hr", "cu cm",
  "square", "v â € ™", "are", "rupee", "rounds", "cubic", "cc", "mtr", "s", "ohm", "number",
  "kmph", "day", "hour", "minute", "min", "second", "man", "woman", "sec", "cube", "mt", "sq inch",
  "mp", "∏ cm ³", "hectare", "more", "sec", "unit", "cu . m", "cm 2", "rs .", "rs", "kg", "g",
  "month", "km", "m", "cm", "mm", "apple", "liter", "loss", "yard", "pure", "year", "increase",
  "decrease", "d", "less", "Surface", "litre", "pi sq m", "s .", "metre", "meter", "inch",
};

const Regex& units_regex() {
  static const Regex re = [] {
    std::string alts;
    for (const char* w : kUnitWords) alts += (alts.empty() ? "" : "|") + std::string(w);
    return Regex(R"((\d|\}|\s)\s*(?:(?:)" + alts + R"()(?:s|es)?)\s*$)");
  }();
  return re;
}

// Boxed contents, found from the right: with `last`, only the last box and
// the boxes chained to it by short gaps or separators; otherwise every box.
U32 extract_boxed(const U32& text, bool last) {
  static const Regex separator(R"(\b(and|or)\b|,|;)");
  static const U32 kBoxed = U"\\boxed", kFbox = U"\\fbox";
  std::vector<U32> results;
  size_t current = text.size(), max_pos = text.size();
  std::optional<size_t> last_start;
  while (true) {
    const std::ptrdiff_t bi = rfind_before(text, kBoxed, current);
    const std::ptrdiff_t fi = rfind_before(text, kFbox, current);
    if (bi < 0 && fi < 0) break;
    const auto start = static_cast<size_t>(std::max(bi, fi));
    size_t next = start + (bi > fi ? 6 : 5);
    while (next < max_pos && py_space(text[next])) ++next;
    if (next >= max_pos) break;
    if (text[next] != '{') {
      if (results.empty()) results.push_back(text.substr(next));
      break;
    }
    std::optional<size_t> close;
    int depth = 1;
    for (size_t i = next; i + 1 < max_pos;) {
      ++i;
      if (text[i] == '{') {
        ++depth;
      } else if (text[i] == '}' && --depth == 0) {
        close = i;
        break;
      }
    }
    if (!close) {
      if (results.empty()) results.push_back(text.substr(next));
      break;
    }
    U32 content = strip(text.substr(next + 1, *close - next - 1));
    if (last && last_start) {
      const U32 prev = results.empty() ? U32() : results.back();
      const U32 between = *close + 1 < *last_start ? text.substr(*close + 1, *last_start - *close - 1) : U32();
      const bool chained =
          between.size() < 10 || (prev != content && between.size() < 70 && separator.search(between));
      if (!chained) break;
    }
    if (results.empty() || results.back() != content) results.push_back(std::move(content));
    last_start = start;
    max_pos = start;
    current = start;
  }
  if (results.empty()) return text;
  U32 out;
  for (size_t i = results.size(); i-- > 0;) {
    out += results[i];
    if (i) out += U',';
  }
  return out;
}

U32 fix_sqrt(const U32& text) {
  if (!contains(text, U"\\sqrt")) return text;
  const std::vector<U32> parts = split(text, U"\\sqrt");
  U32 out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const U32 s = lstrip(parts[i]);
    if (!s.empty() && s[0] != '{' && s[0] != '[') {
      out += U"\\sqrt{" + s.substr(0, 1) + U"}" + s.substr(1);
    } else {
      out += U"\\sqrt" + s;
    }
  }
  return out;
}

U32 fix_fracs(const U32& text) {
  const std::vector<U32> parts = split(text, U"\\frac");
  U32 out = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    const U32 s = lstrip(parts[i]);
    out += U"\\frac";
    if (!s.empty() && s[0] == '{') {
      out += s;
    } else if (s.size() < 2) {
      return text;
    } else if (s[1] != '{') {
      out += U"{" + s.substr(0, 1) + U"}{" + s.substr(1, 1) + U"}" + s.substr(2);
    } else {
      out += U"{" + s.substr(0, 1) + U"}" + s.substr(1);
    }
  }
  return out;
}

// "a/b" with a and b written as Python prints integers becomes \frac{a}{b}.
U32 fix_a_slash_b(const U32& text) {
  const std::vector<U32> parts = split(text, U"/");
  if (parts.size() != 2) return text;
  auto canonical_int = [](const U32& s) {
    size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
    if (i >= s.size() || !std::all_of(s.begin() + static_cast<std::ptrdiff_t>(i), s.end(), ascii_digit)) return false;
    if (s[i] == '0') return s.size() == 1;  // "0" only: not "-0", not "01"
    return true;
  };
  if (!canonical_int(parts[0]) || !canonical_int(parts[1])) return text;
  return U"\\frac{" + parts[0] + U"}{" + parts[1] + U"}";
}

U32 normalize_latex(U32 text, const NormConfig& cfg) {
  static const Regex left_re(
      R"(\\m?left(\\\{|\{|\\\||\||\[|\(|\\rbracl|\\lgroup|\\lbrace|\\lbrack|\\vert|\\lvert|)"
      R"(\\lceil|\\lfloor|\\vert|\\lvert|\\langle|\\llcorner|\\ulcorner))");
  static const Regex right_re(
      R"(\\m?right(\\\}|\}|\\\||\||\]|\)|\\rbrack|\\rgroup|\\rbrace|\\rbrack|\\vert|\\rvert|)"
      R"(\\rceil|\\rfloor|\\vert|\\rvert|\\rangle|\\lrcorner|\\urcorner))");
  static const Regex permutation_re(R"(\(([a-zA-Z0-9+\-*/\\ ]+?)\)_{([a-zA-Z0-9+\-*/\\ ]+?)})");
  static const Regex remove_re(
      R"(\\mathrm\{th\}|\\!\s*|\\text\s*\{\s*\}|\\\$|\$|(?<!\\)["']|\\displaystyle)");
  // One alternation, each alternative named after its replacement.
  static const std::vector<std::pair<std::string, U32>> replacements = {
      {R"(\\math(?:rm|it|bf))", U"\\text"},
      {R"(\\text(?:normal|bf|it|rm))", U"\\text"},
      {R"(\\(?:d|t|c)frac)", U"\\frac"},
      {R"(\s\.)", U" 0."},
      {R"(\{\.)", U"{0."},
      {R"(\~\=)", U"\\approx"},
      {R"(\s*\{\s*,\s*\})", U","},
      {R"((?<![a-zA-Z])(,?\s*(?:and|or))(?![a-zA-Z]))", U","},
      {R"((,?\s*\\text{\s*(?:and|or)\s*}))", U","},
      {R"((?<!\\)\\\s)", U" "},
      {R"(infinity)", U"\\infty"},
      {R"(,?(\\ldots))", U" "},
      {R"(\s*\bpercentage\b)", U"\\%"},
      {R"(\\text{percentage})", U"%"},
      {R"(\s*\bpercent\b)", U"\\%"},
      {R"(\\text{percent})", U"%"},
      {R"(\s*\bpct\b)", U"\\%"},
      {R"(\\text{pct})", U"%"},
      {R"(((?<!\\)inf(?!inity)))", U"\\infty"},
      {R"( sqrt)", U"\\sqrt"},
  };
  static const Regex replace_re = [] {
    std::string alts;
    for (size_t i = 0; i < replacements.size(); ++i)
      alts += (i ? "|" : "") + std::string("(?P<r") + std::to_string(i) + ">" + replacements[i].first + ")";
    return Regex(alts);
  }();
  static const Regex slash_fix_re(R"(\\\\(?=[a-zA-Z]))");
  static const Regex unit_superscript_re(R"((\\(?:text|mbox){.*?})(\^\d|\{\^\d\})?$)");
  static const std::vector<std::pair<Regex, U32>> malformed = [] {
    std::vector<std::pair<Regex, U32>> v;
    // The replacement's \1 and \2 are spelled $1 and $2 here.
    v.emplace_back(Regex(R"(\^\s?\((.*?)\))"), U"^{$1}");
    v.emplace_back(Regex(R"(sqrt\s?\((.*?)\))"), U"\\sqrt{$1}");
    v.emplace_back(Regex(R"(\\frac\s?(\d)\s?(\d+))"), U"\\frac{$1}{$2}");
    v.emplace_back(Regex(R"(\\log_\s?(\d)\s?(\d+))"), U"\\log_{$1}{$2}");
    v.emplace_back(Regex(R"(\\frac\s?{(.*?)}\s?(\d))"), U"\\frac{$1}{$2}");
    v.emplace_back(Regex(R"(\\frac\s?(\d)\s?{(.*?)})"), U"\\frac{$1}{$2}");
    v.emplace_back(Regex(R"(\\sqrt\s?(\d))"), U"\\sqrt{$1}");
    return v;
  }();
  auto group_or_empty = [](const Match& m, int g) { return m.group(g).value_or(U32()); };

  text = extract_boxed(text, cfg.boxed == NormConfig::kLast);

  text = replace_all(text, U"\\mathrm{T}", U"T");
  text = replace_all(text, U"\\mathrm{d}", U"d");
  text = replace_all(text, U"{\\rm d}", U"d");
  text = replace_all(text, U"\\left[\\begin{matrix}", U"\\begin{bmatrix}");
  text = replace_all(text, U"\\end{matrix}\\right]", U"\\end{bmatrix}");
  text = left_re.sub(text, [&](const Match& m) { return group_or_empty(m, 1); });
  text = right_re.sub(text, [&](const Match& m) { return group_or_empty(m, 1); });
  text = permutation_re.sub(text, [&](const Match& m) {
    const U32 a = group_or_empty(m, 1), b = group_or_empty(m, 2);
    return U"\\frac{(" + a + U")!}{((" + a + U")-(" + b + U"))!}";
  });
  text = remove_re.sub(text, U32());
  static const std::vector<int> replace_groups = [] {
    std::vector<int> g;
    for (size_t i = 0; i < replacements.size(); ++i)
      g.push_back(replace_re.group_index(std::string("r").append(std::to_string(i))));
    return g;
  }();
  text = replace_re.sub(text, [&](const Match& m) {
    for (size_t i = 0; i < replacements.size(); ++i)
      if (m.group(replace_groups[i])) return replacements[i].second;
    return U32();
  });
  text = replace_all(text, U"\n", U" ");
  text = replace_all(text, U"\t", U" ");
  if (!contains(text, U"matrix")) text = slash_fix_re.sub(text, U"\\");

  if (cfg.units) {
    const U32 no_text_unit = strip(unit_superscript_re.sub(text, U32()));
    if (!no_text_unit.empty() && no_text_unit != text) text = no_text_unit;
    for (int round = 0; round < 2; ++round) {
      const U32 no_unit = units_regex().sub(text, [&](const Match& m) { return group_or_empty(m, 1); });
      if (!no_unit.empty() && no_unit != text) text = no_unit;
    }
  }
  if (cfg.nits) {
    if (!text.empty() && text[0] == '.') text = U"0" + text;
    if (text == U"0.5") text = U"\\frac{1}{2}";
  }
  if (cfg.malformed_operators) {
    for (const auto& [re, templ] : malformed) {
      text = re.sub(text, [&](const Match& m) {
        U32 out;
        for (size_t i = 0; i < templ.size(); ++i) {
          if (templ[i] == '$' && i + 1 < templ.size()) {
            out += group_or_empty(m, static_cast<int>(templ[++i] - '0'));
          } else {
            out.push_back(templ[i]);
          }
        }
        return out;
      });
    }
    text = replace_all(text, U" sqrt", U"\\sqrt");
    text = fix_sqrt(text);
    text = fix_fracs(text);
    text = fix_a_slash_b(text);
  }
  return strip(text);
}

// ------------------------------------------------------------ values ----
//
// The parsed answers trlx understands, with the SymPy type each would have,
// since math_verify's comparison depends on it (an Integer never equals a
// Float under SymPy's ==, a percentage is a product 50*(1/100), a plain-text
// "1/2" stays an unevaluated quotient, ...).

struct Num {
  enum Base { kInt, kRat, kFloat } base = kInt;
  Rat value;              // as written; for a percentage, the number before /100
  bool pct = false;       // n * (1/100), unevaluated
  bool quotient = false;  // plain-text a/b: an unevaluated product a * b^-1
};

Num make_exact(const Rat& r) {
  Num n;
  n.base = r.is_integer() ? Num::kInt : Num::kRat;
  n.value = r;
  return n;
}

Num make_float(const Rat& r) {
  Num n;
  n.base = Num::kFloat;
  n.value = r;
  return n;
}

Rat effective(const Num& n) { return n.pct ? n.value / Rat(BigInt(100)) : n.value; }

std::string describe(const Num& n) {
  std::string s = n.base == Num::kInt ? "int " : n.base == Num::kRat ? "rat " : "float ";
  if (n.quotient) s = "quotient ";
  if (n.pct) s = "pct " + s;
  return s + n.value.str();
}

// A decimal literal as SymPy reads it: a Float with 53-bit precision when it
// has at most 15 significant digits (more would raise SymPy's precision,
// which is not reproduced).
Rat decimal_value(const U32& int_digits, const U32& frac_digits) {
  U32 all = int_digits + frac_digits;
  size_t first = 0;
  while (first + 1 < all.size() && all[first] == '0') ++first;
  if (all.size() - first > 15) throw Unsupported("a decimal with more than 15 significant digits");
  return Rat(BigInt::from_digits(all), BigInt::pow10(static_cast<int>(frac_digits.size())));
}

bool all_ascii_digits(const U32& s) { return !s.empty() && std::all_of(s.begin(), s.end(), ascii_digit); }

// SymPy's Expr.round(6) on a number, as math_verify's numeric comparison
// applies it when either side is a Float: the value, whether it is a Float,
// and its binary precision (Floats of different precision are unequal).
struct Rounded {
  bool is_float = false;
  Rat value;
  int prec = 0;
  bool operator==(const Rounded& o) const {
    return is_float == o.is_float && value == o.value && (!is_float || prec == o.prec);
  }
};

Rounded round6(bool is_float, const Rat& x) {
  if (x.is_zero()) return {is_float, Rat(), is_float ? 53 : 0};
  if (!is_float && x.is_integer()) return {false, x, 0};
  const Rat a = x.abs();
  int mag = static_cast<int>(a.num().str().size()) - static_cast<int>(a.den().str().size());
  while (cmp(a, pow10(mag)) >= 0) ++mag;
  while (cmp(a, pow10(mag - 1)) < 0) --mag;
  int allow = mag + 6;
  int dps = 15;
  if (is_float) {
    allow = std::min(allow, dps);
  } else {
    dps = std::max(15, allow);
  }
  const int shift = dps - mag;
  const BigInt xi = round_half_even(a * pow10(shift));
  BigInt xr = xi;
  if (shift > 6) xr = round_half_even(Rat(xi) / pow10(shift - 6)) * BigInt::pow10(shift - 6);
  Rat rv = Rat(xr) / pow10(shift);
  if (x.sign() < 0) rv = Rat(-rv.num(), rv.den());
  if (rv.is_integer()) return {true, round_to_bits(rv, dps_to_prec(dps)), dps_to_prec(dps)};
  if (allow == 0 && cmp(rv, x) > 0) allow = 1;
  if (allow < 0) throw Unsupported("rounding below SymPy's precision");
  const int prec = dps_to_prec(allow);
  return {true, round_to_bits(rv, prec), prec};
}

// The value SymPy computes in floating point when a Float takes part: a
// Float holds its decimal rounded to 53 bits, and a percentage of a Float is
// that times 1/100 (itself rounded), rounded again.
Rat binary_value(const Num& n) {
  if (n.base != Num::kFloat) return round_to_bits(effective(n), 53);
  const Rat v = round_to_bits(n.value, 53);
  if (!n.pct) return v;
  return round_to_bits(v * round_to_bits(Rat(BigInt(1), BigInt(100)), 53), 53);
}

// math_verify's equality of two numbers (gold first): structural
// equality, then its numeric comparison, then simplify(gold - answer) == 0.
bool numbers_equal(const Num& g, const Num& p) {
  if (!g.quotient && !p.quotient && g.base == p.base && g.pct == p.pct && g.value == p.value) return true;
  const bool any_float = g.base == Num::kFloat || p.base == Num::kFloat;
  if (any_float) {
    // Both sides evaluated, then rounded to 6 decimals.
    const bool gf = g.base == Num::kFloat, pf = p.base == Num::kFloat;
    if (round6(gf, effective(g)) == round6(pf, effective(p))) return true;
    return binary_value(g) == binary_value(p);
  }
  if (g.base == Num::kInt && p.base == Num::kInt && !g.quotient && !p.quotient) {
    // Integers and integer percentages compare by the written integer
    // (9% equals 9), and then by value (100% equals 1).
    if (g.value == p.value) return true;
  }
  return effective(g) == effective(p);
}

// What one extraction yields.
struct Value {
  enum Kind {
    kNone,         // math_verify gets no expression (its parse fails)
    kNum,          // a number (for `x = 5`, the right-hand side)
    kSet,          // several numbers (a FiniteSet)
    kUnsupported,  // something trlx does not reproduce
  } kind = kNone;
  Num num;
  bool assignment = false;  // kNum from `x = <number>`
  std::vector<Num> set;
  std::string why;  // kUnsupported
};

Value unsupported(std::string why) {
  Value v;
  v.kind = Value::kUnsupported;
  v.why = std::move(why);
  return v;
}

// ------------------------------------------------------- LaTeX parser ----
//
// The part of latex2sympy's grammar that numbers use: optional signs, a
// number, a percentage (`50\%`, `50 %`), \frac{a}{b} (\dfrac, \tfrac, \cfrac)
// of integers, a/b of integers, `1,000`-style thousands, and `x = <that>`.
// Whitespace and spacing commands are skipped as its lexer does.

struct Token {
  enum Kind {
    kNumber, kPercent, kSign, kDiv, kFrac, kOpen, kClose, kComma, kAssign, kLetter,
    kPeriod,  // a '.' outside a number, which no rule of the grammar accepts
    kDegree,  // ^\circ and its spellings: a no-op after a number
  } kind;
  U32 text;  // number digits, sign, letter
};

std::vector<Token> lex_latex(const U32& s) {
  std::vector<Token> out;
  size_t i = 0;
  const size_t n = s.size();
  auto ws = [](char32_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; };
  while (i < n) {
    const char32_t c = s[i];
    if (ws(c)) {
      ++i;
    } else if (ascii_digit(c) || (c == '.' && i + 1 < n && ascii_digit(s[i + 1]))) {
      size_t j = i;
      while (j < n && ascii_digit(s[j])) ++j;
      if (j + 1 < n && s[j] == '.' && ascii_digit(s[j + 1])) {
        ++j;
        while (j < n && ascii_digit(s[j])) ++j;
      }
      Token t{Token::kNumber, s.substr(i, j - i)};
      if (j < n && s[j] == 'E') throw Unsupported("E-notation");
      // A percentage is one token: the number, at most one blank, the sign.
      size_t k = j;
      if (k < n && ws(s[k])) ++k;
      if (k < n && s[k] == '%') {
        t.kind = Token::kPercent;
        j = k + 1;
      } else if (k + 1 < n && s[k] == '\\' && s[k + 1] == '%') {
        t.kind = Token::kPercent;
        j = k + 2;
      }
      out.push_back(std::move(t));
      i = j;
    } else if (c == '+' || c == '-' || c == U'\u2212') {
      out.push_back({Token::kSign, U32(1, c == '+' ? U'+' : U'-')});
      ++i;
    } else if (c == '.') {
      out.push_back({Token::kPeriod, {}});
      ++i;
    } else if (c == '^') {
      // The longest spelling wins, as in the grammar's lexer.
      static const std::vector<U32> degrees = {U"^{\\circle}", U"^{\\degree}", U"^{\\circ}", U"^{\u00b0}",
                                               U"^\\circle",   U"^\\degree",   U"^\\circ",   U"^\u00b0"};
      size_t len = 0;
      for (const U32& d : degrees)
        if (s.compare(i, d.size(), d) == 0) {
          len = d.size();
          break;
        }
      if (len == 0) throw Unsupported("a power");
      out.push_back({Token::kDegree, {}});
      i += len;
    } else if (c == '/') {
      out.push_back({Token::kDiv, {}});
      ++i;
    } else if (c == '{' || c == '}') {
      out.push_back({c == '{' ? Token::kOpen : Token::kClose, {}});
      ++i;
    } else if (c == ',') {
      out.push_back({Token::kComma, {}});
      ++i;
    } else if (c == '=') {
      out.push_back({Token::kAssign, {}});
      ++i;
    } else if (c == '\\') {
      size_t j = i + 1;
      while (j < n && ascii_alpha(s[j])) ++j;
      const U32 cmd = s.substr(i + 1, j - i - 1);
      if (cmd.empty()) {
        // Spacing commands \, \: \; \! and an escaped dollar are skipped.
        const char32_t next = i + 1 < n ? s[i + 1] : 0;
        if (next == ',' || next == ':' || next == ';' || next == '!' || next == '$') {
          i += 2;
          continue;
        }
        throw Unsupported("a LaTeX symbol");
      }
      if (cmd == U"frac" || cmd == U"dfrac" || cmd == U"tfrac" || cmd == U"cfrac") {
        out.push_back({Token::kFrac, {}});
      } else if (cmd != U"quad" && cmd != U"qquad" && cmd != U"thinspace" && cmd != U"medspace" &&
                 cmd != U"thickspace" && cmd != U"negthinspace" && cmd != U"negmedspace" && cmd != U"negthickspace") {
        throw Unsupported("the LaTeX command \\" + to_utf8(cmd));
      }
      i = j;
    } else if (ascii_alpha(c)) {
      out.push_back({Token::kLetter, U32(1, c)});
      ++i;
    } else {
      throw Unsupported("the character '" + to_utf8(U32(1, c)) + "'");
    }
  }
  return out;
}

class LatexParser {
 public:
  explicit LatexParser(std::vector<Token> t) : t_(std::move(t)) {}
  // [letter =] signed-term [/ signed-term]
  Value parse() {
    Value v;
    v.kind = Value::kNum;
    if (t_.size() >= 2 && t_[0].kind == Token::kLetter && t_[1].kind == Token::kAssign) {
      // `e` and `E` are the constant and the exponent marker, not variables.
      if (t_[0].text[0] == 'e' || t_[0].text[0] == 'E') throw Unsupported("an equation in e");
      v.assignment = true;
      i_ = 2;
    }
    Num left = signed_term();
    if (i_ < t_.size() && t_[i_].kind == Token::kDiv) {
      ++i_;
      const Num right = signed_term();
      if (left.base != Num::kInt || right.base != Num::kInt || left.pct || right.pct)
        throw Unsupported("a quotient of non-integers");
      left = make_exact(left.value / right.value);
    }
    if (i_ != t_.size()) throw Unsupported("more than one number");
    v.num = left;
    return v;
  }

 private:
  Num signed_term() {
    bool negative = false;
    while (i_ < t_.size() && t_[i_].kind == Token::kSign) negative ^= t_[i_++].text[0] == '-';
    Num n = juxtaposed();
    if (negative) {
      if (n.pct) throw Unsupported("a negative percentage");
      n.value = Rat(-n.value.num(), n.value.den());
    }
    return n;
  }
  // Terms written side by side: latex2sympy reads an integer followed by a
  // positive rational as a mixed number (2 \frac{1}{2} is 5/2, and even
  // "2 3" is 5); any other juxtaposition is a product.
  Num juxtaposed() {
    std::vector<Num> items{degrees(term())};
    while (i_ < t_.size() && (t_[i_].kind == Token::kNumber || t_[i_].kind == Token::kPercent ||
                              t_[i_].kind == Token::kFrac))
      items.push_back(degrees(term()));
    Num v = items.back();
    for (size_t k = items.size() - 1; k-- > 0;) {
      const Num& whole = items[k];
      if (whole.base != Num::kInt || whole.pct || v.pct || v.base == Num::kFloat || v.value.sign() <= 0)
        throw Unsupported("a product");
      const Rat w = whole.value * Rat(v.value.den());
      const Rat part(v.value.num());
      v = make_exact((whole.value.sign() < 0 ? w - part : w + part) / Rat(v.value.den()));
    }
    return v;
  }
  // Degree marks leave the number as it is.
  Num degrees(Num n) {
    while (i_ < t_.size() && t_[i_].kind == Token::kDegree) ++i_;
    return n;
  }
  Num term() {
    if (i_ >= t_.size()) throw Unsupported("a missing number");
    const Token& t = t_[i_++];
    if (t.kind == Token::kNumber || t.kind == Token::kPercent) {
      Num n = number(t.text);
      n.pct = t.kind == Token::kPercent;
      return n;
    }
    if (t.kind == Token::kFrac) {
      const Num top = braced_integer();
      const Num bottom = braced_integer();
      return make_exact(top.value / bottom.value);
    }
    throw Unsupported("an expression");
  }
  Num braced_integer() {
    if (i_ >= t_.size() || t_[i_].kind != Token::kOpen) throw Unsupported("a \\frac without braces");
    ++i_;
    const Num n = signed_term();
    if (n.base != Num::kInt || n.pct) throw Unsupported("a \\frac of non-integers");
    if (i_ >= t_.size() || t_[i_].kind != Token::kClose) throw Unsupported("a \\frac of an expression");
    ++i_;
    return n;
  }
  static Num number(const U32& text) {
    const size_t dot = text.find('.');
    if (dot == U32::npos) return make_exact(Rat(BigInt::from_digits(text)));
    return make_float(decimal_value(text.substr(0, dot), text.substr(dot + 1)));
  }

  std::vector<Token> t_;
  size_t i_ = 0;
};

// latex2sympy on a normalised string, for the forms above.
Value parse_latex(const U32& s) {
  if (s.empty()) return {};  // nothing to parse: latex2sympy fails
  const std::vector<Token> tokens = lex_latex(s);
  // Syntax errors latex2sympy certainly raises; with an '=' it would retry
  // on the last equation, which is not reproduced.
  if (s.find('=') == U32::npos) {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (tokens[i].kind == Token::kPeriod) return {};
      if (tokens[i].kind == Token::kFrac && (i + 1 == tokens.size() || tokens[i + 1].kind != Token::kOpen)) return {};
    }
  }
  const bool has_comma =
      std::any_of(tokens.begin(), tokens.end(), [](const Token& t) { return t.kind == Token::kComma; });
  if (has_comma) {
    // latex2sympy reads "1,000" (the whole string) as one number, and other
    // comma-separated numbers as a set.
    static const Regex thousands(R"(^\s*-?\d{1,3}(,\d{3})+(\.\d+)?\s*$)");
    if (!thousands.search(s)) {
      Value set;
      set.kind = Value::kSet;
      std::vector<Token> part;
      for (size_t i = 0; i <= tokens.size(); ++i) {
        if (i < tokens.size() && tokens[i].kind != Token::kComma) {
          part.push_back(tokens[i]);
          continue;
        }
        const Value v = LatexParser(std::move(part)).parse();
        if (v.assignment) throw Unsupported("a list with an equation");
        set.set.push_back(v.num);
        part.clear();
      }
      return set;
    }
    U32 t = s;
    if (!t.empty() && t[0] == '0') t = replace_all(t, U",", U".");
    U32 digits;
    for (char32_t c : t)
      if (c != ',' && c != ' ') digits.push_back(c);
    size_t z = 0;
    while (z < digits.size() && digits[z] == '0') ++z;
    digits = digits.substr(z);
    if (digits.empty()) digits = U"0";
    const bool negative = digits[0] == '-';
    const U32 body = negative ? digits.substr(1) : digits;
    const size_t dot = body.find('.');
    const U32 int_part = body.substr(0, dot == U32::npos ? body.size() : dot);
    if (!int_part.empty() && (!all_ascii_digits(int_part) || (int_part[0] == '0' && int_part.size() > 1)))
      throw Unsupported("a number SymPy rejects");
    Value v;
    v.kind = Value::kNum;
    if (dot == U32::npos) {
      v.num = make_exact(Rat(BigInt::from_digits(int_part)));
    } else {
      v.num = make_float(decimal_value(int_part, body.substr(dot + 1)));
    }
    if (negative) v.num.value = Rat(-v.num.value.num(), v.num.value.den());
    return v;
  }
  return LatexParser(tokens).parse();
}

// ---------------------------------------------------------- extraction ----
//
// math_verify's search: every pattern carries a priority; the patterns of
// the best priority that matches at all decide. Within a priority, matches
// are tried from the one ending last (then starting first).

// One LaTeX environment ($...$, $$...$$, \[...\], \(...\), [ ... ] between
// blanks, or a bare \frac of two numbers), optionally followed by a percent
// sign; `boxed` requires a \boxed{} inside (and drops the bare \frac).
std::string latex_env(const std::string& prefix, bool boxed) {
  const std::string dollar_display = R"((?:[^$]|\$(?!\$)))";
  const std::string bracket_display = R"((?:[^\\]|\\(?!\])))";
  const std::string dollar_inline = R"((?:\\[$]|[^\n$]))";
  const std::string paren_inline = R"((?:[^\\\n]|\\(?!\))))";
  const std::string bracket_inline = R"([^\n\]\[])";
  auto content = [&](const std::string& x) {
    return boxed ? x + "*?\\\\boxed{" + x + "+?}" + x + "*?" : x + "+?";
  };
  auto named = [&](const std::string& name, const std::string& body) {
    return "(?P<" + prefix + name + ">" + body + ")";
  };
  std::vector<std::string> alts = {
      R"((?<!\\)\$\$)" + named("latexDisplayDollar", content(dollar_display)) + R"((?<!\\)\$\$)",
      R"((?<!\\)\\\[)" + named("latexDisplayBracket", content(bracket_display)) + R"((?<!\\)\\\])",
      R"((?<!\\|\d)\$)" + named("latexInlineDollar", content(dollar_inline)) + R"((?<!\\)\$)",
      R"((?<!\\)\\\()" + named("latexInlineParenthesis", content(paren_inline)) + R"((?<!\\)\\\))",
      R"(\s\[)" + named("latexInlineBracket", content(bracket_inline)) + R"(\]\s)",
  };
  if (!boxed) {
    const std::string number = R"(-?\d+(?:[.,]\d+)?)";
    alts.push_back(named("latexFraction", "-?\\\\frac{" + number + "}{" + number + "}"));
  }
  std::string joined;
  for (size_t i = 0; i < alts.size(); ++i) joined += (i ? "|" : "") + alts[i];
  return "(?:(?:" + joined + R"()\s*)" + named("percent", R"((?:\\?%|[Pp]ercent|[Pp]ercentage|[Pp]ct))") + "?)";
}

// Up to six environments joined by "," / "and" / "or".
std::string latex_envs(bool boxed) {
  std::string re = latex_env("first_", boxed);
  for (int i = 1; i <= 5; ++i)
    re += std::string(boxed ? R"(\s*)" : "") + R"((?:\s*(?:,?and|,?or|,)\s*)" +
          latex_env("next" + std::to_string(i) + "_", boxed) + ")?";
  return boxed ? re : "(?:" + re + ")";
}

struct Pattern {
  Regex re;
  int priority;
  bool latex;  // else a plain-text number or expression
};

void add_latex_patterns(std::vector<Pattern>& out, bool without_anchor, int boxed_priority) {
  const std::string envs = latex_envs(false);
  out.push_back({Regex(R"((?i:final answer is)\:?\s*)" + envs + R"(\.?\s?I hope)", true), 0, true});
  out.push_back({Regex(R"((?i:final answer.{0,100}?)\s+is\:?\s*)" + envs, true), 50, true});
  out.push_back({Regex("(?i:answer):.{0,50}?" + envs, true), 100, true});
  out.push_back({Regex("(?i:answer).{0,50}?" + envs, true), 200, true});
  if (without_anchor) out.push_back({Regex(envs, true), 300, true});
  out.push_back({Regex(latex_envs(true), true), boxed_priority, true});
  out.push_back({Regex(R"((?P<first_latexBoxed>\\boxed{.+}))", true), boxed_priority, true});
}

void add_expr_patterns(std::vector<Pattern>& out) {
  const std::string number =
      R"((?<!\d)(?:(?P<integer1>-?[1-9]\d{0,2}(?:[ ,]\d{3})+)(?P<decimal1>\.\d+)?|)"
      R"((?P<integer2>-?\d+)(?P<decimal2>[.,]\d+)|(?P<decimal3>\.\d+)|(?P<integer3>-?\d+)))"
      R"((?P<percent>\s*(?:%|[Pp]ercent|\s*[Pp]ercentage|\s*[Pp]ct))?)";
  const std::string ops = R"(\+\-\*\×\/\^\(\)\÷)";
  const std::string expr_chars = R"([\d\.\s)" + ops + "]";
  const std::string expr = R"((?P<expr>-?\(?-?\d)" + expr_chars + "*[" + ops + "]" + expr_chars + R"(+\)?))";
  const std::string currency = "[$\u00a3\u00a5\u0e3f\u20a1-\u20bf]";
  const std::string prefix = R"((?:^|\s|\=)(?:\*\*)?)";
  const std::string suffix = R"((?:\*\*)?(?:\.|,|:|\s|\)|\$|$))";
  const std::string expr_anchored = "(?:" + prefix + expr + suffix + ")";
  const std::string number_anchored = "(?:" + prefix + currency + "?" + number + ")";
  const std::string either = "(?:" + expr_anchored + "|" + number_anchored + ")";
  out.push_back({Regex(R"((?i:final answer is)\:?\s*)" + either + R"(\.?\s?I hope)"), 0, false});
  out.push_back({Regex(R"((?i:final answer.{0,100}?)\s+is\:?)" + either), 50, false});
  out.push_back({Regex(R"((?i:answer):(?:.{0,100}=\s*|.{0,50}?))" + either + R"((?!\s*=))"), 100, false});
  out.push_back({Regex(R"((?i:answer)(?:.{0,100}=\s*|.{0,50}?))" + either + R"((?!\s*=))"), 200, false});
  out.push_back({Regex(expr_anchored), 300, false});
  out.push_back({Regex(number_anchored), 300, false});
}

std::vector<Pattern> sorted_by_priority(std::vector<Pattern> v) {
  std::stable_sort(v.begin(), v.end(), [](const Pattern& a, const Pattern& b) { return a.priority < b.priority; });
  return v;
}

// math_verify's defaults, as TRL parses the gold solution.
const std::vector<Pattern>& gold_patterns() {
  static const std::vector<Pattern> p = [] {
    std::vector<Pattern> v;
    add_latex_patterns(v, true, 50);
    add_expr_patterns(v);
    return sorted_by_priority(std::move(v));
  }();
  return p;
}

// TRL's completion search: LaTeX only, \boxed first, no anchor-less match.
const std::vector<Pattern>& answer_patterns() {
  static const std::vector<Pattern> p = [] {
    std::vector<Pattern> v;
    add_latex_patterns(v, false, 0);
    return sorted_by_priority(std::move(v));
  }();
  return p;
}

const NormConfig kGoldNorm{true, true, true, NormConfig::kAll};
const NormConfig kAnswerNorm{true, false, false, NormConfig::kAll};

struct Extracted {
  Value value;
  U32 text;  // the string math_verify falls back to comparing
  // False when math_verify's fallback may differ from `text` (or its whole
  // search may fail), which rules out deciding by the text alone.
  bool text_certain = true;
};

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

// One LaTeX match: every environment it holds, normalised and parsed;
// several become a set.
Extracted extract_latex(const Match& m, const NormConfig& base) {
  std::vector<std::pair<U32, std::string>> parts;  // text, group name
  auto first_of = [&](const std::string& prefix) {
    for (const auto& [name, g] : m.regex().names()) {
      if (!starts_with(name, prefix)) continue;
      const std::optional<U32> v = m.group(g);
      if (v && !v->empty()) return std::optional<std::pair<U32, std::string>>({*v, name});
    }
    return std::optional<std::pair<U32, std::string>>();
  };
  if (auto f = first_of("first_latex")) parts.push_back(*f);
  for (int i = 1; i <= 5; ++i)
    if (auto f = first_of("next" + std::to_string(i) + "_latex")) parts.push_back(*f);

  std::vector<Value> values;
  std::vector<U32> texts;
  for (const auto& [latex, name] : parts) {
    const std::string prefix = name.substr(0, name.find('_'));
    const std::string kind = name.substr(name.find('_') + 1);
    const std::optional<U32> pct = m.group(prefix + "_percent");
    NormConfig cfg = base;
    if (kind == "latexBoxed") cfg.boxed = NormConfig::kLast;
    const U32 norm = normalize_latex(latex, cfg);
    texts.push_back(norm);
    Value v;
    try {
      v = parse_latex(norm);
    } catch (const Unsupported& e) {
      v = unsupported(std::string(e.what()) + " in '" + to_utf8(norm) + "'");
    }
    if (pct && !pct->empty() && v.kind == Value::kNum) {
      if (v.num.pct || v.assignment) {
        v = unsupported("a percentage of a percentage or an equation");
      } else {
        v.num.pct = true;
      }
    }
    values.push_back(std::move(v));
  }
  if (values.empty()) return {};
  if (values.size() == 1) return {values[0], texts[0]};
  const bool all_parsed =
      std::all_of(values.begin(), values.end(), [](const Value& v) { return v.kind != Value::kNone; });
  if (!all_parsed) return {values[0], texts[0]};
  U32 joined;
  for (size_t i = 0; i < texts.size(); ++i) joined += (i ? U" and " : U"") + texts[i];
  // Whether math_verify parsed every part decides which text it falls back
  // to; with a part trlx cannot parse, neither text is certain.
  for (const Value& v : values)
    if (v.kind == Value::kUnsupported) return {v, U32(), false};
  Value set;
  set.kind = Value::kSet;
  for (const Value& v : values) {
    if (v.kind == Value::kNum && v.assignment) return {unsupported("a list of equations"), joined};
    if (v.kind == Value::kNum) set.set.push_back(v.num);
    for (const Num& n : v.set) set.set.push_back(n);
  }
  return {set, joined};
}

// A plain-text number or expression (the gold solution only).
Extracted extract_expr(const Match& m) {
  auto group = [&](const char* name) { return m.group(name).value_or(U32()); };
  U32 integer, decimal;
  for (const char* g : {"integer1", "integer2", "integer3"})
    if (integer.empty()) integer = group(g);
  for (const char* g : {"decimal1", "decimal2", "decimal3"})
    if (decimal.empty()) decimal = group(g);
  const bool pct = !group("percent").empty();
  const U32 expr = group("expr");
  Extracted out;
  if (!integer.empty() || !decimal.empty()) {
    U32 digits;
    for (char32_t c : integer)
      if (c != ',' && c != ' ') digits.push_back(c);
    size_t z = 0;
    while (z < digits.size() && digits[z] == '0') ++z;
    digits = digits.substr(z);
    if (digits.empty()) digits = U"0";
    U32 frac = replace_all(decimal, U",", U".");
    out.text = digits + frac;
    const bool negative = digits[0] == '-';
    const U32 int_digits = negative ? digits.substr(1) : digits;
    // SymPy's Number() rejects "-05"; math_verify's whole parse then fails.
    if (!all_ascii_digits(int_digits) || (int_digits.size() > 1 && int_digits[0] == '0') ||
        (!frac.empty() && !all_ascii_digits(frac.substr(1)))) {
      out.value = unsupported("the number '" + to_utf8(out.text) + "'");
      out.text_certain = false;
      return out;
    }
    Value v;
    v.kind = Value::kNum;
    try {
      v.num = frac.empty() ? make_exact(Rat(BigInt::from_digits(int_digits)))
                           : make_float(decimal_value(int_digits, frac.substr(1)));
    } catch (const Unsupported& e) {
      out.value = unsupported(e.what());
      return out;
    }
    if (negative) v.num.value = Rat(-v.num.value.num(), v.num.value.den());
    v.num.pct = pct;
    out.value = v;
    return out;
  }
  out.text = expr;
  if (expr.empty()) return out;
  // "a/b" is the one expression reproduced: SymPy keeps it as an unevaluated
  // product, which compares by value.
  static const Regex quotient(R"(^\s*(-?)\s*([0-9]+)\s*/\s*([0-9]+)\s*$)");
  const std::vector<Match> q = quotient.find_all(expr);
  if (q.empty()) {
    out.value = unsupported("the expression '" + to_utf8(expr) + "'");
    return out;
  }
  const U32 a = *q[0].group(2), b = *q[0].group(3);
  const bool zero_b = std::all_of(b.begin(), b.end(), [](char32_t c) { return c == '0'; });
  if ((a.size() > 1 && a[0] == '0') || (b.size() > 1 && b[0] == '0') || zero_b) {
    out.value = unsupported("the expression '" + to_utf8(expr) + "'");
    return out;
  }
  Rat r = Rat(BigInt::from_digits(a), BigInt::from_digits(b));
  if (!q[0].group(1)->empty()) r = Rat(-r.num(), r.den());
  out.value.kind = Value::kNum;
  out.value.num = make_exact(r);
  out.value.num.quotient = true;
  return out;
}

struct Search {
  bool matched = false;  // some pattern matched
  Value value;           // kNone when nothing parsed
  U32 fallback;          // the first match's text (empty: none)
  bool fallback_certain = true;
};

// math_verify's answer search. `first_match`: only the first
// match of the first priority that matches is tried (TRL's completion
// search); otherwise matches are tried until one parses (the gold).
Search search(const U32& text, const std::vector<Pattern>& patterns, bool first_match, const NormConfig& norm) {
  Search out;
  bool have_fallback = false;
  for (size_t g = 0; g < patterns.size();) {
    size_t end = g;
    while (end < patterns.size() && patterns[end].priority == patterns[g].priority) ++end;
    struct Hit {
      Match m;
      bool latex;
    };
    std::vector<Hit> hits;
    for (size_t k = g; k < end; ++k)
      for (Match& m : patterns[k].re.find_all(text)) hits.push_back({std::move(m), patterns[k].latex});
    std::stable_sort(hits.begin(), hits.end(), [](const Hit& a, const Hit& b) {
      if (a.m.end() != b.m.end()) return a.m.end() > b.m.end();
      return a.m.start() < b.m.start();
    });
    for (const Hit& h : hits) {
      Extracted e = h.latex ? extract_latex(h.m, norm) : extract_expr(h.m);
      out.matched = true;
      if (!have_fallback && !e.text_certain) out.fallback_certain = false;
      if (!e.text.empty() && !have_fallback) {
        out.fallback = e.text;
        have_fallback = true;
      }
      if (e.value.kind != Value::kNone) {
        out.value = std::move(e.value);
        break;
      }
      if (first_match) break;
    }
    if (out.value.kind != Value::kNone || (out.matched && first_match)) break;
    g = end;
  }
  return out;
}

std::string describe(const Search& s) {
  std::string v;
  switch (s.value.kind) {
    case Value::kNone: v = "none"; break;
    case Value::kNum: v = (s.value.assignment ? "assignment " : "") + describe(s.value.num); break;
    case Value::kSet:
      v = "set";
      for (const Num& n : s.value.set) v += " [" + describe(n) + "]";
      break;
    case Value::kUnsupported: v = "unsupported: " + s.value.why; break;
  }
  return v + " | " + to_utf8(s.fallback);
}

// math_verify's verdict for a gold number against what the completion
// yielded. Throws
// Unsupported where the SymPy result is not reproduced.
bool values_equal(const Num& gold, const Value& answer) {
  switch (answer.kind) {
    case Value::kNone: return false;
    case Value::kNum: return numbers_equal(gold, answer.num);
    case Value::kSet: {
      // A set dedupes structurally equal elements; a one-element set
      // compares as its element, a larger one never equals one number.
      std::vector<Num> unique;
      for (const Num& n : answer.set) {
        const bool seen = std::any_of(unique.begin(), unique.end(), [&](const Num& u) {
          return u.base == n.base && u.pct == n.pct && u.value == n.value && u.quotient == n.quotient;
        });
        if (!seen) unique.push_back(n);
      }
      if (unique.size() == 1) return numbers_equal(gold, unique[0]);
      // Set membership compares numerically; only values distinct even as
      // binary floats are certainly distinct members.
      for (size_t i = 0; i < unique.size(); ++i)
        for (size_t j = 0; j < i; ++j)
          if (binary_value(unique[i]) == binary_value(unique[j])) throw Unsupported("a list of equal values");
      return false;
    }
    case Value::kUnsupported: throw Unsupported(answer.why);
  }
  return false;
}

}  // namespace

Outcome check(const std::string& solution, const std::string& completion) {
  const Search gold = search(from_utf8(solution), gold_patterns(), false, kGoldNorm);
  if (gold.value.kind == Value::kNone) {
    if (!gold.matched || gold.fallback.empty()) return {Verdict::no_gold, "no answer in the solution"};
    return {Verdict::unsupported, "solution '" + to_utf8(gold.fallback) + "' does not parse"};
  }
  const Search answer = search(from_utf8(completion), answer_patterns(), true, kAnswerNorm);
  const std::string compared = "gold " + describe(gold) + " vs answer " + describe(answer);
  // math_verify also compares the two fallback strings: equal texts are
  // a match whatever the values (\sqrt{2} and \sqrt{2}).
  const U32 gold_text = strip(gold.fallback), answer_text = strip(answer.fallback);
  const bool same_text = gold.fallback_certain && answer.fallback_certain && answer.matched &&
                         !gold_text.empty() && gold_text == answer_text;
  if (gold.value.kind != Value::kNum) {
    if (same_text) return {Verdict::correct, compared};
    const std::string why = gold.value.kind == Value::kUnsupported ? gold.value.why : "a list";
    return {Verdict::unsupported, "solution: " + why + " (" + compared + ")"};
  }
  if (!answer.matched) return {Verdict::wrong, "no answer in the completion"};
  try {
    // A gold `x = 5` compares by its right-hand side with a plain answer;
    // two equations compare as equations, which is not reproduced.
    if (gold.value.assignment && (answer.value.kind == Value::kSet || answer.value.assignment))
      throw Unsupported("an equation against an equation or a list");
    const bool equal = values_equal(gold.value.num, answer.value);
    return {equal || same_text ? Verdict::correct : Verdict::wrong, compared};
  } catch (const Unsupported& e) {
    if (same_text) return {Verdict::correct, compared};
    return {Verdict::unsupported, "answer: " + std::string(e.what()) + " (" + compared + ")"};
  }
}

std::string describe_gold(const std::string& solution) {
  return describe(search(from_utf8(solution), gold_patterns(), false, kGoldNorm));
}

std::string describe_answer(const std::string& completion) {
  return describe(search(from_utf8(completion), answer_patterns(), true, kAnswerNorm));
}

}  // namespace trlx::rewards::math
