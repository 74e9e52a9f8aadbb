#include "tokenizer/pre_tokenizer.h"

#include "engine/error.h"
#include "engine/io/utf8.h"

#include <fmt/format.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace quill {

struct PreTokenizer::Regex {
    pcre2_code* code = nullptr;
    bool jit = false;

    explicit Regex(const std::string& pattern) {
        int error = 0;
        PCRE2_SIZE offset = 0;
        code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error, &offset, nullptr);
        if (!code) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(error, message, sizeof message);
            throw Error(fmt::format("pre-tokenizer regex '{}' does not compile at offset {}: {}", pattern, offset,
                                    reinterpret_cast<const char*>(message)));
        }
        jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
    }
    ~Regex() { pcre2_code_free(code); }
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;
};

namespace {

struct MatchData {
    pcre2_match_data* md;
    explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
        if (!md) throw std::bad_alloc();
    }
    ~MatchData() { pcre2_match_data_free(md); }
    MatchData(const MatchData&) = delete;
    MatchData& operator=(const MatchData&) = delete;
};

// The next match in `s` at or after `from`: [begin, end), or begin == npos when there is none.
std::pair<size_t, size_t> find_match(const pcre2_code* code, bool jit, MatchData& m, std::string_view s,
                                     size_t from) {
    const auto subject = reinterpret_cast<PCRE2_SPTR>(s.data());
    int rc = jit ? pcre2_jit_match(code, subject, s.size(), from, 0, m.md, nullptr)
                 : pcre2_match(code, subject, s.size(), from, 0, m.md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) rc = pcre2_match(code, subject, s.size(), from, PCRE2_NO_JIT, m.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) return {std::string_view::npos, 0};
    if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof message);
        throw Error(fmt::format("pre-tokenizer regex match failed: {}", reinterpret_cast<const char*>(message)));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(m.md);
    return {ov[0], ov[1]};
}

}  // namespace

PreTokenizer::PreTokenizer(const std::vector<std::string>& regexes) {
    for (const std::string& r : regexes) regexes_.push_back(std::make_unique<Regex>(r));
}

PreTokenizer::~PreTokenizer() = default;
PreTokenizer::PreTokenizer(PreTokenizer&&) noexcept = default;
PreTokenizer& PreTokenizer::operator=(PreTokenizer&&) noexcept = default;

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words, CancelFlag cancel) const {
    constexpr size_t kCancelStride = 4096;  // searches between polls: well under a millisecond
    size_t searches = 0;
    words.clear();
    if (text.empty()) return;
    words.push_back(text);
    std::vector<std::string_view> next;
    for (const auto& re : regexes_) {
        MatchData m(re->code);
        next.clear();
        next.reserve(words.size() * 2);
        for (std::string_view piece : words) {
            size_t pos = 0;   // start of the text not yet emitted
            size_t from = 0;  // where the next search starts
            while (from < piece.size()) {
                if (++searches % kCancelStride == 0) check_cancel(cancel, "tokenizing");
                auto [begin, end] = find_match(re->code, re->jit, m, piece, from);
                if (begin == std::string_view::npos) break;
                if (end == begin) {  // an empty match splits there (a lookahead-only regex); search on after it
                    if (begin >= piece.size()) break;
                    if (begin > pos) next.push_back(piece.substr(pos, begin - pos));
                    pos = begin;
                    from = begin + utf8::scan(piece.substr(begin)).length;
                    continue;
                }
                if (begin > pos) next.push_back(piece.substr(pos, begin - pos));
                next.push_back(piece.substr(begin, end - begin));
                pos = from = end;
            }
            if (pos < piece.size()) next.push_back(piece.substr(pos));
        }
        words.swap(next);
    }
}

}  // namespace quill
