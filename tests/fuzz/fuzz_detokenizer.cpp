// libFuzzer target: arbitrary id sequences through the streaming Detokenizer of each test vocabulary. Checks that
// every piece it returns is valid UTF-8 and that the whole equals a plain one-shot conversion of the tokens' bytes
// (written here independently: each maximal ill-formed subpart becomes one U+FFFD, as Python's errors="replace"),
// so where the stream is cut between tokens never changes the text. Out-of-range ids must throw UsageError.
//
// Input: byte 0 picks the vocabulary, byte 1 bit 0 says whether the ids begin a text; then 3 bytes per id. With the
// first byte's top bit set the id is the vocabulary's token for the single byte in the second byte (byte tokens
// are rare among the ids but matter most here); otherwise the 23 low bits, modulo n_vocab + 2, where the two
// values past the vocabulary stand for n_vocab and -1.
#include "engine/error.h"
#include "engine/io/utf8.h"
#include "tests/fuzz/fuzz_util.h"
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace {

using quill::fuzz::check;

// Whether s (1 to 4 bytes, s[0] >= 0x80) begins some well-formed UTF-8 sequence: the code points whose encoding
// starts with s form a range [lo, hi], which must meet the range its length encodes without being all surrogates.
bool begins_valid_sequence(std::string_view s) {
    const auto lead = static_cast<uint8_t>(s[0]);
    size_t n = 0;
    uint32_t lo = 0;
    if ((lead & 0xE0) == 0xC0) n = 2, lo = lead & 0x1Fu;
    else if ((lead & 0xF0) == 0xE0) n = 3, lo = lead & 0x0Fu;
    else if ((lead & 0xF8) == 0xF0) n = 4, lo = lead & 0x07u;
    else return false;
    if (s.size() > n) return false;
    uint32_t hi = lo;
    for (size_t i = 1; i < n; ++i) {
        uint32_t bits_lo = 0, bits_hi = 0x3F;  // a byte still to come may hold any 6 bits
        if (i < s.size()) {
            const auto c = static_cast<uint8_t>(s[i]);
            if ((c & 0xC0) != 0x80) return false;
            bits_lo = bits_hi = c & 0x3Fu;
        }
        lo = lo << 6 | bits_lo;
        hi = hi << 6 | bits_hi;
    }
    static constexpr std::array<uint32_t, 5> kMin{0, 0, 0x80, 0x800, 0x10000}, kMax{0, 0, 0x7FF, 0xFFFF, 0x10FFFF};
    lo = std::max(lo, kMin[n]);
    hi = std::min(hi, kMax[n]);
    return lo <= hi && !(lo >= 0xD800 && hi <= 0xDFFF);
}

// Bytes -> valid UTF-8 in one pass: a complete well-formed sequence is kept, each maximal prefix of one (or a lone
// bad byte) becomes U+FFFD.
std::string replace_ill_formed(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size();) {
        if (static_cast<uint8_t>(s[i]) < 0x80) {
            out.push_back(s[i++]);
            continue;
        }
        size_t k = 0;
        while (i + k < s.size() && k < 4 && begins_valid_sequence(s.substr(i, k + 1))) ++k;
        const size_t n = quill::utf8::sequence_length(static_cast<uint8_t>(s[i]));
        if (k == n) out.append(s.substr(i, n));
        else out.append(quill::utf8::kReplacement);
        i += std::max<size_t>(k, 1);
    }
    return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const auto& vocabs = quill::fuzz::test_vocabs();
    if (size < 2) return 0;
    const quill::fuzz::NamedTokenizer& v = vocabs[data[0] % vocabs.size()];
    const quill::Tokenizer& tok = *v.tok;
    const bool at_text_start = data[1] & 1;

    quill::Detokenizer d(tok, at_text_start);
    std::string streamed, raw;
    bool strip = at_text_start && tok.adds_space_prefix();
    for (size_t at = 2; at + 3 <= size; at += 3) {
        int32_t id = 0;
        if (data[at] & 0x80) {
            id = v.byte_token[data[at + 1]];
            if (id < 0) continue;
        } else {
            const uint32_t x = (uint32_t{data[at]} << 16 | uint32_t{data[at + 1]} << 8 | data[at + 2]) & 0x7FFFFF;
            id = static_cast<int32_t>(x % (static_cast<uint32_t>(tok.n_vocab()) + 2));
            if (id == tok.n_vocab() + 1) id = -1;
        }
        if (id < 0 || id >= tok.n_vocab()) {
            try {
                (void)d.push(id);
                check(false, v.name, "an out-of-range id did not throw");
            } catch (const quill::UsageError&) {
            }
            continue;
        }
        const std::string piece = d.push(id);
        check(quill::utf8::is_valid(piece), v.name, "a streamed piece is not valid UTF-8");
        streamed += piece;
        std::string_view bytes = tok.token_bytes(id);
        if (strip && !bytes.empty()) {
            strip = false;
            if (bytes[0] == ' ') bytes.remove_prefix(1);
        }
        raw.append(bytes);
    }
    const std::string rest = d.finish();
    check(quill::utf8::is_valid(rest), v.name, "the streamed rest is not valid UTF-8");
    check(streamed + rest == replace_ill_formed(raw), v.name, "the stream differs from the one-shot conversion");
    return 0;
}
