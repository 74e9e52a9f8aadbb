// engine/hub/ without a network: names and quantizations, the choice of a model among a repository's files, the
// GGUF header read from a file's first bytes, and SHA-256.
#include "engine/error.h"
#include "engine/format/gguf.h"
#include "engine/hub/api.h"
#include "engine/hub/gguf_header.h"
#include "engine/hub/quant_choice.h"
#include "engine/hub/sha256.h"
#include "tests/support/random_model.h"

#include <catch2/catch.hpp>

namespace test_hub {

using namespace quill;
using namespace quill::hub;

namespace {

std::vector<RepoFile> files(const std::vector<std::string>& paths) {
    std::vector<RepoFile> out;
    for (const auto& p : paths) out.push_back({p, 1000, ""});
    return out;
}

std::string chosen(const std::vector<std::string>& paths, const std::string& quant) {
    return choose_model(gguf_models(files(paths)), quant, "o/r").files.front();
}

}  // namespace

TEST_CASE("hub: the quantization is read from GGUF file names", "[hub]") {
    CHECK(quant_of("Qwen2.5-0.5B-Instruct-Q4_K_M.gguf") == "Q4_K_M");
    CHECK(quant_of("qwen2.5-0.5b-instruct-q4_k_m.gguf") == "Q4_K_M");
    CHECK(quant_of("SmolLM2-135M-Instruct.Q4_1.gguf") == "Q4_1");
    CHECK(quant_of("Q8_0/Llama-3-70B-Q8_0-00001-of-00002.gguf") == "Q8_0");
    CHECK(quant_of("gemma-3-270m-it-IQ4_XS.gguf") == "IQ4_XS");
    CHECK(quant_of("model-bf16.gguf") == "BF16");
    CHECK(quant_of("gpt-oss-20b-MXFP4.gguf") == "MXFP4");
    CHECK(quant_of("Phi-3-mini-4k-instruct-q4.gguf") == "Q4");
    CHECK(quant_of("ggml-model.gguf") == "");
    CHECK(quant_of("Q4_K_M-notes-model.gguf") == "Q4_K_M");
}

TEST_CASE("hub: a repository's GGUF files become models, split parts together and projectors left out", "[hub]") {
    const auto models = gguf_models(files({"README.md", "m-Q4_K_M.gguf", "mmproj-m-f16.gguf",
                                           "big/m-Q8_0-00002-of-00002.gguf", "big/m-Q8_0-00001-of-00002.gguf",
                                           "half/m-Q6_K-00001-of-00003.gguf"}));
    REQUIRE(models.size() == 3);
    CHECK(models[0].files == std::vector<std::string>{"big/m-Q8_0-00001-of-00002.gguf", "big/m-Q8_0-00002-of-00002.gguf"});
    CHECK(models[0].quant == "Q8_0");
    CHECK(models[0].bytes == 2000);
    CHECK(models[0].complete);
    CHECK(models[1].quant == "Q6_K");
    CHECK(!models[1].complete);
    CHECK(models[2].files == std::vector<std::string>{"m-Q4_K_M.gguf"});
}

TEST_CASE("hub: the default model is Q4_K_M, else the nearest quantization, and a choice that is not one fails", "[hub]") {
    const std::vector<std::string> repo{"m-Q2_K.gguf", "m-Q4_K_M.gguf", "m-Q8_0.gguf", "m-F16.gguf"};
    CHECK(chosen(repo, "") == "m-Q4_K_M.gguf");
    CHECK(chosen(repo, "q8_0") == "m-Q8_0.gguf");
    CHECK(chosen(repo, "m-F16.gguf") == "m-F16.gguf");
    CHECK(chosen({"m-Q3_K_M.gguf", "m-Q6_K.gguf", "m-F16.gguf"}, "") == "m-Q3_K_M.gguf");
    CHECK(chosen({"m-Q4_0.gguf", "m-Q5_K_M.gguf"}, "") == "m-Q4_0.gguf");
    CHECK(chosen({"only.gguf"}, "") == "only.gguf");
    CHECK_THROWS_WITH(chosen(repo, "Q5_K_M"), Catch::Contains("no GGUF file for Q5_K_M") &&
                                                  Catch::Contains("m-Q2_K.gguf (1 kB)"));
    CHECK_THROWS_AS(chosen({"a-Q4_K_M.gguf", "b-Q4_K_M.gguf"}, ""), UsageError);
    CHECK_THROWS_WITH(chosen({"a.gguf", "b.gguf"}, ""), Catch::Contains("2 GGUF models match"));
    CHECK_THROWS_WITH(chosen({"README.md"}, ""), Catch::Contains("no GGUF file"));
}

TEST_CASE("hub: model names parse as owner/repo[@revision][:QUANT]", "[hub]") {
    const RepoRef a = parse_repo_ref("Qwen/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M");
    CHECK(a.repo == "Qwen/Qwen2.5-0.5B-Instruct-GGUF");
    CHECK(a.revision == "main");
    CHECK(a.quant == "Q4_K_M");
    const RepoRef b = parse_repo_ref("o/r@v1.0:model-q8_0.gguf");
    CHECK(b.revision == "v1.0");
    CHECK(b.quant == "model-q8_0.gguf");
    CHECK(b.text() == "o/r@v1.0:model-q8_0.gguf");
    for (const char* bad : {"", "repo", "o/r/x", "o/", "/r", "o/r:", "models/x.gguf", "o r/x"})
        CHECK_THROWS_AS(parse_repo_ref(bad), UsageError);
}

TEST_CASE("hub: the GGUF header is read from a file's first bytes", "[hub]") {
    const std::vector<uint8_t> image = test::make_tiny_gguf({});
    const auto header = parse_gguf_header(image, "tiny");
    REQUIRE(header);
    CHECK(header->architecture == "llama");
    CHECK(header->tensors.size() == GgufFile::parse("tiny", image).tensors().size());
    CHECK(header->bytes < image.size());
    CHECK(main_weight_type(*header) == "f32");
    CHECK(why_unsupported(*header).empty());
    // Cut anywhere inside the header: more bytes are needed, never an error.
    for (size_t n : {size_t{0}, size_t{3}, size_t{24}, static_cast<size_t>(header->bytes / 2),
                     static_cast<size_t>(header->bytes - 1)})
        CHECK(!parse_gguf_header(std::span(image).first(n), "tiny"));
    CHECK(parse_gguf_header(std::span(image).first(header->bytes), "tiny"));
    std::vector<uint8_t> bad = image;
    bad[0] = 'X';
    CHECK_THROWS_WITH(parse_gguf_header(bad, "tiny"), Catch::Contains("not a GGUF header"));
}

TEST_CASE("hub: an architecture or a weight type quill cannot run is named from the header", "[hub]") {
    GgufWriter rwkv;
    rwkv.set("general.architecture", "rwkv6");
    CHECK(why_unsupported(*parse_gguf_header(rwkv.to_bytes(), "m")).find("architecture 'rwkv6'") != std::string::npos);

    GgufWriter iq;
    iq.set("general.architecture", "llama");
    iq.add_tensor("blk.0.attn_norm.weight", GgmlType::F32, {32}, std::vector<uint8_t>(128));
    iq.add_tensor("blk.0.attn_q.weight", GgmlType::TQ1_0, {256, 2}, std::vector<uint8_t>(2 * 54));
    const auto header = parse_gguf_header(iq.to_bytes(), "iq");
    REQUIRE(header);
    CHECK(main_weight_type(*header) == "tq1_0");
    CHECK(why_unsupported(*header) == "tensor 'blk.0.attn_q.weight' has weight type tq1_0, which quill cannot multiply");
}

TEST_CASE("hub: SHA-256 matches the standard test vectors, in pieces as at once", "[hub]") {
    auto hex = [](std::string_view s, size_t piece) {
        Sha256 h;
        for (size_t i = 0; i < s.size(); i += piece)
            h.update({reinterpret_cast<const uint8_t*>(s.data()) + i, std::min(piece, s.size() - i)});
        return h.hex();
    };
    CHECK(hex("", 1) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    CHECK(hex("abc", 1) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    const std::string two_blocks = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    CHECK(hex(two_blocks, 7) == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    CHECK(hex(two_blocks, 7) == hex(two_blocks, two_blocks.size()));
}

}  // namespace test_hub
