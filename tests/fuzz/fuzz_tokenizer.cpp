// libFuzzer target: arbitrary bytes as text for every test vocabulary (SPM and byte-level BPE), with and without
// special-token parsing. Checks, beyond "no crash, no sanitizer report, no exception":
//   - every id is inside the vocabulary;
//   - the streaming Detokenizer gives valid UTF-8 with every piece (fuzz_detokenizer checks its bytes);
//   - the round trip decode(encode(x)) == x holds for valid UTF-8 x where the tokenizer promises it
//     (tokenizer/tokenizer.h; see round_trip_promised).
#include "engine/io/utf8.h"
#include "tests/fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace {

using quill::fuzz::check;

std::string stream(const quill::fuzz::NamedTokenizer& v, const std::vector<int32_t>& ids) {
    quill::Detokenizer d(*v.tok, true);
    std::string text;
    for (int32_t id : ids) {
        const std::string piece = d.push(id);
        check(quill::utf8::is_valid(piece), v.name, "a streamed piece is not valid UTF-8");
        text += piece;
    }
    const std::string rest = d.finish();
    check(quill::utf8::is_valid(rest), v.name, "the streamed rest is not valid UTF-8");
    return text + rest;
}

// The texts of the user-defined tokens, which encode() always splits out of the text.
std::vector<std::string> user_defined_texts(const quill::Tokenizer& tok) {
    std::vector<std::string> texts;
    for (int32_t id = 0; id < tok.n_vocab(); ++id) {
        if (tok.type(id) == quill::TokenType::user_defined) texts.emplace_back(tok.piece(id));
    }
    return texts;
}

// The round trip needs valid UTF-8 whose every byte the vocabulary has a token for (falcon, for one, has none for
// some control bytes: encode() drops them, as llama.cpp does). SPM gives back neither U+2581 (it reads as a space)
// nor the text right after a user-defined token (it adds its dummy-prefix space there, and phi-3 drops the
// whitespace after some), as llama.cpp does.
bool round_trip_promised(const quill::fuzz::NamedTokenizer& v, const std::vector<std::string>& user_defined,
                         std::string_view text) {
    if (!quill::utf8::is_valid(text)) return false;
    for (char c : text) {
        if (v.byte_token[static_cast<uint8_t>(c)] < 0) return false;
    }
    if (v.tok->model_name() != "llama") return true;
    if (text.find("\xE2\x96\x81") != std::string_view::npos) return false;  // U+2581
    for (const std::string& u : user_defined) {
        if (text.find(u) != std::string_view::npos) return false;
    }
    return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto& vocabs = quill::fuzz::test_vocabs();
    static const std::vector<std::vector<std::string>> user_defined = [&] {
        std::vector<std::vector<std::string>> u;
        for (const auto& v : vocabs) u.push_back(user_defined_texts(*v.tok));
        return u;
    }();
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    for (size_t i = 0; i < vocabs.size(); ++i) {
        const quill::fuzz::NamedTokenizer& v = vocabs[i];
        const quill::Tokenizer& tok = *v.tok;
        for (bool parse_special : {false, true}) {
            const std::vector<int32_t> ids = tok.encode(text, parse_special, parse_special);
            for (int32_t id : ids) check(id >= 0 && id < tok.n_vocab(), v.name, "an id outside the vocabulary");
            const std::string whole = stream(v, ids);
            if (!parse_special && round_trip_promised(v, user_defined[i], text))
                check(whole == text, v.name, "decode(encode(text)) != text for valid UTF-8");
        }
    }
    return 0;
}
