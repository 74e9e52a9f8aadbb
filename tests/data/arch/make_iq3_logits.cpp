// llama.cpp's logits at every prompt position and its greedy continuation, in tests/data/arch's formats, for the
// tiny IQ3 models of tests/unit/cpu/test_quant_iq3.cpp; not built by CMake or run by CI. Built against the oracle's
// libraries (the llama.cpp that llama-cpp-python 0.3.36 vendors, L its folder) and run on each saved model:
//   g++ -O1 -std=c++17 -I$L/include -I$L/ggml/include make_iq3_logits.cpp -o logits -L$L/build/bin -lllama -lggml \
//       -lggml-base -Wl,-rpath,$L/build/bin
//   quill bench --synthetic llama-tiny-256 --dtype iq3_xxs -p 1 -n 1 -r 1 --save llama-tiny-256-iq3_xxs.gguf
//   ./logits llama-tiny-256-iq3_xxs.gguf llama-tiny-256-iq3_xxs tests/data/arch
// The prompt: BOS, then 31 ids spread over the vocabulary; one batch with every position's logits, then 24 greedy
// tokens one llama_decode call each.
#include "llama.h"
#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc < 4) return 2;
    const std::string path = argv[1], stem = argv[2], out = argv[3];
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(path.c_str(), mp);
    if (!model) return 1;
    const llama_vocab* vocab = llama_model_get_vocab(model);
    const int nv = llama_vocab_n_tokens(vocab);
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 64; cp.n_batch = 64; cp.n_ubatch = 64; cp.n_threads = 1; cp.n_threads_batch = 1;
    cp.type_k = GGML_TYPE_F32; cp.type_v = GGML_TYPE_F32;
    llama_context* ctx = llama_init_from_model(model, cp);
    std::vector<llama_token> prompt = {1};
    for (int i = 1; i < 32; ++i) prompt.push_back((i * 97 + 13) % (nv - 3) + 3);
    llama_batch b = llama_batch_init(64, 0, 1);
    for (int i = 0; i < 32; ++i) {
        b.token[i] = prompt[i]; b.pos[i] = i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
    }
    b.n_tokens = 32;
    if (llama_decode(ctx, b)) return 1;
    FILE* f = std::fopen((out + "/" + stem + ".prompt_logits.txt").c_str(), "w");
    std::fprintf(f, "# llama.cpp (llama-cpp-python 0.3.36 vendor) CPU, n_threads=1, KV f32; one line per prompt position: full logits (n_vocab=%d)\n", nv);
    for (int i = 0; i < 32; ++i) {
        const float* l = llama_get_logits_ith(ctx, i);
        std::fprintf(f, "pos %d token %d\n", i, prompt[i]);
        for (int v = 0; v < nv; ++v) std::fprintf(f, "%.7g%s", l[v], (v % 16 == 15 || v + 1 == nv) ? "\n" : " ");
    }
    std::fclose(f);
    std::vector<llama_token> gen;
    llama_token last = 0;
    {
        const float* l = llama_get_logits_ith(ctx, 31);
        int best = 0; for (int v = 1; v < nv; ++v) if (l[v] > l[best]) best = v;
        last = best;
    }
    for (int s = 0; s < 24; ++s) {
        gen.push_back(last);
        if (s == 23) break;
        b.n_tokens = 1; b.token[0] = last; b.pos[0] = 32 + s; b.n_seq_id[0] = 1; b.seq_id[0][0] = 0; b.logits[0] = 1;
        if (llama_decode(ctx, b)) return 1;
        const float* l = llama_get_logits_ith(ctx, 0);
        int best = 0; for (int v = 1; v < nv; ++v) if (l[v] > l[best]) best = v;
        last = best;
    }
    f = std::fopen((out + "/" + stem + ".greedy.txt").c_str(), "w");
    std::fprintf(f, "# llama.cpp (llama-cpp-python 0.3.36 vendor) CPU greedy (argmax) decode, one token per llama_decode call after the prompt batch, KV f32\n");
    std::fprintf(f, "model %s.gguf\nprompt_tokens", stem.c_str());
    for (auto t : prompt) std::fprintf(f, " %d", t);
    std::fprintf(f, "\ngenerated_tokens");
    for (auto t : gen) std::fprintf(f, " %d", t);
    std::fprintf(f, "\n");
    std::fclose(f);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
