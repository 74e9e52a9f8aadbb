#include "tokenizer/spm.h"

#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/io/input.h"
#include "tokenizer/spm_proto.h"
#include "tokenizer/vocab.h"
#include "tokenizer/word_cache.h"

#include <fmt/format.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <sentencepiece_processor.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <unordered_set>

namespace quill {

namespace {

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;
constexpr std::string_view kSpaceSymbol = "\xE2\x96\x81";  // U+2581, SentencePiece's escaped space

// The byte of a "<0xNN>" piece, or -1.
int byte_of_piece(std::string_view p) {
    if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
    int value = 0;
    for (char c : p.substr(3, 2)) {
        value *= 16;
        if (c >= '0' && c <= '9') value += c - '0';
        else if (c >= 'A' && c <= 'F') value += c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') value += c - 'a' + 10;
        else return -1;
    }
    return value;
}

int32_t proto_type(TokenType t) {
    switch (t) {
        case TokenType::normal: return kNormal;
        case TokenType::unknown: return kUnknown;
        case TokenType::control: return kControl;
        case TokenType::user_defined: return kUserDefined;
        case TokenType::unused: return kUnused;
        case TokenType::byte: return kByte;
    }
    return kNormal;
}

TokenType token_type_from_proto(int32_t t) {
    switch (t) {
        case kUnknown: return TokenType::unknown;
        case kControl: return TokenType::control;
        case kUserDefined: return TokenType::user_defined;
        case kUnused: return TokenType::unused;
        case kByte: return TokenType::byte;
        default: return TokenType::normal;
    }
}

// The id sentencepiece treats as unknown: tokenizer.ggml.unknown_token_id, else the first unknown-typed piece,
// else "<unk>"; -1 when there is none.
int64_t choose_unknown(const Vocab& v) {
    const auto n = static_cast<int64_t>(v.pieces.size());
    if (v.unk && *v.unk >= 0 && *v.unk < n) return *v.unk;
    for (int64_t i = 0; i < n; ++i) {
        if (v.types[static_cast<size_t>(i)] == TokenType::unknown) return i;
    }
    for (int64_t i = 0; i < n; ++i) {
        if (v.pieces[static_cast<size_t>(i)] == "<unk>") return i;
    }
    return -1;
}

bool has_all_bytes(const Vocab& v) {
    std::vector<bool> found(256, false);
    for (size_t i = 0; i < v.pieces.size(); ++i) {
        const int b = byte_of_piece(v.pieces[i]);
        if (v.types[i] == TokenType::byte && b >= 0) found[static_cast<size_t>(b)] = true;
    }
    return std::find(found.begin(), found.end(), false) == found.end();
}

// Where the text may be cut without changing the result: when no piece has a '▁' after another character, no
// merge can join a character with a following '▁' run, so the text splits before every space that follows a
// character other than a space or '▁' (U+2581). Llama-family vocabularies qualify.
bool splits_at_spaces(const std::vector<std::string>& pieces) {
    for (const std::string& p : pieces) {
        for (size_t i = p.find(kSpaceSymbol, 1); i != std::string::npos; i = p.find(kSpaceSymbol, i + 1)) {
            if (i < kSpaceSymbol.size() || p.compare(i - kSpaceSymbol.size(), kSpaceSymbol.size(), kSpaceSymbol) != 0)
                return false;
        }
    }
    return true;
}

class SpmTokenizer final : public Tokenizer {
public:
    // manual_prefix: `serialized` has add_dummy_prefix off; encode_text adds the prefix and may split the text.
    SpmTokenizer(Vocab&& vocab, const std::string& serialized, bool manual_prefix)
        : Tokenizer(std::move(vocab), true), manual_prefix_(manual_prefix) {
        bytes_.resize(pieces_.size());
        for (size_t i = 0; i < pieces_.size(); ++i) bytes_[i] = text_of(pieces_[i], types_[i]);
        splittable_ = manual_prefix && splits_at_spaces(pieces_);
        sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
        const auto status = sp_->LoadFromSerializedProto(serialized);
        if (!status.ok())
            throw FileError(fmt::format("{}: the sentencepiece library rejects the vocabulary: {}", source_,
                                        status.ToString()));
    }

protected:
    // The text goes to the library in words where the vocabulary allows it (splittable_), polled between them;
    // otherwise whole, as one call nothing can interrupt.
    void encode_text(std::string_view text, std::vector<int32_t>& out, CancelFlag cancel) const override {
        if (!manual_prefix_) {
            encode_chunk(text, out);
            return;
        }
        std::string s;
        s.reserve(text.size() + 1);
        if (add_space_prefix_) s.push_back(' ');
        s.append(text);
        if (!splittable_) {
            encode_chunk(s, out);
            return;
        }
        const std::string_view all = s;
        WordCache cache;
        for (size_t begin = 0, n_words = 0; begin < all.size(); ++n_words) {
            if ((n_words + 1) % kCancelStride == 0) check_cancel(cancel, "tokenizing");
            const size_t cut = std::min(find_cut(all, begin + 1), all.size());
            const std::string_view word = all.substr(begin, cut - begin);
            begin = cut;
            if (cache.append_to(word, out)) continue;
            const size_t before = out.size();
            encode_chunk(word, out);
            cache.insert(word, out, before);
        }
    }

private:
    // The first position at or after `from` holding a space that follows neither a space nor U+2581.
    static size_t find_cut(std::string_view s, size_t from) {
        for (size_t i = s.find(' ', from); i != std::string_view::npos; i = s.find(' ', i + 1)) {
            if (s[i - 1] == ' ') continue;
            if (i >= kSpaceSymbol.size() && s.compare(i - kSpaceSymbol.size(), kSpaceSymbol.size(), kSpaceSymbol) == 0)
                continue;
            return i;
        }
        return std::string_view::npos;
    }

    void encode_chunk(std::string_view text, std::vector<int32_t>& out) const {
        std::vector<int> ids;
        const auto status = sp_->Encode(text, &ids);
        if (!status.ok()) throw Error(fmt::format("sentencepiece encode failed: {}", status.ToString()));
        for (int id : ids) {
            if (id < n_vocab()) out.push_back(id);  // never the appended stand-in unknown piece
        }
    }

    static std::string text_of(const std::string& piece, TokenType type) {
        switch (type) {
            case TokenType::normal: {
                std::string s;
                for (size_t i = 0; i < piece.size();) {
                    if (piece.compare(i, kSpaceSymbol.size(), kSpaceSymbol) == 0) {
                        s.push_back(' ');
                        i += kSpaceSymbol.size();
                    } else {
                        s.push_back(piece[i++]);
                    }
                }
                return s;
            }
            case TokenType::byte: {
                const int b = byte_of_piece(piece);
                return b >= 0 ? std::string(1, static_cast<char>(b)) : piece;
            }
            case TokenType::user_defined: return piece;
            default: return {};  // control, unknown, unused
        }
    }

    std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
    bool manual_prefix_;
    bool splittable_ = false;
};

// A tokenizer.model is a few MiB; 1 GiB bounds a wrong file.
std::string read_whole_file(const std::string& path) {
    FileDescriptor fd = open_regular_file(path, "the tokenizer model");
    return read_capped(fd.get(), path, size_t{1} << 30, "is it a tokenizer.model?");
}

// Whether sentencepiece may cut `p` out of a text as one initial symbol: one UTF-8 character (a lead byte's length;
// the normalizer turns invalid bytes into U+FFFD, one character too).
bool is_one_character(std::string_view p) {
    if (p.empty()) return false;
    const auto lead = static_cast<unsigned char>(p[0]);
    const size_t length = lead < 0x80 ? 1 : (lead >> 5) == 0x6 ? 2 : (lead >> 4) == 0xE ? 3 : (lead >> 3) == 0x1E ? 4 : 1;
    return p.size() == length;
}

// sentencepiece keeps reserved pieces (control, unknown, byte) in their own map and looks a symbol up there first,
// so a reserved piece a symbol can spell shadows the text. Symbols are single characters or merges, and merges only
// ever form normal pieces: so a control or unknown piece spelled as one character, or as a normal piece, comes out
// covering no text, and Encode fails ("all normalized characters are not consumed"). The library also refuses two
// reserved pieces with one text, or an empty one. Text never becomes a control or unknown piece (quill parses special
// tokens itself, and ids map back through the vocabulary, not through these names), so such pieces get a unique,
// unreachable name in the model handed to the library. Byte pieces keep their names (byte fallback finds them by
// name): a normal piece spelled "<0x41>" would come out as the byte 'A', so that normal piece is renamed instead, and
// its text becomes smaller pieces. A real vocabulary has none of these.
void rename_shadowing_reserved_pieces(std::vector<SpmModel::Piece>& pieces) {
    std::unordered_set<std::string> taken, reserved;  // normal names; reserved and new names
    for (const SpmModel::Piece& p : pieces) {
        if (p.type == kByte) reserved.insert(p.piece);
        else if (p.type != kControl && p.type != kUnknown) taken.insert(p.piece);
    }
    size_t next = 0;
    auto rename = [&](SpmModel::Piece& p) {
        std::string name;
        do name = fmt::format("<quill-reserved-{}>", next++);
        while (taken.contains(name) || !reserved.insert(name).second);
        p.piece = std::move(name);
    };
    for (SpmModel::Piece& p : pieces) {
        if (p.type == kByte || p.type == kControl || p.type == kUnknown || !reserved.contains(p.piece)) continue;
        taken.erase(p.piece);
        rename(p);
    }
    for (SpmModel::Piece& p : pieces) {
        if (p.type != kControl && p.type != kUnknown) continue;
        if (!p.piece.empty() && !is_one_character(p.piece) && !taken.contains(p.piece) && reserved.insert(p.piece).second)
            continue;
        rename(p);
    }
}

}  // namespace

SpmModel build_spm_model(const Vocab& vocab) {
    SpmModel m;
    m.model_type = 2;  // BPE
    m.byte_fallback = has_all_bytes(vocab);
    m.normalizer_name = "identity";
    m.add_dummy_prefix = vocab.add_space_prefix.value_or(true);
    m.remove_extra_whitespaces = false;
    m.escape_whitespaces = true;

    const int64_t unk = choose_unknown(vocab);
    m.pieces.reserve(vocab.pieces.size() + 1);
    for (size_t i = 0; i < vocab.pieces.size(); ++i) {
        // The end-of-generation and fill-in-the-middle markers are control tokens to the Tokenizer whatever their
        // type, so the library must not cut them out of text (user-defined) or merge them (normal) either.
        int32_t type = proto_type(is_forced_control_text(vocab.pieces[i]) ? TokenType::control : vocab.types[i]);
        if (static_cast<int64_t>(i) == unk) type = kUnknown;
        else if (type == kUnknown) type = kControl;
        else if (type == kByte && !m.byte_fallback) type = kControl;
        m.pieces.push_back({vocab.pieces[i], vocab.scores[i], type});
    }
    if (unk < 0) {
        // sentencepiece needs an unknown piece; with byte fallback it never emits it, so a stand-in will do.
        if (!m.byte_fallback)
            throw FileError(fmt::format("{}: the SPM vocabulary has neither an unknown token nor the 256 byte tokens",
                                        vocab.source));
        m.pieces.push_back({"<quill-unknown>", 0.0f, kUnknown});
    }
    rename_shadowing_reserved_pieces(m.pieces);
    m.unk_id = static_cast<int32_t>(unk >= 0 ? unk : static_cast<int64_t>(vocab.pieces.size()));
    m.bos_id = -1;
    m.eos_id = -1;
    return m;
}

std::unique_ptr<Tokenizer> make_spm_tokenizer(Vocab&& vocab) {
    SpmModel model = build_spm_model(vocab);
    model.add_dummy_prefix = false;  // encode_text adds it, so that it may split the text
    return std::make_unique<SpmTokenizer>(std::move(vocab), serialize_spm_model(model), true);
}

std::unique_ptr<Tokenizer> Tokenizer::from_spm_file(const std::string& path, const GgufFile* gguf) {
    const std::string bytes = read_whole_file(path);
    const SpmModel m = parse_spm_model(bytes, path);
    Vocab v;
    v.source = path;
    v.model = "llama";
    for (const SpmModel::Piece& p : m.pieces) {
        v.pieces.push_back(p.piece);
        v.scores.push_back(p.score);
        v.types.push_back(token_type_from_proto(p.type));
    }
    if (m.unk_id >= 0) v.unk = m.unk_id;
    if (m.bos_id >= 0) v.bos = m.bos_id;
    if (m.eos_id >= 0) v.eos = m.eos_id;
    v.add_space_prefix = m.add_dummy_prefix;
    if (gguf) read_gguf_specials(*gguf, v);
    return std::make_unique<SpmTokenizer>(std::move(v), bytes, false);
}

}  // namespace quill
