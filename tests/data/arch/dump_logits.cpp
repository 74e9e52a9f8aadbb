// llama.cpp's prompt logits (every position) and greedy continuation for a GGUF, in the format of
// tests/data/arch/*.prompt_logits.txt and *.greedy.txt (not built by CMake; made gemma4-tiny-*, gemma4-moe-tiny-*,
// gemma4-e-tiny-*, glm4-tiny-*, granite-tiny-*, olmo2-tiny-*, exaone4-tiny-*, ernie4_5-tiny-*, seed_oss-tiny-*,
// qwen35-tiny-*, qwen2vl-tiny-*, qwen3vl-tiny-*, qwen3vlmoe-tiny-*, glm4v-tiny-*, exaone-tiny-*, granitehybrid-tiny-*,
// lfm2-tiny-*, qwen35moe-tiny-*, qwen2moe-tiny-*, glm4moe-tiny-*, lfm2moe-tiny-*, qwen3next-tiny-*, deepseek2-tiny-*,
// deepseek2-lite-tiny-*, deepseek2-fused-tiny-*, mistral4-tiny-*, granitemoe-tiny-*, cohere2-tiny-*,
// command-r-tiny-*, minimax-m2-tiny-*, ernie4_5-moe-tiny-*, olmoe-tiny-*, nemotron_h-tiny-*, nemotron_h_moe-tiny-*,
// llama4-tiny-*, olmo3-tiny-*, falcon-h1-tiny-*, gemma3n-tiny-*, hunyuan-dense-tiny-*, hunyuan-moe-tiny-*,
// arcee-tiny-*, apertus-tiny-*, bailingmoe2-tiny-*, dots1-tiny-*, afmoe-tiny-*, exaone-moe-tiny-*, cohere2moe-tiny-*,
// granite-swa-tiny-*, granite-swa-moe-tiny-*, deepseek32-tiny-*, glm-dsa-tiny-*, step35-tiny-*, laguna-tiny-*,
// laguna-m-tiny-*, mamba2-tiny-*, mamba-tiny-*,
// falcon-mamba-tiny-*, each from the file
// `quill bench --synthetic SHAPE --dtype f32|f16 --save` writes, as below):
// context of 256, one thread, KV f32, no flash attention, the prompt in one batch, then one token a call.
//   L=llama.cpp (llama-cpp-python 0.3.36's vendored copy, built)
//   g++ -O1 -std=c++17 -I$L/include -I$L/ggml/include dump_logits.cpp -L$L/build/bin -lllama -lggml -lggml-base \
//       -Wl,-rpath,$L/build/bin -o dump_logits
//   quill bench --synthetic gemma4-tiny --dtype f32 --save gemma4-tiny-f32.gguf -p 4 -n 2 -r 1
//   dump_logits gemma4-tiny-f32.gguf gemma4-tiny-f32 24 1 300 45 72 101 260 311 99 13 280 290 33 65 270 120 305 2 \
//       77 88 261 262 150 151 299 10 318 44 55 66 200 201 202
#include "llama.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 5) return 2;
    const std::string path = argv[1], stem = argv[2];
    const int n_greedy = std::atoi(argv[3]);
    std::vector<llama_token> prompt;
    for (int i = 4; i < argc; ++i) prompt.push_back(std::atoi(argv[i]));
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(path.c_str(), mp);
    if (!model) { std::fprintf(stderr, "load failed\n"); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;
    cp.n_ubatch = 256;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) { std::fprintf(stderr, "context failed\n"); return 1; }
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);
    llama_batch b = llama_batch_init(512, 0, 1);
    b.n_tokens = 0;
    for (size_t i = 0; i < prompt.size(); ++i) {
        b.token[i] = prompt[i]; b.pos[i] = (llama_pos)i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
        b.n_tokens++;
    }
    if (llama_decode(ctx, b) != 0) { std::fprintf(stderr, "decode failed\n"); return 1; }
    std::string name = path.substr(path.find_last_of('/') + 1);
    FILE* lf = std::fopen((stem + ".prompt_logits.txt").c_str(), "w");
    std::fprintf(lf, "# llama.cpp (llama-cpp-python 0.3.36 vendor) CPU, n_threads=1, KV f32; one line per prompt position: full logits (n_vocab=%d)\n", nv);
    for (size_t p = 0; p < prompt.size(); ++p) {
        std::fprintf(lf, "pos %zu token %d\n", p, prompt[p]);
        const float* l = llama_get_logits_ith(ctx, (int)p);
        for (int i = 0; i < nv; ++i) std::fprintf(lf, "%.7g%c", l[i], (i % 16 == 15 || i == nv - 1) ? '\n' : ' ');
    }
    std::fclose(lf);
    std::vector<llama_token> gen;
    const float* l = llama_get_logits_ith(ctx, (int)prompt.size() - 1);
    for (int s = 0; s < n_greedy; ++s) {
        int best = 0;
        for (int i = 1; i < nv; ++i) if (l[i] > l[best]) best = i;
        gen.push_back(best);
        if (s + 1 == n_greedy) break;
        llama_batch one = llama_batch_get_one(&gen.back(), 1);
        if (llama_decode(ctx, one) != 0) { std::fprintf(stderr, "decode failed\n"); return 1; }
        l = llama_get_logits_ith(ctx, -1);
    }
    FILE* gf = std::fopen((stem + ".greedy.txt").c_str(), "w");
    std::fprintf(gf, "# llama.cpp (llama-cpp-python 0.3.36 vendor) CPU greedy (argmax) decode, one token per llama_decode call after the prompt batch, KV f32\n");
    std::fprintf(gf, "model %s\nprompt_tokens", name.c_str());
    for (auto t : prompt) std::fprintf(gf, " %d", t);
    std::fprintf(gf, "\ngenerated_tokens");
    for (auto t : gen) std::fprintf(gf, " %d", t);
    std::fprintf(gf, "\ngenerated_text_begin\n");
    for (auto t : gen) {
        std::fputs(llama_vocab_get_text(vocab, t), gf);
    }
    std::fprintf(gf, "\ngenerated_text_end\n");
    std::fclose(gf);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
