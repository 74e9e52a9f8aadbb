// Tokenizer tests: llama.cpp's tokenizer test vectors (generated with Hugging Face tokenizers) and what its
// vocabularies define; the mechanics (special tokens, byte fallback, merges, the sentencepiece library path, the
// streaming detokenizer) on vocabularies the tests build (tests/support/tiny_vocab.h). The throughput benchmark is
// tests/bench/bench_tokenizer.cpp.
#include <catch2/catch.hpp>

#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/io/utf8.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_vocab.h"
#include "tests/unit/tokenizer/vocab_vectors.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/spm.h"
#include "tokenizer/spm_proto.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/vocab.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <sstream>

namespace test_tokenizer {

namespace {

using quill::Tokenizer;
using quill::test::Case;
using quill::test::check_vectors;
using quill::test::escaped;
using quill::test::read_vectors;

// Loads each named vocab, or returns nothing after a skip when one is absent; call it before any assertion.
std::optional<std::vector<std::unique_ptr<Tokenizer>>> load_vocabs(const std::vector<std::string>& names) {
    std::vector<std::unique_ptr<Tokenizer>> toks;
    for (const std::string& name : names) {
        auto path = quill::test::require_testdata("vocab/ggml-vocab-" + name + ".gguf");
        if (!path) return std::nullopt;
        toks.push_back(Tokenizer::from_gguf(quill::GgufFile::open(path->string())));
    }
    return toks;
}

void check_vocab_vectors(const std::string& name) {
    auto path = quill::test::require_testdata("vocab/ggml-vocab-" + name + ".gguf");
    if (!path) return;
    auto tok = Tokenizer::from_gguf(quill::GgufFile::open(path->string()));
    check_vectors(*tok, path->string() + ".inp", path->string() + ".out");
}

}  // namespace

TEST_CASE("tokenizer vectors: llama-spm", "[tokenizer]") {
    auto path = quill::test::require_testdata("vocab/ggml-vocab-llama-spm.gguf");
    if (!path) return;
    const quill::GgufFile gguf = quill::GgufFile::open(path->string());
    check_vectors(*Tokenizer::from_gguf(gguf), path->string() + ".inp", path->string() + ".out");

    // The same vocabulary as a llama tokenizer.model, run by the sentencepiece library: the same ids.
    const quill::SpmModel model = quill::build_spm_model(quill::read_gguf_vocab(gguf));
    const quill::SpmModel parsed = quill::parse_spm_model(quill::serialize_spm_model(model), "memory");
    CHECK(parsed.pieces[15043].piece == model.pieces[15043].piece);
    CHECK(parsed.pieces[15043].score == model.pieces[15043].score);
    const auto file = quill::test::temp_dir("tokenizer") / "tokenizer.model";
    std::ofstream(file, std::ios::binary) << quill::serialize_spm_model(model);
    auto tok = Tokenizer::from_spm_file(file.string(), &gguf);
    check_vectors(*tok, path->string() + ".inp", path->string() + ".out");
    // The GGUF path cuts long texts at word starts; the library path sees the whole text. Same ids.
    std::string long_text;
    for (const Case& c : read_vectors(path->string() + ".inp", path->string() + ".out")) long_text += c.text + " \n";
    CHECK(tok->encode(long_text, true, false) == Tokenizer::from_gguf(gguf)->encode(long_text, true, false));
    std::filesystem::remove_all(file.parent_path());
}
TEST_CASE("tokenizer vectors: phi-3", "[tokenizer]") { check_vocab_vectors("phi-3"); }
TEST_CASE("tokenizer vectors: gpt-2", "[tokenizer]") { check_vocab_vectors("gpt-2"); }
TEST_CASE("tokenizer vectors: starcoder", "[tokenizer]") { check_vocab_vectors("starcoder"); }
TEST_CASE("tokenizer vectors: deepseek-coder", "[tokenizer]") { check_vocab_vectors("deepseek-coder"); }
TEST_CASE("tokenizer vectors: falcon", "[tokenizer]") { check_vocab_vectors("falcon"); }

TEST_CASE("tokenizer vectors: stories260K", "[tokenizer]") {
    auto model = quill::test::require_testdata("models/stories260K.gguf");
    if (!model) return;
    auto tok = Tokenizer::from_gguf(quill::GgufFile::open(model->string()));
    const auto ref = quill::test::testdata_dir() / "models" / "ref";
    check_vectors(*tok, ref / "stories260K.gguf.inp", ref / "stories260K.gguf.out");
}

TEST_CASE("tokenizer loads a sentencepiece model file", "[tokenizer]") {
    const quill::test::TinyVocab v = quill::test::tiny_spm_vocab(true);
    const quill::GgufFile gguf = quill::test::vocab_gguf(v);
    const quill::SpmModel model = quill::build_spm_model(quill::read_gguf_vocab(gguf));  // a llama tokenizer.model
    const std::string bytes = quill::serialize_spm_model(model);

    const quill::SpmModel parsed = quill::parse_spm_model(bytes, "memory");
    REQUIRE(parsed.pieces.size() == model.pieces.size());
    const auto once = static_cast<size_t>(v.id("▁Once"));
    CHECK(parsed.pieces[once].piece == "▁Once");
    CHECK(parsed.pieces[once].score == model.pieces[once].score);
    CHECK(parsed.pieces[3].type == 6);
    CHECK(parsed.model_type == 2);
    CHECK(parsed.byte_fallback);
    CHECK(parsed.normalizer_name == "identity");
    CHECK_FALSE(parsed.remove_extra_whitespaces);

    const auto file = quill::test::temp_dir("tokenizer") / "tokenizer.model";
    std::ofstream(file, std::ios::binary) << bytes;
    auto tok = Tokenizer::from_spm_file(file.string(), &gguf);
    CHECK(tok->bos() == 1);
    CHECK(tok->eos() == 2);
    // The library gives the GGUF path's ids (checked against Hugging Face's on llama's vocabulary by the llama-spm
    // vectors): whole words, unknown words, byte fallback, whitespace runs, control-token texts as text.
    const auto from_gguf = Tokenizer::from_gguf(gguf);
    const std::vector<std::string> texts{"Once upon a time", " Lily and Tom went to the park.", "timely tiny-test",
                                         "caf\xC3\xA9 \xE4\xB8\xAD\xF0\x9F\x98\x80", "  two  spaces\n\n\tand tabs ",
                                         "a<|im_end|>b</s>", "x\0y"};
    std::string long_text;
    for (const std::string& text : texts) {
        INFO("\"" << escaped(text) << "\"");
        const std::vector<int32_t> ids = tok->encode(text, true, false);
        CHECK(ids == from_gguf->encode(text, true, false));
        CHECK(quill::decode(*tok, ids) == text);
        long_text += text + " \n";
    }
    // The GGUF path cuts long texts at word starts; the library path sees the whole text. Same ids.
    for (int i = 0; i < 200; ++i) long_text += "Once upon a time there was a little girl. ";
    CHECK(tok->encode(long_text, true, false) == from_gguf->encode(long_text, true, false));

    CHECK_THROWS_AS(quill::parse_spm_model(std::string("\x0a\xff", 2), "junk"), quill::FileError);
    CHECK_THROWS_AS(Tokenizer::from_spm_file((file.parent_path() / "absent.model").string(), nullptr),
                    quill::FileError);
    std::filesystem::remove_all(file.parent_path());
}

namespace {

struct ControlProbe {
    std::string vocab;
    std::string control;  // a control token's text
};

// Text that spells a control token stays text unless special tokens are parsed, and then it is that one token.
void check_control_probes(const std::vector<ControlProbe>& probes,
                          const std::vector<std::unique_ptr<Tokenizer>>& toks) {
    for (size_t i = 0; i < probes.size(); ++i) {
        const ControlProbe& p = probes[i];
        const Tokenizer* tok = toks[i].get();
        int32_t control = -1;
        for (int32_t id = 0; id < tok->n_vocab(); ++id) {
            if (tok->piece(id) == p.control) control = id;
        }
        INFO(p.vocab << " " << p.control);
        REQUIRE(control >= 0);
        REQUIRE(tok->is_control(control));

        const std::string text = "Hello" + p.control + " world";
        const std::vector<int32_t> plain = tok->encode(text, false, false);
        CHECK(std::find(plain.begin(), plain.end(), control) == plain.end());
        CHECK(quill::decode(*tok, plain) == text);

        const std::vector<int32_t> parsed = tok->encode(text, false, true);
        CHECK(std::count(parsed.begin(), parsed.end(), control) == 1);
        CHECK(tok->encode(p.control, false, true) == std::vector<int32_t>{control});
        CHECK(quill::decode(*tok, parsed).find(p.control) == std::string::npos);  // control tokens print nothing
    }
}

}  // namespace

TEST_CASE("tokenizer never injects control tokens from user text", "[tokenizer]") {
    const quill::test::TinyVocab spm = quill::test::tiny_spm_vocab(true), bpe = quill::test::tiny_bpe_vocab();
    const std::vector<ControlProbe> probes{{"tiny spm", "</s>"}, {"tiny spm", "<|im_end|>"},
                                           {"tiny bpe", "<|endoftext|>"}, {"tiny bpe", "<|im_start|>"}};
    std::vector<std::unique_ptr<Tokenizer>> toks;
    for (const ControlProbe& p : probes) toks.push_back(quill::test::make_tokenizer(p.vocab == "tiny spm" ? spm : bpe));
    check_control_probes(probes, toks);
}

// A GGUF SPM vocabulary of the given pieces and types (1 normal, 2 unknown, 3 control, 6 byte), no dummy prefix.
std::unique_ptr<Tokenizer> tiny_spm(const std::vector<std::string>& pieces, const std::vector<int32_t>& types,
                                    const std::vector<float>& score_of) {
    using quill::GgufType;
    using quill::GgufValue;
    std::vector<GgufValue> scores, type_values;
    for (size_t i = 0; i < pieces.size(); ++i) {
        scores.emplace_back(score_of[i]);
        type_values.emplace_back(types[i]);
    }
    quill::GgufWriter w;
    w.set("general.architecture", "llama");
    w.set("tokenizer.ggml.model", "llama");
    w.set("tokenizer.ggml.tokens", GgufValue::strings(pieces));
    w.set("tokenizer.ggml.scores", GgufValue::array(GgufType::F32, scores));
    w.set("tokenizer.ggml.token_type", GgufValue::array(GgufType::I32, type_values));
    w.set("tokenizer.ggml.add_space_prefix", false);
    return Tokenizer::from_gguf(quill::GgufFile::parse("tiny", w.to_bytes()));
}

TEST_CASE("an SPM vocabulary whose control token repeats a normal piece's text still encodes", "[tokenizer]") {
    // Found by fuzz_gguf: sentencepiece looks its reserved (control, unknown) pieces up before the normal ones, so a
    // merge that spelled a control piece's text came out as that control id, covering no text, and Encode failed
    // ("all normalized characters are not consumed"). The normal piece is the one text must become.
    const auto tok = tiny_spm({"<unk>", "<s>", "</s>", "a", "b", "ab", "ab", "b"},
                              {2, 3, 3, 1, 1, 1, 3, 3},  // ids 6 and 7 (control) repeat 5 and 4
                              {0, 0, 0, 0, 0, 1, 0, 0});
    CHECK(tok->encode("ab", false, false) == std::vector<int32_t>{5});
    CHECK(tok->encode("bab", false, false) == std::vector<int32_t>{4, 5});
    CHECK(tok->encode("b", false, false) == std::vector<int32_t>{4});
    CHECK(tok->encode("abc", false, false) == std::vector<int32_t>{5, 0});  // 'c' is not in the vocabulary: <unk>
}

TEST_CASE("an SPM vocabulary with a one-character control token encodes that character as text", "[tokenizer]") {
    // Found by fuzz_gguf (a second form of the case above): every character of the text is one of sentencepiece's
    // initial symbols, so a control piece spelled as one character ("\u2581" here, or "c") was reached with no merge
    // at all. Text never becomes a control token: the character falls back to its bytes, or to <unk> without them.
    std::vector<std::string> pieces{"<unk>", "<s>", "</s>", "a", "b", "ab", "\xE2\x96\x81", "c"};
    std::vector<int32_t> types{2, 3, 3, 1, 1, 1, 3, 3};
    std::vector<float> scores{0, 0, 0, 0, 0, 1, 0, 0};
    {
        const auto tok = tiny_spm(pieces, types, scores);
        CHECK(tok->encode("ab c", false, false) == std::vector<int32_t>{5, 0});  // one <unk> for the unknown run
        CHECK(tok->encode("c", false, false) == std::vector<int32_t>{0});
    }
    for (int b = 0; b < 256; ++b) {
        pieces.push_back(fmt::format("<0x{:02X}>", b));
        types.push_back(6);
        scores.push_back(0);
    }
    const auto tok = tiny_spm(pieces, types, scores);
    CHECK(tok->encode("ab c", false, false) == std::vector<int32_t>{5, 8 + 0xE2, 8 + 0x96, 8 + 0x81, 8 + 'c'});
}

TEST_CASE("an SPM vocabulary's end-of-generation text typed user-defined or normal is a control token, never text's",
          "[tokenizer]") {
    // Found by fuzz_tokenizer on quill's own tiny vocabulary: <|im_end|> typed user-defined (4) or normal (1) is a
    // control token to quill, as to llama.cpp, so user text that spells it must stay text; the sentencepiece
    // library, told it was user-defined or normal, still cut it out of the text (or merged it), and the control
    // token printed nothing.
    for (int32_t type : {4, 1}) {
        INFO("type " << type);
        std::vector<std::string> pieces{"<unk>", "<s>", "</s>", "<|im_end|>", "<", "|", "im", "_", "end", ">",
                                        "<|", "<|im", "<|im_", "<|im_end", "<|im_end|"};
        std::vector<int32_t> types{2, 3, 3, type, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
        std::vector<float> scores{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5};
        for (int b = 0; b < 256; ++b) {
            pieces.push_back(fmt::format("<0x{:02X}>", b));
            types.push_back(6);
            scores.push_back(0);
        }
        const auto tok = tiny_spm(pieces, types, scores);
        CHECK(tok->is_control(3));
        for (const std::string text : {"<|im_end|>", "a<|im_end|>b"}) {
            INFO(text);
            const std::vector<int32_t> ids = tok->encode(text, false, false);
            CHECK(std::find(ids.begin(), ids.end(), 3) == ids.end());
            CHECK(quill::decode(*tok, ids) == text);
        }
        CHECK(tok->encode("<|im_end|>", false, true) == std::vector<int32_t>{3});
    }
}

TEST_CASE("an SPM vocabulary with a normal piece spelled like a byte piece encodes that text as text", "[tokenizer]") {
    // sentencepiece looks byte pieces up before normal ones too: text merged into a normal piece "<0x41>" came out as
    // the byte 'A' (decoding to "A"). quill keeps the byte piece and gives up the normal one: the text becomes
    // smaller pieces that decode to it.
    std::vector<std::string> pieces{"<unk>", "<s>", "</s>", "<", "0", "x", "4", "1", ">", "<0", "<0x", "<0x4", "<0x41", "<0x41>"};
    std::vector<int32_t> types{2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    std::vector<float> scores{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5};
    for (int b = 0; b < 256; ++b) {
        pieces.push_back(fmt::format("<0x{:02X}>", b));
        types.push_back(6);
        scores.push_back(0);
    }
    const auto tok = tiny_spm(pieces, types, scores);
    for (const std::string text : {"<0x41>", "a<0x41>b", "<0x41><0x41>"}) {
        INFO(text);
        const std::vector<int32_t> ids = tok->encode(text, false, false);
        CHECK(quill::decode(*tok, ids) == text);
        CHECK(std::find(ids.begin(), ids.end(), 13) == ids.end());
    }
    CHECK(tok->encode("<0x41>", false, false) == std::vector<int32_t>{12, 8});  // "<0x41" ">"
    CHECK(tok->encode("A", false, false) == std::vector<int32_t>{14 + 'A'});   // byte fallback still works
}

TEST_CASE("tokenizer special ids, BOS/EOS and end-of-generation tokens", "[tokenizer]") {
    const quill::test::TinyVocab sv = quill::test::tiny_spm_vocab(true), bv = quill::test::tiny_bpe_vocab();
    const auto spm = quill::test::make_tokenizer(sv);
    const auto bpe = quill::test::make_tokenizer(bv);

    CHECK(spm->model_name() == "llama");
    CHECK(spm->pre_name().empty());
    CHECK(spm->add_bos());
    CHECK_FALSE(spm->add_eos());
    CHECK(spm->encode("Hello world", true, false) == std::vector<int32_t>{1, sv.id("▁Hello"), sv.id("▁world")});
    CHECK(spm->encode("", true, false) == std::vector<int32_t>{1});
    CHECK(spm->is_eog(2));
    CHECK_FALSE(spm->is_eog(1));
    // <|im_end|> ends generation by its text alone; <|im_start|> does not.
    CHECK(spm->eog_ids() == std::vector<int32_t>{2, sv.id("<|im_end|>")});
    CHECK_FALSE(spm->is_eog(sv.id("<|im_start|>")));

    CHECK(bpe->model_name() == "gpt2");
    CHECK(bpe->pre_name() == "gpt-2");
    CHECK_FALSE(bpe->add_bos());
    CHECK(bpe->bos() == bv.id("<|endoftext|>"));
    CHECK(bpe->encode("Hello world", true, false) == bpe->encode("Hello world", false, false));
    CHECK(bpe->is_eog(bv.id("<|endoftext|>")));
    CHECK(bpe->is_eog(bv.id("<|im_end|>")));
    // tokenizer.ggml.add_bos_token and add_eos_token override the defaults.
    quill::GgufWriter w;
    w.set("general.architecture", "llama");
    bv.write(w);
    w.set("tokenizer.ggml.add_bos_token", true);
    w.set("tokenizer.ggml.add_eos_token", true);
    const auto both = Tokenizer::from_gguf(quill::GgufFile::parse("bos-eos", w.to_bytes()));
    const std::vector<int32_t> ids = both->encode("Hello world", true, false);
    REQUIRE(ids.size() >= 3);
    CHECK(ids.front() == bv.bos);
    CHECK(ids.back() == bv.eos);

    CHECK(spm->token_bytes(sv.id("<|im_start|>")).empty());
    CHECK(spm->token_bytes(1).empty());  // <s>
    CHECK(spm->token_bytes(3 + 'A') == "A");
    CHECK(spm->token_bytes(sv.id("▁Hello")) == " Hello");
    CHECK_THROWS_AS(spm->token_bytes(spm->n_vocab()), quill::UsageError);
    CHECK_THROWS_AS(spm->piece(-1), quill::UsageError);
}

TEST_CASE("tokenizer special tokens of llama.cpp's vocabularies: ids, end of generation, never from user text",
          "[tokenizer]") {
    const std::vector<ControlProbe> probes{{"gpt-2", "<|endoftext|>"}, {"phi-3", "<|end|>"}, {"llama-spm", "</s>"},
                                           {"starcoder", "<fim_prefix>"}, {"falcon", "<|endoftext|>"}};
    std::vector<std::string> names;
    for (const ControlProbe& p : probes) names.push_back(p.vocab);
    names.push_back("deepseek-coder");
    auto toks = load_vocabs(names);
    if (!toks) return;
    auto deepseek = std::move(toks->back());
    toks->pop_back();
    check_control_probes(probes, *toks);
    const Tokenizer* spm = (*toks)[2].get();
    const Tokenizer* gpt2 = (*toks)[0].get();
    const Tokenizer* phi3 = (*toks)[1].get();

    CHECK(spm->model_name() == "llama");
    CHECK(spm->pre_name().empty());
    CHECK(spm->add_bos());
    CHECK_FALSE(spm->add_eos());
    CHECK(spm->encode("Hello world", true, false) == std::vector<int32_t>{1, 15043, 3186});
    CHECK(spm->encode("", true, false) == std::vector<int32_t>{1});
    CHECK(spm->is_eog(2));
    CHECK_FALSE(spm->is_eog(1));

    CHECK(gpt2->model_name() == "gpt2");
    CHECK(gpt2->pre_name() == "gpt-2");
    CHECK_FALSE(gpt2->add_bos());
    CHECK(gpt2->bos() == 50256);
    CHECK(gpt2->encode("Hello world", true, false) == gpt2->encode("Hello world", false, false));
    CHECK(gpt2->is_eog(50256));

    CHECK(deepseek->add_bos());
    const std::vector<int32_t> ds = deepseek->encode("Hello", true, false);
    REQUIRE(ds.size() >= 2);
    CHECK(ds[0] == 32013);
    CHECK(deepseek->is_eog(32014));

    CHECK(phi3->eos() == 32000);
    for (std::string_view eog : {"<|endoftext|>", "<|end|>"}) {
        bool found = false;
        for (int32_t id = 0; id < phi3->n_vocab(); ++id) {
            if (phi3->piece(id) == eog) found = phi3->is_eog(id);
        }
        CHECK(found);
    }
    CHECK_FALSE(phi3->is_eog(32010));  // <|user|>
    // Phi-3 drops the whitespace after its special tokens (as its Hugging Face tokenizer, rstrip); the text after
    // a special token starts a fragment, with its dummy-prefix space.
    std::vector<int32_t> chat = {32010};
    for (int32_t id : phi3->encode("Hi", false, false)) chat.push_back(id);
    chat.push_back(32007);
    CHECK(phi3->encode("<|user|>\nHi<|end|>\n", false, true) == chat);
    CHECK(phi3->token_bytes(32010).empty());
    CHECK(phi3->token_bytes(1).empty());  // <s>
    CHECK_THROWS_AS(phi3->token_bytes(phi3->n_vocab()), quill::UsageError);
    CHECK_THROWS_AS(phi3->piece(-1), quill::UsageError);
}

TEST_CASE("tokenizer matches llama.cpp on stories260K's prompt and generated text", "[tokenizer]") {
    auto model = quill::test::require_testdata("models/stories260K.gguf");
    if (!model) return;
    auto tok = Tokenizer::from_gguf(quill::GgufFile::open(model->string()));
    const std::string ref = quill::test::read_file(quill::test::testdata_dir() / "models" / "ref" /
                                                   "stories260K-f32.greedy.txt");
    auto ids_after = [&](const std::string& label) {
        const size_t at = ref.find(label);
        REQUIRE(at != std::string::npos);
        std::istringstream line(ref.substr(at + label.size(), ref.find('\n', at) - at - label.size()));
        std::vector<int32_t> ids;
        for (int32_t id; line >> id;) ids.push_back(id);
        return ids;
    };
    CHECK(tok->encode("Once upon a time", true, false) == ids_after("prompt_tokens (add_special=true) "));

    const std::string begin = "generated_text_begin\n", end = "\ngenerated_text_end";
    const size_t b = ref.find(begin), e = ref.find(end);
    REQUIRE((b != std::string::npos && e != std::string::npos));
    const std::string expected = ref.substr(b + begin.size(), e - b - begin.size());
    quill::Detokenizer d(*tok, false);  // continuing after the prompt
    std::string text;
    for (int32_t id : ids_after("generated_tokens ")) text += d.push(id);
    text += d.finish();
    CHECK(text == expected);
}

TEST_CASE("tokenizer of the default model (SmolLM2)", "[tokenizer]") {
    const auto model = quill::test::require_default_model();
    if (!model) return;
    auto tok = Tokenizer::from_gguf(quill::GgufFile::open(model->string()));
    CHECK(tok->pre_name() == "smollm");
    CHECK_FALSE(tok->add_bos());
    CHECK(tok->is_eog(2));  // <|im_end|>
    CHECK(tok->is_eog(0));  // <|endoftext|>
    CHECK_FALSE(tok->is_eog(1));
    const std::string chat = "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n";
    const std::vector<int32_t> ids = tok->encode(chat, true, true);
    REQUIRE(ids.size() > 6);
    CHECK(ids.front() == 1);
    CHECK(std::count(ids.begin(), ids.end(), 1) == 2);
    CHECK(std::count(ids.begin(), ids.end(), 2) == 1);
    const std::vector<int32_t> user = tok->encode(chat, true, false);
    CHECK(std::count(user.begin(), user.end(), 1) == 0);
    CHECK(quill::decode(*tok, user) == chat);
}

TEST_CASE("tokenizer takes invalid UTF-8 without failing", "[tokenizer]") {
    // Byte-level BPE, SPM with byte fallback, and a BPE vocabulary without the bytes 0x00..0x08 (as falcon's lacks
    // some control bytes: encode drops them).
    quill::test::TinyVocab lacking = quill::test::tiny_bpe_vocab();
    lacking.pieces.erase(lacking.pieces.begin(), lacking.pieces.begin() + 9);
    lacking.types.erase(lacking.types.begin(), lacking.types.begin() + 9);
    lacking.bos = lacking.eos = lacking.id("<|endoftext|>");
    const std::vector<std::string> names{"tiny bpe", "tiny spm", "tiny bpe lacking bytes"};
    std::vector<std::unique_ptr<Tokenizer>> toks;
    toks.push_back(quill::test::make_tokenizer(quill::test::tiny_bpe_vocab()));
    toks.push_back(quill::test::make_tokenizer(quill::test::tiny_spm_vocab()));
    toks.push_back(quill::test::make_tokenizer(lacking));
    CHECK(quill::decode(*toks[2], toks[2]->encode(std::string("a\x01" "b", 3), false, false)) == "ab");
    for (size_t i = 0; i < names.size(); ++i) {
        const std::string& name = names[i];
        const Tokenizer* tok = toks[i].get();
        for (const std::string& text : {std::string("\xff\xfe abc"), std::string("a\xE2\x82 b\xC3"),
                                       std::string("x\0y", 3), std::string(5000, '\n') + "z"}) {
            INFO(name << ": \"" << escaped(text) << "\"");
            const std::vector<int32_t> ids = tok->encode(text, true, false);
            CHECK(quill::utf8::is_valid(quill::decode(*tok, ids)));
        }
    }
}

TEST_CASE("pre-tokenizers compile and split as Hugging Face's regexes do", "[tokenizer]") {
    const std::string text = "Hello world's 12345 !!!\n\n  x\tIT'S caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 ,.";
    for (const char* name : {"", "default", "llama-bpe", "dbrx", "qwen2", "tekken", "gpt-2", "mpt", "starcoder",
                             "smollm", "refact", "falcon", "deepseek-coder", "deepseek-llm", "deepseek-v3",
                             "bloom", "viking", "chatglm-bpe"}) {
        INFO("pre-tokenizer '" << name << "'");
        const auto spec = quill::pre_tokenizer_spec(name);
        REQUIRE(spec);
        const quill::PreTokenizer pre(spec->regexes);
        std::vector<std::string_view> words;
        pre.split(text, words);
        std::string joined;
        for (std::string_view w : words) joined += w;
        CHECK(joined == text);  // the words cover the text exactly
    }
    CHECK_FALSE(quill::pre_tokenizer_spec("no-such-pre-tokenizer"));

    auto split = [&](const char* name) {
        const quill::PreTokenizer pre(quill::pre_tokenizer_spec(name)->regexes);
        std::vector<std::string_view> words;
        pre.split(text, words);
        return std::vector<std::string>(words.begin(), words.end());
    };
    using V = std::vector<std::string>;
    CHECK(split("llama-bpe") == V{"Hello", " world", "'s", " ", "123", "45", " !!!\n\n", " ", " x", "\tIT", "'S",
                                  " caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", " ,."});
    CHECK(split("gpt-2") == V{"Hello", " world", "'s", " 12345", " !!!", "\n\n ", " x", "\t", "IT", "'", "S",
                              " caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", " ,."});
    CHECK(split("starcoder") == V{"Hello", " world", "'s", " ", "1", "2", "3", "4", "5", " !!!", "\n\n ", " x",
                                  "\t", "IT", "'", "S", " caf\xC3\xA9", " \xE4\xB8\xAD\xE6\x96\x87", " ,."});
}

TEST_CASE("tokenizer metadata errors and unknown pre-tokenizers", "[tokenizer]") {
    quill::GgufWriter empty;
    empty.set("general.architecture", "llama");
    const auto no_vocab = quill::GgufFile::parse("no-vocab", empty.to_bytes());
    CHECK_THROWS_AS(Tokenizer::from_gguf(no_vocab), quill::FileError);

    const quill::GgufFile gpt2 = quill::test::vocab_gguf(quill::test::tiny_bpe_vocab());
    quill::GgufWriter w;
    for (const auto& [key, value] : gpt2.metadata()) {
        if (key.starts_with("tokenizer.")) w.set(key, value);
    }
    w.set("tokenizer.ggml.pre", "no-such-pre-tokenizer");
    const auto unknown_pre = quill::GgufFile::parse("unknown-pre", w.to_bytes());
    auto tok = Tokenizer::from_gguf(unknown_pre);  // warns on stderr
    CHECK(tok->pre_name() == "gpt-2");
    const std::string text = "Hello world, it's 2024! Once upon a time";
    CHECK(tok->encode(text, false, false) == Tokenizer::from_gguf(gpt2)->encode(text, false, false));

    w.set("tokenizer.ggml.model", "wordpiece-of-cake");
    CHECK_THROWS_AS(Tokenizer::from_gguf(quill::GgufFile::parse("bad-model", w.to_bytes())), quill::FileError);
}

namespace {

// A byte-level BPE vocabulary of the given texts (byte-level form) and merges, all normal tokens.
std::unique_ptr<Tokenizer> tiny_bpe(const std::vector<std::string>& pieces, const std::vector<std::string>& merges) {
    using quill::GgufValue;
    std::vector<GgufValue> types(pieces.size(), GgufValue(int32_t{1}));
    quill::GgufWriter w;
    w.set("general.architecture", "llama");
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.pre", "gpt-2");
    w.set("tokenizer.ggml.tokens", GgufValue::strings(pieces));
    w.set("tokenizer.ggml.token_type", GgufValue::array(quill::GgufType::I32, types));
    w.set("tokenizer.ggml.merges", GgufValue::strings(merges));
    return Tokenizer::from_gguf(quill::GgufFile::parse("tiny-bpe", w.to_bytes()));
}

}  // namespace

TEST_CASE("a BPE vocabulary's merges apply by rank, and a repeated token text is an error", "[tokenizer]") {
    // (the index of token texts that the merges are looked up in; the gpt-2 vectors check it at full size)
    const auto tok = tiny_bpe({"a", "b", "ab", "c", "abc", "Ġ", "Ġc"}, {"a b", "ab c", "x y", "a z", "Ġ c"});
    CHECK(tok->encode("abc", false, false) == std::vector<int32_t>{4});
    CHECK(tok->encode("abab", false, false) == std::vector<int32_t>{2, 2});
    CHECK(tok->encode("cab", false, false) == std::vector<int32_t>{3, 2});
    CHECK(tok->encode("ab c", false, false) == std::vector<int32_t>{2, 6});
    CHECK(tok->encode("ba", false, false) == std::vector<int32_t>{1, 0});
    try {
        tiny_bpe({"a", "b", "ab", "c", "b"}, {"a b"});
        FAIL("a repeated token text was taken");
    } catch (const quill::FileError& e) {
        CHECK_THAT(e.what(), Catch::Matchers::Contains("token 4 'b' duplicates an earlier token"));
    }
}

namespace {

// Pushes one token per byte of `bytes`; every push must give valid UTF-8, and the whole must equal `expected`.
void check_byte_stream(const Tokenizer& tok, const std::vector<int32_t>& byte_ids, const std::string& bytes,
                       const std::string& expected) {
    quill::Detokenizer d(tok, false);
    std::string all;
    for (unsigned char b : bytes) {
        const std::string piece = d.push(byte_ids[b]);
        INFO("after byte " << fmt::format("{:02x}", b));
        CHECK(quill::utf8::is_valid(piece));
        all += piece;
    }
    const std::string rest = d.finish();
    CHECK(quill::utf8::is_valid(rest));
    all += rest;
    CHECK(all == expected);
}

}  // namespace

TEST_CASE("detokenizer streams split characters as valid UTF-8", "[tokenizer]") {
    const quill::test::TinyVocab spm_vocab = quill::test::tiny_spm_vocab();
    const auto spm = quill::test::make_tokenizer(spm_vocab);
    const auto gpt2 = quill::test::make_tokenizer(quill::test::tiny_bpe_vocab());

    // Byte tokens: SPM <0xNN>, and the GPT-2 token whose text is the byte's mapped character.
    std::vector<int32_t> spm_bytes(256), gpt2_bytes(256, -1);
    for (int b = 0; b < 256; ++b) {
        spm_bytes[static_cast<size_t>(b)] = 3 + b;
        REQUIRE(spm->token_bytes(3 + b) == std::string(1, static_cast<char>(b)));
    }
    for (int32_t id = 0; id < gpt2->n_vocab(); ++id) {
        const std::string& bytes = gpt2->token_bytes(id);
        if (bytes.size() == 1) gpt2_bytes[static_cast<uint8_t>(bytes[0])] = id;
    }
    REQUIRE(std::find(gpt2_bytes.begin(), gpt2_bytes.end(), -1) == gpt2_bytes.end());

    const std::string fffd(quill::utf8::kReplacement);
    const std::vector<std::pair<std::string, std::string>> streams = {
        {"a\xC3\xA9z", "a\xC3\xA9z"},                                           // é, 2 bytes
        {"\xE2\x82\xAC 5", "\xE2\x82\xAC 5"},                                   // €, 3 bytes
        {"\xF0\x9F\x98\x80!", "\xF0\x9F\x98\x80!"},                             // 😀, 4 bytes
        {"\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD"},  // 👍🏽
        {"\xE4\xB8\xAD\xE6\x96\x87", "\xE4\xB8\xAD\xE6\x96\x87"},               // 中文
        {"A\xF0\x9F\x98" "B", "A" + fffd + "B"},                                // truncated emoji
        {"\x80x", fffd + "x"},                                                  // stray continuation byte
        {"\xC0\xAF", fffd + fffd},                                              // overlong
        {"\xED\xA0\x80", fffd + fffd + fffd},                                   // surrogate
        {"ok\xE2\x82", "ok" + fffd},                                            // incomplete at the end
        {"\xFF\xC3\xA9", fffd + "\xC3\xA9"},
    };
    for (const auto& [bytes, expected] : streams) {
        INFO("stream \"" << escaped(bytes) << "\"");
        check_byte_stream(*spm, spm_bytes, bytes, expected);
        check_byte_stream(*gpt2, gpt2_bytes, bytes, expected);
    }

    // Control tokens print nothing; the SPM dummy-prefix space goes only at the start of a text.
    quill::Detokenizer start(*spm, true);
    CHECK(start.push(1).empty());
    CHECK(start.push(spm_vocab.id("▁Hello")) == "Hello");
    CHECK(start.push(spm_vocab.id("▁world")) == " world");
    quill::Detokenizer cont(*spm, false);
    CHECK(cont.push(spm_vocab.id("▁Hello")) == " Hello");
    CHECK(quill::decode(*spm, spm->encode("  two spaces", true, false)) == "  two spaces");
}

}  // namespace test_tokenizer
