#include "tests/support/tiny_vocab.h"

#include "engine/error.h"
#include "engine/io/utf8.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>

namespace quill::test {

const std::vector<std::string_view> kTinyWords = {
    "Once", "upon", "a", "time", "there", "was", "little", "girl", "named", "Lily", "She", "she", "loved", "to",
    "play", "outside", "in", "the", "park", "One", "day", "saw", "big", "red", "ball", "wanted", "with", "it", "but",
    "too", "high", "The", "dog", "Tom", "sun", "A", "Mom", "mom", "said", "cat", "and", "bird", "toy", "Sam", "had",
    "car", "He", "he", "sat", "on", "tree", "sang", "song", "about", "went", "liked", "kick", "his", "every", "Tell",
    "story", "Hi", "Hello", "hello", "world", "Why", "is", "sky", "blue", "What", "And", "times", "you", "are",
    "tiny", "test", "model"};

namespace {

constexpr int32_t kNormal = 1, kUnknown = 2, kControl = 3, kByte = 6;

// GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves, the others for U+0100 onwards.
std::vector<std::string> byte_chars() {
    std::vector<std::string> out(256);
    uint32_t next = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
        const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        utf8::append(out[b], printable ? b : next++);
    }
    return out;
}

}  // namespace

int32_t TinyVocab::id(std::string_view piece) const {
    const auto at = std::find(pieces.begin(), pieces.end(), piece);
    if (at == pieces.end()) throw UsageError(fmt::format("the tiny vocabulary has no piece '{}'", piece));
    return static_cast<int32_t>(at - pieces.begin());
}

void TinyVocab::write(GgufWriter& w) const {
    std::vector<GgufValue> type_values;
    for (int32_t t : types) type_values.emplace_back(t);
    w.set("tokenizer.ggml.model", model);
    w.set("tokenizer.ggml.tokens", GgufValue::strings(pieces));
    w.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::I32, std::move(type_values)));
    if (!scores.empty()) {
        std::vector<GgufValue> score_values;
        for (float s : scores) score_values.emplace_back(s);
        w.set("tokenizer.ggml.scores", GgufValue::array(GgufType::F32, std::move(score_values)));
    }
    if (!merges.empty()) {
        w.set("tokenizer.ggml.pre", "gpt-2");
        w.set("tokenizer.ggml.merges", GgufValue::strings(merges));
    }
    if (bos >= 0) w.set("tokenizer.ggml.bos_token_id", uint32_t(bos));
    if (eos >= 0) w.set("tokenizer.ggml.eos_token_id", uint32_t(eos));
    if (unk >= 0) w.set("tokenizer.ggml.unknown_token_id", uint32_t(unk));
}

TinyVocab tiny_spm_vocab(bool chatml) {
    TinyVocab v;
    v.model = "llama";
    v.unk = 0;
    v.bos = 1;
    v.eos = 2;
    auto add = [&](std::string piece, int32_t type, float score) {
        v.pieces.push_back(std::move(piece));
        v.types.push_back(type);
        v.scores.push_back(score);
    };
    add("<unk>", kUnknown, 0);
    add("<s>", kControl, 0);
    add("</s>", kControl, 0);
    for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), kByte, 0);
    if (chatml) {
        add("<|im_start|>", kControl, 0);
        add("<|im_end|>", kControl, 0);
    }
    const std::string space = "\xE2\x96\x81";  // U+2581, SPM's space
    add(space, kNormal, -1);
    for (char c = 0x21; c < 0x7F; ++c) add(std::string(1, c), kNormal, -1);
    std::set<std::string> seen(v.pieces.begin(), v.pieces.end());
    for (std::string_view word : kTinyWords) {
        for (size_t n = 1; n <= word.size(); ++n) {
            std::string piece = space + std::string(word.substr(0, n));
            if (!seen.insert(piece).second) continue;
            add(std::move(piece), kNormal, static_cast<float>(n));
        }
    }
    return v;
}

TinyVocab tiny_bpe_vocab() {
    TinyVocab v;
    v.model = "gpt2";
    const std::vector<std::string> chars = byte_chars();
    for (const std::string& c : chars) {
        v.pieces.push_back(c);
        v.types.push_back(kNormal);
    }
    std::set<std::string> seen(v.pieces.begin(), v.pieces.end());
    const std::string space = chars[' '];  // "Ġ"
    for (std::string_view word : kTinyWords) {
        std::string built = space;
        for (char c : word) {
            std::string next = built + chars[static_cast<uint8_t>(c)];
            if (seen.insert(next).second) {
                v.merges.push_back(built + " " + chars[static_cast<uint8_t>(c)]);
                v.pieces.push_back(next);
                v.types.push_back(kNormal);
            }
            built = std::move(next);
        }
    }
    for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
        v.pieces.emplace_back(special);
        v.types.push_back(kControl);
    }
    v.bos = v.eos = v.id("<|endoftext|>");
    return v;
}

GgufFile vocab_gguf(const TinyVocab& vocab) {
    GgufWriter w;
    w.set("general.architecture", "llama");
    w.set("general.name", "tiny-" + vocab.model);
    vocab.write(w);
    return GgufFile::parse("tiny-" + vocab.model + "-vocab", w.to_bytes());
}

std::unique_ptr<Tokenizer> make_tokenizer(const TinyVocab& vocab) { return Tokenizer::from_gguf(vocab_gguf(vocab)); }

}  // namespace quill::test
