// Fuzz target: grammars from arbitrary bytes (the first byte picks GBNF, a JSON schema or a regular expression), and
// when one compiles, its automaton and token masks over a small vocabulary of byte strings taken from the input. Bad
// grammars must come back as quill::UsageError, never a crash, a hang, unbounded memory or an abort.
#include "engine/error.h"
#include "engine/grammar/constraint.h"
#include "engine/grammar/token_mask.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size < 2) return 0;
    using Kind = quill::grammar::ConstraintSpec::Kind;
    const Kind kinds[] = {Kind::gbnf, Kind::json_schema, Kind::regex, Kind::gbnf};
    const std::string_view all(reinterpret_cast<const char*>(data) + 1, size - 1);
    // the grammar, then after the first NUL the text to feed it
    const size_t cut = all.find('\0');
    const std::string_view spec_text = all.substr(0, cut);
    const std::string_view text = cut == std::string_view::npos ? std::string_view() : all.substr(cut + 1);
    std::shared_ptr<const quill::grammar::Grammar> g;
    try {
        g = quill::grammar::compile_constraint({kinds[data[0] % 4], std::string(spec_text), "fuzz"});
    } catch (const quill::UsageError&) {
        return 0;
    }
    // a vocabulary: every single byte, and the text cut into pieces of 1 to 4 bytes; the last token ends generation
    std::vector<std::string> vocab;
    for (int b = 0; b < 256; ++b) vocab.emplace_back(1, static_cast<char>(b));
    for (size_t i = 0; i < text.size(); i += 1 + i % 4) vocab.emplace_back(text.substr(i, 1 + i % 4));
    vocab.emplace_back();
    const auto eog = static_cast<int32_t>(vocab.size() - 1);
    try {
        quill::grammar::TokenGrammar tg(g, vocab, std::vector<int32_t>{eog});
        auto s = tg.automaton().start();
        for (size_t i = 0; i < text.size() && i < 64; ++i) {
            const auto mask = tg.mask(s);
            const auto t = static_cast<int32_t>(static_cast<uint8_t>(text[i]));
            const bool allowed = (mask[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1;
            const auto next = tg.automaton().advance(s, static_cast<uint8_t>(text[i]));
            // the mask agrees with the automaton on a one-byte token, and end-of-generation with completeness
            if (allowed != (next != quill::grammar::Automaton::kDead)) std::abort();
            if ((((mask[static_cast<size_t>(eog) >> 6] >> (eog & 63)) & 1) != 0) != tg.automaton().accepting(s))
                std::abort();
            if (!allowed) break;
            s = tg.accept(s, t);
        }
    } catch (const quill::UsageError&) {
        // the automaton outgrew a limit
    }
    return 0;
}
