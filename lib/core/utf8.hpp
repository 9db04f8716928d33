#pragma once
// One code point as UTF-8: the encoder the tokenizer, the template engine
// and the answer parser of the accuracy rewards share.
#include <string>

namespace trlx {

void append_utf8(std::string& out, char32_t cp);

}  // namespace trlx
