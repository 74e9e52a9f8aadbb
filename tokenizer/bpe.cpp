#include "tokenizer/bpe.h"

#include "engine/error.h"
#include "engine/io/escape.h"
#include "engine/io/output.h"
#include "engine/io/utf8.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/vocab.h"
#include "tokenizer/word_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <memory>
#include <unordered_map>

namespace quill {

namespace {

constexpr uint32_t kMappedEnd = 0x144;  // byte_to_codepoint() < kMappedEnd

bool maps_to_itself(uint8_t b) { return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE; }

// codepoint -> byte for the inverse mapping; -1 where no byte maps there.
std::array<int16_t, kMappedEnd> codepoint_to_byte_table() {
    std::array<int16_t, kMappedEnd> table;
    table.fill(-1);
    for (int b = 0; b < 256; ++b) table[byte_to_codepoint(static_cast<uint8_t>(b))] = static_cast<int16_t>(b);
    return table;
}

// The raw bytes of a byte-level token text; characters outside the mapping stand for themselves.
std::string unmap_bytes(const std::string& text, const std::array<int16_t, kMappedEnd>& table) {
    std::string out;
    for (size_t i = 0; i < text.size();) {
        const size_t start = i;
        const uint32_t cp = utf8::next(text, i);
        if (cp < kMappedEnd && table[cp] >= 0) out.push_back(static_cast<char>(table[cp]));
        else out.append(text, start, i - start);
    }
    return out;
}

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, a space in raw UTF-8 (gemma4) token texts

// "<0xNN>" -> NN for a raw UTF-8 vocabulary's byte tokens; -1 for any other text.
int byte_token_value(std::string_view text) {
    if (text.size() != 6 || !text.starts_with("<0x") || text[5] != '>') return -1;
    int v = 0;
    for (char c : text.substr(3, 2)) {
        const int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// A raw UTF-8 token text as bytes: each '▁' a space.
std::string unescape_spaces(std::string_view text) {
    std::string out;
    for (size_t i = 0; i < text.size();) {
        if (text.substr(i).starts_with(kSpaceMark)) {
            out.push_back(' ');
            i += kSpaceMark.size();
        } else {
            out.push_back(text[i++]);
        }
    }
    return out;
}

// Token texts -> ids by open addressing: a power-of-two table of (hash tag, id) slots, at least twice the texts,
// probed in order. The table (8 bytes a slot: 1 MiB for a 49K vocabulary) stays in L2 where std::unordered_map's
// nodes, one allocation each, did not (three lookups a merge).
class TextIndex {
public:
    // The texts' indices; on a duplicate, *duplicate is set to the later index and the index stops there.
    TextIndex(const std::vector<std::string>& texts, int32_t* duplicate) : texts_(texts) {
        size_t n = 16;
        while (n < 2 * texts.size()) n *= 2;
        slots_.assign(n, kEmpty);
        mask_ = n - 1;
        *duplicate = -1;
        for (size_t i = 0; i < texts.size(); ++i) {
            const uint64_t h = std::hash<std::string_view>{}(texts[i]);
            size_t at = h & mask_;
            for (; slots_[at] != kEmpty; at = (at + 1) & mask_) {
                if (tag(slots_[at]) == tag_of(h) && texts_[id(slots_[at])] == texts[i]) {
                    *duplicate = static_cast<int32_t>(i);
                    return;
                }
            }
            slots_[at] = (static_cast<uint64_t>(tag_of(h)) << 32) | static_cast<uint32_t>(i);
        }
    }
    // The index of text, -1 when absent.
    int32_t find(std::string_view text) const {
        const uint64_t h = std::hash<std::string_view>{}(text);
        for (size_t at = h & mask_; slots_[at] != kEmpty; at = (at + 1) & mask_) {
            if (tag(slots_[at]) == tag_of(h) && texts_[id(slots_[at])] == text)
                return static_cast<int32_t>(id(slots_[at]));
        }
        return -1;
    }

private:
    static constexpr uint64_t kEmpty = ~uint64_t{0};
    static uint32_t tag_of(uint64_t h) { return static_cast<uint32_t>(h >> 32); }
    static uint32_t tag(uint64_t slot) { return static_cast<uint32_t>(slot >> 32); }
    static size_t id(uint64_t slot) { return static_cast<uint32_t>(slot); }
    const std::vector<std::string>& texts_;
    std::vector<uint64_t> slots_;
    size_t mask_ = 0;
};

class BpeTokenizer final : public Tokenizer {
public:
    BpeTokenizer(Vocab&& vocab, const PreTokenizerSpec& spec)
        : Tokenizer(std::move(vocab), spec.add_bos),
          pre_(spec.regexes),
          ignore_merges_(spec.ignore_merges),
          raw_(spec.raw_utf8) {
        auto ids = std::make_unique<TextIndex>(index_texts());
        if (raw_) build_raw_bytes(*ids);
        else build_bytes(*ids);
        build_merges(vocab.merges, *ids);
        if (raw_) raw_ids_ = std::move(ids);  // characters and newline runs are looked up while encoding
    }

protected:
    void encode_text(std::string_view text, std::vector<int32_t>& out, CancelFlag cancel) const override;

private:
    struct Merge {
        int32_t rank;
        int32_t result;
    };
    struct Symbol {
        int32_t id;  // -1: the byte (raw_: the character) has no token; -2: merged into its left neighbour
        int32_t prev;
        int32_t next;
    };
    struct Candidate {
        int32_t rank;
        int32_t left;  // symbol index; the right one is symbols[left].next when still valid
        int32_t right;
        int32_t left_id;
        int32_t right_id;
        int32_t result;
    };
    struct Scratch {
        std::vector<Symbol> symbols;
        std::vector<Candidate> heap;
        std::vector<uint32_t> starts;  // raw_: the byte offset of each first symbol (one character), then the end
        CancelFlag cancel = nullptr;  // polled every kCancelStride merges: one word may be megabytes of one letter
    };

    // Heap order: lowest rank first, then leftmost (as llama.cpp and Hugging Face).
    static bool worse(const Candidate& a, const Candidate& b) {
        return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
    }
    static uint64_t pair_key(int32_t left, int32_t right) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    }

    TextIndex index_texts() const;
    void build_bytes(const TextIndex& ids);
    void build_raw_bytes(const TextIndex& ids);
    void encode_raw(std::string_view text, std::vector<int32_t>& out, CancelFlag cancel) const;
    void first_symbols(std::string_view word, Scratch& s) const;
    void build_merges(const std::vector<std::string>& merges, const TextIndex& ids);
    void encode_word(std::string_view word, std::vector<int32_t>& out, Scratch& scratch) const;
    void try_add(Scratch& s, int32_t left, int32_t right) const;

    PreTokenizer pre_;
    bool ignore_merges_;
    bool raw_;                                           // raw UTF-8 tokens (PreTokenizerSpec::raw_utf8)
    std::unique_ptr<TextIndex> raw_ids_;                 // raw_: token texts -> ids
    std::array<int32_t, 256> byte_ids_{};                // raw byte -> its token id (raw_: <0xNN>), -1 when absent
    std::unordered_map<uint64_t, Merge> merges_;         // (left id, right id) -> rank and merged id
    std::unordered_map<std::string_view, int32_t> whole_;  // raw bytes -> normal token (ignore_merges), into bytes_
};

TextIndex BpeTokenizer::index_texts() const {
    int32_t duplicate = -1;
    TextIndex ids(pieces_, &duplicate);
    if (duplicate >= 0)
        throw FileError(fmt::format("{}: token {} '{}' duplicates an earlier token", source_, duplicate,
                                    pieces_[static_cast<size_t>(duplicate)]));
    return ids;
}

void BpeTokenizer::build_bytes(const TextIndex& ids) {
    const auto table = codepoint_to_byte_table();
    bytes_.resize(pieces_.size());
    for (size_t i = 0; i < pieces_.size(); ++i) {
        if (types_[i] == TokenType::normal) bytes_[i] = unmap_bytes(pieces_[i], table);
        else if (types_[i] == TokenType::user_defined) bytes_[i] = pieces_[i];
    }
    for (int b = 0; b < 256; ++b) {
        std::string text;
        utf8::append(text, byte_to_codepoint(static_cast<uint8_t>(b)));
        byte_ids_[static_cast<size_t>(b)] = ids.find(text);
    }
    if (ignore_merges_) {
        for (size_t i = 0; i < pieces_.size(); ++i) {
            if (types_[i] == TokenType::normal) whole_.emplace(bytes_[i], static_cast<int32_t>(i));
        }
    }
}

// Raw UTF-8 vocabularies: normal tokens are their text with '▁' as spaces, byte tokens <0xNN> that byte.
void BpeTokenizer::build_raw_bytes(const TextIndex& ids) {
    bytes_.resize(pieces_.size());
    for (size_t i = 0; i < pieces_.size(); ++i) {
        if (types_[i] == TokenType::normal) bytes_[i] = unescape_spaces(pieces_[i]);
        else if (types_[i] == TokenType::user_defined) bytes_[i] = pieces_[i];
        else if (const int b = byte_token_value(pieces_[i]); types_[i] == TokenType::byte && b >= 0)
            bytes_[i] = std::string(1, static_cast<char>(b));
    }
    for (int b = 0; b < 256; ++b) byte_ids_[static_cast<size_t>(b)] = ids.find(fmt::format("<0x{:02X}>", b));
}

// "left right" per line, rank = line number. Merges whose parts or result are not tokens cannot apply (Hugging
// Face rejects such files) and are skipped.
void BpeTokenizer::build_merges(const std::vector<std::string>& merges, const TextIndex& ids) {
    merges_.reserve(merges.size());
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string& line = merges[rank];
        const size_t space = line.find(' ', 1);
        if (space == std::string::npos) continue;
        const std::string_view left(line.data(), space);
        const std::string_view right(line.data() + space + 1, line.size() - space - 1);
        joined.assign(left).append(right);
        const int32_t l = ids.find(left), r = ids.find(right), m = ids.find(joined);
        if (l < 0 || r < 0 || m < 0) continue;
        merges_.emplace(pair_key(l, r), Merge{static_cast<int32_t>(rank), m});
    }
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int32_t>& out, CancelFlag cancel) const {
    if (raw_) {
        encode_raw(text, out, cancel);
        return;
    }
    std::vector<std::string_view> words;
    pre_.split(text, words, cancel);
    WordCache cache;
    Scratch scratch;
    scratch.cancel = cancel;
    for (size_t i = 0; i < words.size(); ++i) {
        const std::string_view word = words[i];
        if ((i + 1) % kCancelStride == 0) check_cancel(cancel, "tokenizing");
        if (word.size() == 1) {
            const int32_t id = byte_ids_[static_cast<uint8_t>(word[0])];
            if (id >= 0) out.push_back(id);
            continue;
        }
        if (cache.append_to(word, out)) continue;
        const size_t before = out.size();
        encode_word(word, out, scratch);
        cache.insert(word, out, before);
    }
}

// As llama.cpp's gemma4 tokenizer: spaces become '▁', then each line and each run of newlines is one word; a run
// of newlines that is a token is taken whole (merges would split it otherwise).
void BpeTokenizer::encode_raw(std::string_view text, std::vector<int32_t>& out, CancelFlag cancel) const {
    std::string escaped;
    escaped.reserve(text.size());
    for (char c : text) {
        if (c == ' ') escaped.append(kSpaceMark);
        else escaped.push_back(c);
    }
    std::vector<std::string_view> words;
    pre_.split(escaped, words, cancel);
    Scratch scratch;
    scratch.cancel = cancel;
    for (size_t i = 0; i < words.size(); ++i) {
        const std::string_view word = words[i];
        if ((i + 1) % kCancelStride == 0) check_cancel(cancel, "tokenizing");
        if (word.find_first_not_of('\n') == std::string_view::npos) {
            if (const int32_t id = raw_ids_->find(word); id >= 0) {
                out.push_back(id);
                continue;
            }
        }
        encode_word(word, out, scratch);
    }
}

// One symbol per byte (GPT-2-mapped) or, raw_, per UTF-8 character.
void BpeTokenizer::first_symbols(std::string_view word, Scratch& s) const {
    s.symbols.clear();
    s.starts.clear();
    for (size_t i = 0; i < word.size();) {
        const auto at = static_cast<int32_t>(s.symbols.size());
        size_t len = 1;
        int32_t id = -1;
        if (raw_) {
            len = std::min(utf8::sequence_length(static_cast<uint8_t>(word[i])), word.size() - i);
            id = raw_ids_->find(word.substr(i, len));
            s.starts.push_back(static_cast<uint32_t>(i));
        } else {
            id = byte_ids_[static_cast<uint8_t>(word[i])];
        }
        i += len;
        s.symbols.push_back({id, at - 1, i < word.size() ? at + 1 : -1});
    }
    s.starts.push_back(static_cast<uint32_t>(word.size()));
}

void BpeTokenizer::try_add(Scratch& s, int32_t left, int32_t right) const {
    if (left < 0 || right < 0) return;
    const int32_t l = s.symbols[static_cast<size_t>(left)].id, r = s.symbols[static_cast<size_t>(right)].id;
    if (l < 0 || r < 0) return;
    auto it = merges_.find(pair_key(l, r));
    if (it == merges_.end()) return;
    s.heap.push_back({it->second.rank, left, right, l, r, it->second.result});
    std::push_heap(s.heap.begin(), s.heap.end(), worse);
}

// Starts from one symbol per byte and applies the best-ranked merge of adjacent symbols until none applies.
void BpeTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out, Scratch& s) const {
    if (ignore_merges_) {
        if (auto it = whole_.find(word); it != whole_.end()) {
            out.push_back(it->second);
            return;
        }
    }
    first_symbols(word, s);
    const auto n = static_cast<int32_t>(s.symbols.size());
    s.heap.clear();
    for (int32_t i = 1; i < n; ++i) try_add(s, i - 1, i);

    for (size_t step = 1; !s.heap.empty(); ++step) {
        if (step % kCancelStride == 0) check_cancel(s.cancel, "tokenizing");
        std::pop_heap(s.heap.begin(), s.heap.end(), worse);
        const Candidate c = s.heap.back();
        s.heap.pop_back();
        Symbol& left = s.symbols[static_cast<size_t>(c.left)];
        Symbol& right = s.symbols[static_cast<size_t>(c.right)];
        if (left.id != c.left_id || left.next != c.right || right.id != c.right_id) continue;  // stale
        left.id = c.result;
        left.next = right.next;
        if (right.next >= 0) s.symbols[static_cast<size_t>(right.next)].prev = c.left;
        right.id = -2;
        try_add(s, left.prev, c.left);
        try_add(s, c.left, left.next);
    }
    for (int32_t i = 0; i >= 0; i = s.symbols[static_cast<size_t>(i)].next) {
        const int32_t id = s.symbols[static_cast<size_t>(i)].id;
        if (id >= 0) {
            out.push_back(id);
        } else if (raw_) {  // a character with no token (never merged): its bytes' <0xNN> tokens
            for (uint32_t b = s.starts[static_cast<size_t>(i)]; b < s.starts[static_cast<size_t>(i) + 1]; ++b) {
                const int32_t byte_id = byte_ids_[static_cast<uint8_t>(word[b])];
                if (byte_id >= 0) out.push_back(byte_id);
            }
        }
    }
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) {
    if (maps_to_itself(byte)) return byte;
    uint32_t n = 0;  // rank of this byte among the bytes that do not map to themselves
    for (int b = 0; b < byte; ++b) n += !maps_to_itself(static_cast<uint8_t>(b));
    return 0x100 + n;
}

std::unique_ptr<Tokenizer> make_bpe_tokenizer(Vocab&& vocab) {
    if (vocab.model == "gemma4") vocab.pre = "gemma4";  // llama.cpp ignores the file's tokenizer.ggml.pre there
    if (vocab.merges.empty())
        throw FileError(fmt::format("{}: metadata 'tokenizer.ggml.merges' is missing or empty (a gpt2 vocabulary "
                                    "needs its BPE merges)",
                                    vocab.source));
    if (vocab.pre.empty()) {
        print_stderr("quill: warning: {}: no tokenizer.ggml.pre; using the default pre-tokenizer\n",
                     escape_line(vocab.source));
        vocab.pre = "default";
    }
    if (is_raw_utf8_pre_tokenizer(vocab.pre))
        throw FileError(fmt::format("{}: pre-tokenizer '{}' (tokenizer.ggml.pre) is for a vocabulary of raw UTF-8 "
                                    "tokens with '\xE2\x96\x81' for spaces; quill runs byte-level BPE "
                                    "vocabularies only",
                                    vocab.source, vocab.pre));
    std::optional<PreTokenizerSpec> spec = pre_tokenizer_spec(vocab.pre);
    if (!spec) {
        print_stderr("quill: warning: {}\n",
                     escape_line(fmt::format("{}: unknown pre-tokenizer '{}' (tokenizer.ggml.pre); using the gpt-2 "
                                             "rules, tokenization may differ from the model's",
                                             vocab.source, vocab.pre)));
        vocab.pre = "gpt-2";
        spec = pre_tokenizer_spec(vocab.pre);
    }
    if (spec->raw_utf8 && vocab.add_bos == false) {  // Gemma 4 needs its BOS, whatever the file says
        print_stderr("quill: warning: {}: tokenizer.ggml.add_bos_token is false; a BOS token is added anyway for "
                     "'{}'\n",
                     escape_line(vocab.source), vocab.pre);
        vocab.add_bos = true;
    }
    return std::make_unique<BpeTokenizer>(std::move(vocab), *spec);
}

}  // namespace quill
