// llama.cpp's logits at chosen positions of a long prompt, for the architectures whose features start far into a
// sequence (llama4's chunks of 8192 positions and its attention temperature from position 8191, which llama.cpp fixes
// whatever the file says): tests/data/arch/STEM.long_logits.txt, "pos P token T" then the n_vocab logits of P, for
// each position asked. Not built by CMake. The prompt's token i is 3 + (i * 37 + 11) % (n_vocab - 3) (the tests make
// the same prompt). Context of N + 64, one thread, KV f32, no flash attention, the prompt in batches of 512.
// Made llama4-tiny-f32.long_logits.txt from the file `quill bench --synthetic llama4-tiny --dtype f32 --save` writes:
//   L=llama.cpp (llama-cpp-python 0.3.36's vendored copy, built)
//   g++ -O1 -std=c++17 -I$L/include -I$L/ggml/include dump_long_logits.cpp -L$L/build/bin -lllama -lggml \
//       -lggml-base -Wl,-rpath,$L/build/bin -o dump_long_logits
//   dump_long_logits llama4-tiny-f32.gguf llama4-tiny-f32 8200 100 8190 8191 8192 8193 8199
#include "llama.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 5) return 2;
    const std::string path = argv[1], stem = argv[2];
    const int n_prompt = std::atoi(argv[3]);
    std::vector<int> wanted;
    for (int i = 4; i < argc; ++i) wanted.push_back(std::atoi(argv[i]));
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(path.c_str(), mp);
    if (!model) { std::fprintf(stderr, "load failed\n"); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_prompt + 64;
    cp.n_batch = 512;
    cp.n_ubatch = 512;
    cp.n_threads = 1;
    cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    llama_context* ctx = llama_init_from_model(model, cp);
    if (!ctx) { std::fprintf(stderr, "context failed\n"); return 1; }
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    auto token = [&](int i) { return 3 + (i * 37 + 11) % (nv - 3); };
    FILE* lf = std::fopen((stem + ".long_logits.txt").c_str(), "w");
    std::fprintf(lf, "# llama.cpp (llama-cpp-python 0.3.36 vendor) CPU, n_threads=1, KV f32; prompt of %d tokens, "
                     "token i = 3 + (i * 37 + 11) %% (n_vocab - 3); the logits of the positions below (n_vocab=%d)\n",
                 n_prompt, nv);
    llama_batch b = llama_batch_init(512, 0, 1);
    for (int p0 = 0; p0 < n_prompt; p0 += 512) {
        b.n_tokens = 0;
        for (int p = p0; p < std::min(n_prompt, p0 + 512); ++p) {
            const int i = b.n_tokens++;
            b.token[i] = token(p); b.pos[i] = p; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0;
            b.logits[i] = std::find(wanted.begin(), wanted.end(), p) != wanted.end();
        }
        if (llama_decode(ctx, b) != 0) { std::fprintf(stderr, "decode failed\n"); return 1; }
        for (int i = 0; i < b.n_tokens; ++i) {
            if (!b.logits[i]) continue;
            std::fprintf(lf, "pos %d token %d\n", b.pos[i], b.token[i]);
            const float* l = llama_get_logits_ith(ctx, i);
            for (int v = 0; v < nv; ++v) std::fprintf(lf, "%.7g%c", l[v], (v % 16 == 15 || v == nv - 1) ? '\n' : ' ');
        }
    }
    std::fclose(lf);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
