// Prompt lookup on the CUDA backend: a decode step with a sequence's guessed tokens beside its decode token (several
// decode tokens of one slot in one forward pass) gives the text of plain greedy decoding, as on the CPU
// (tests/cli/test_lookup.cpp).
#ifdef QUILL_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/device.h"
#include "engine/model/model.h"
#include "engine/runtime/generator.h"
#include "tests/support/random_model.h"
#include "tests/support/test_util.h"
#include "tokenizer/tokenizer.h"

#include <catch2/catch.hpp>

namespace test_cuda_lookup {

using namespace quill;

TEST_CASE("prompt lookup on the CUDA backend gives the text of plain greedy decoding", "[cuda]") {
    if (cuda::probe().count == 0) {
        test::skip_no_device("no CUDA device here");
        return;
    }
    for (auto which : {test::TinyModel::spm, test::TinyModel::spm_q8_0}) {
        auto model = Model::load(test::tiny_model_file(which).string());
        auto tok = Tokenizer::from_gguf(model->file);
        cuda::CudaBackendOptions o;
        o.n_ctx = 256;
        cuda::CudaBackend backend(model->config, model->weights, o);
        const std::vector<int32_t> prompt = tok->encode("Once upon a time there was a dog", true, false);
        std::vector<std::vector<int32_t>> texts;
        for (int lookup : {0, 4, 32}) {
            GenerationParams gp;
            gp.max_tokens = 150;
            gp.sampling.temperature = 0;
            gp.lookup = lookup;
            Generation gen(*tok, prompt, gp, 256);
            generate(backend, gen, 0, [](std::string_view) {});
            texts.push_back(gen.generated());
        }
        CHECK(texts[1] == texts[0]);
        CHECK(texts[2] == texts[0]);
    }
}
#endif

}  // namespace test_cuda_lookup
