#include "tokenizer/tokenizer.h"

#include "engine/io/utf8.h"

#include <algorithm>

namespace quill {

Detokenizer::Detokenizer(const Tokenizer& tok, bool at_text_start, std::span<const int32_t> shown)
    : tok_(&tok), strip_space_(at_text_start && tok.adds_space_prefix()), shown_(shown.begin(), shown.end()) {
    std::sort(shown_.begin(), shown_.end());
}

std::string Detokenizer::push(int32_t id) {
    const std::string_view bytes = shown_bytes(*tok_, id, shown_);
    if (bytes.empty()) return {};  // control tokens print nothing and do not count as the first piece
    size_t skip = 0;
    if (strip_space_) {
        strip_space_ = false;
        if (bytes[0] == ' ') skip = 1;
    }
    pending_.append(bytes, skip, std::string::npos);
    return take(false);
}

std::string Detokenizer::finish() { return take(true); }

std::string Detokenizer::cut() {
    std::string out = take(false);
    pending_.clear();  // only a valid but incomplete character can be left
    return out;
}

// Moves the complete characters of pending_ to the result. Ill-formed bytes become U+FFFD now, because no later
// byte can make them valid; a valid but incomplete tail waits for more bytes, or becomes U+FFFD when final.
std::string Detokenizer::take(bool final) {
    std::string out;
    const std::string_view s = pending_;
    size_t i = 0;
    while (i < s.size()) {
        const utf8::Scan r = utf8::scan(s.substr(i));
        if (r.kind == utf8::Scan::incomplete && !final) break;
        if (r.kind == utf8::Scan::valid) out.append(s, i, r.length);
        else out.append(utf8::kReplacement);
        i += r.length;
    }
    pending_.erase(0, i);
    return out;
}

std::vector<int32_t> control_tokens_with_text(const Tokenizer& tok, std::span<const std::string_view> texts) {
    std::vector<int32_t> out;
    for (int32_t id = 0; id < tok.n_vocab(); ++id)
        if (tok.is_control(id) && !tok.is_eog(id) && std::find(texts.begin(), texts.end(), tok.piece(id)) != texts.end())
            out.push_back(id);
    return out;
}

std::string_view shown_bytes(const Tokenizer& tok, int32_t id, std::span<const int32_t> shown) {
    if (std::binary_search(shown.begin(), shown.end(), id)) return tok.piece(id);
    return tok.token_bytes(id);
}

std::string decode(const Tokenizer& tok, std::span<const int32_t> ids) {
    Detokenizer d(tok, true);
    std::string text;
    for (int32_t id : ids) text += d.push(id);
    text += d.finish();
    return text;
}

}  // namespace quill
