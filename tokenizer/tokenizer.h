// Tokenizers for GGUF vocabularies: text -> token ids, and token ids -> UTF-8 text.
//
// Vocabulary kinds, chosen by `tokenizer.ggml.model`:
//   "llama": SentencePiece BPE (scores, byte fallback, '▁' for spaces), run by the sentencepiece library (spm.cpp);
//   "gpt2":  byte-level BPE (merges by rank after a regex pre-tokenizer chosen by `tokenizer.ggml.pre`) (bpe.cpp);
//   "gemma4": BPE merges over raw UTF-8 tokens, '▁' for spaces, <0xNN> byte fallback (bpe.cpp, raw_utf8).
// All follow llama.cpp's llama-vocab.cpp semantics, which reproduce Hugging Face's tokenizers:
//   - special tokens are split out of the text first: user-defined tokens always, control and unknown tokens only
//     when parse_special is true (a user who types "<|im_end|>" gets plain text);
//   - SPM prepends the dummy-prefix space to every raw-text fragment (the start of the text and after each special
//     token), never elsewhere;
//   - BOS/EOS are added per tokenizer.ggml.add_bos_token / add_eos_token (defaults: SPM adds BOS; gpt2-type vocabs
//     add BOS only for the llama-3 and tekken pre-tokenizers; gemma4 always adds it).
// A Tokenizer is immutable once built: every const member may be called from several threads at once.
#pragma once

#include "engine/io/cancel.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

class GgufFile;
struct Vocab;

// GGUF tokenizer.ggml.token_type values (undefined and unknown values load as normal).
enum class TokenType : int32_t { normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6 };

class Tokenizer {
public:
    // Reads tokenizer.ggml.* metadata. FileError naming the file and the key on bad or missing metadata.
    static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);
    // A sentencepiece tokenizer.model, run exactly as the library runs it (its own normalizer and model type).
    // Special ids and add_bos/add_eos come from `gguf` when given (also general.name), else from the trainer spec.
    static std::unique_ptr<Tokenizer> from_spm_file(const std::string& path, const GgufFile* gguf);

    virtual ~Tokenizer();
    Tokenizer(const Tokenizer&) = delete;
    Tokenizer& operator=(const Tokenizer&) = delete;

    // add_special: BOS/EOS per add_bos()/add_eos(). parse_special: control/unknown token texts in `text` become
    // those tokens (for rendered chat templates only; false for user text). cancel: polled after every few
    // thousand words, Interrupted once raised (megabytes of text take the tokenizer seconds); a short text is
    // tokenized whole even when it is raised already (run --json still reports the prompt of a run cut by a signal).
    std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special,
                                CancelFlag cancel = nullptr) const;

    // A byte range of a text.
    struct TextSpan {
        size_t begin = 0;
        size_t size = 0;
    };
    // Encodes a rendered chat template: control-token texts are parsed as special everywhere except where they
    // overlap a `literal` span (the messages' own text, sorted by begin), which stays plain text. Raw text around
    // and inside the spans is tokenized as one piece, so the ids equal encode(text, add_special, true) whenever no
    // literal span holds a control-token text.
    std::vector<int32_t> encode_with_literals(std::string_view text, bool add_special,
                                              std::span<const TextSpan> literal, CancelFlag cancel = nullptr) const;

    // What encode(text, _, false) could not keep, as one sentence for a warning; "" when nothing was lost. Three
    // losses: bytes that are not valid UTF-8, which an SPM tokenizer replaces with U+FFFD; bytes a byte-level BPE
    // vocabulary has no token for, which it drops; and characters the vocabulary lacks, which became the unknown
    // token (SPM without byte fallback). NUL and other control bytes are ordinary bytes: kept when the vocabulary
    // has them.
    std::string describe_loss(std::string_view text, std::span<const int32_t> ids) const;

    int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
    std::string_view piece(int32_t id) const;  // the vocabulary text, e.g. "▁Hello", "Ġworld", "<0x0A>"
    TokenType type(int32_t id) const;
    int32_t bos() const { return bos_; }  // -1 when absent
    int32_t eos() const { return eos_; }  // -1 when absent
    bool add_bos() const { return add_bos_; }
    bool add_eos() const { return add_eos_; }
    // EOS, EOT, EOM and every end-of-generation token of the vocabulary (<|im_end|>, <|eot_id|>, <|end|>, ...).
    bool is_eog(int32_t id) const;
    const std::vector<int32_t>& eog_ids() const { return eog_ids_; }  // sorted
    bool is_control(int32_t id) const;
    std::string_view model_name() const { return model_; }  // "llama" (SPM), "gpt2" or "gemma4" (BPE)
    std::string_view pre_name() const { return pre_; }      // BPE pre-tokenizer in use; "" for SPM
    // True when encode() prepends a space to each raw fragment (SPM add_space_prefix); whole-text decoding drops
    // the space of the first piece.
    bool adds_space_prefix() const { return add_space_prefix_; }

    // The raw bytes a token adds to text: SPM '▁' -> ' ', <0xNN> -> that byte; BPE byte-to-unicode inverted;
    // user-defined tokens their text; control, unknown and unused tokens "". Out-of-range ids throw UsageError.
    const std::string& token_bytes(int32_t id) const;

protected:
    // `default_add_bos` applies when the metadata has no tokenizer.ggml.add_bos_token.
    Tokenizer(Vocab&& vocab, bool default_add_bos);
    // Tokenizes one raw-text fragment (no special tokens inside) and appends the ids; polls `cancel` (check_cancel)
    // every kCancelStride words or so.
    virtual void encode_text(std::string_view text, std::vector<int32_t>& out, CancelFlag cancel) const = 0;
    static constexpr size_t kCancelStride = 4096;

    void check_id(int32_t id) const;

    std::string source_;  // file path, for messages
    std::string model_;
    std::string pre_;
    std::vector<std::string> pieces_;        // [n_vocab]
    std::vector<TokenType> types_;           // [n_vocab]
    std::vector<std::string> bytes_;         // [n_vocab] token_bytes, filled by the subclass constructor
    int32_t bos_ = -1;
    int32_t eos_ = -1;
    int32_t unk_ = -1;
    bool add_bos_ = false;
    bool add_eos_ = false;
    bool add_space_prefix_ = false;

private:
    struct Fragment {
        int32_t token;  // -1: raw text [begin, begin + size)
        size_t begin;
        size_t size;
    };
    std::vector<int32_t> encode_impl(std::string_view text, bool add_special, bool parse_special,
                                     std::span<const TextSpan> literal, CancelFlag cancel) const;
    std::vector<Fragment> partition(std::string_view text, bool parse_special,
                                    std::span<const TextSpan> literal = {}) const;
    void collect_eog(int32_t eot, int32_t eom);
    void build_special_index(std::string_view general_name);

    std::vector<int32_t> eog_ids_;
    std::vector<uint8_t> strip_;                   // [n_vocab] kStripLeft | kStripRight (phi-3 special tokens)
    std::vector<std::vector<int32_t>> specials_;   // [256] special token ids by first byte, longest first
};

// Whether a token of this text is a control token whatever its GGUF type, as llama.cpp's vocabulary loader makes
// it: the end-of-generation and fill-in-the-middle markers (<|im_end|>, <|eot_id|>, <|fim_prefix|>, ...).
bool is_forced_control_text(std::string_view text);

// Streaming detokenizer: ids in, only complete valid UTF-8 out.
//
// Bytes of a multi-byte character split across tokens (SPM <0xNN> byte fallback, BPE byte tokens) are held until
// the character completes. A byte sequence that can no longer become valid UTF-8 becomes one U+FFFD per maximal
// ill-formed subpart (as Python's errors="replace") as soon as that is certain; an incomplete sequence still
// pending at finish() becomes one U+FFFD, and at cut() is dropped. Control tokens print nothing, but for those in
// `shown`.
class Detokenizer {
public:
    // at_text_start: the ids begin a text, so the SPM dummy-prefix space of the first piece is dropped; false when
    // continuing after a prompt. shown: control tokens that print their vocabulary text (shown_bytes).
    Detokenizer(const Tokenizer& tok, bool at_text_start, std::span<const int32_t> shown = {});
    std::string push(int32_t id);  // the text that became complete
    std::string finish();          // the rest; call once at the end
    // The rest when the text was cut short (a token limit, an interrupt) rather than ended: as finish(), but an
    // incomplete character at the end, whose other bytes were never generated, is withheld instead of U+FFFD.
    std::string cut();

private:
    std::string take(bool final);

    const Tokenizer* tok_;
    bool strip_space_;
    std::vector<int32_t> shown_;  // sorted
    std::string pending_;
};

// Whole-text decode: decode(tok, tok.encode(x, false, false)) == x for valid UTF-8 x whose bytes all have tokens
// (encode drops a byte the vocabulary cannot represent, as llama.cpp does; falcon lacks some control bytes). For
// SPM, x must also lack U+2581 and user-defined token texts (SPM adds its dummy-prefix space after those).
std::string decode(const Tokenizer& tok, std::span<const int32_t> ids);

// The control tokens whose vocabulary text is one of `texts`, sorted: a chat format's markers that its answers'
// parsers must see (llama.cpp's "preserved" tokens), which a vocabulary may make control tokens ([TOOL_CALLS],
// [ARGS], <think>). End-of-generation tokens are never among them.
std::vector<int32_t> control_tokens_with_text(const Tokenizer& tok, std::span<const std::string_view> texts);

// What a token adds to text when the control tokens in `shown` (sorted) print their text: token_bytes, or the
// vocabulary text of a token in `shown`.
std::string_view shown_bytes(const Tokenizer& tok, int32_t id, std::span<const int32_t> shown);

}  // namespace quill
