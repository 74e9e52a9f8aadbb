// llama.cpp's logits at every prompt position (and n greedy tokens) of a GGUF, in the format of quill's
// tests/data/arch/*.prompt_logits.txt and *.greedy.txt. CPU, one thread, KV f32, n_ctx 256.
// usage: dump_iq2_logits MODEL "TOKENS" N LOGITS_OUT GREEDY_OUT
#include <llama.h>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
    if (argc != 6) { fprintf(stderr, "usage: dump_iq2_logits MODEL TOKENS N LOGITS GREEDY\n"); return 2; }
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    llama_model* model = llama_model_load_from_file(argv[1], mp);
    if (!model) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 256;
    cp.n_batch = 256;
    cp.n_ubatch = 256;
    cp.n_threads = cp.n_threads_batch = 1;
    cp.type_k = cp.type_v = GGML_TYPE_F32;
    llama_context* ctx = llama_init_from_model(model, cp);
    const int nv = llama_vocab_n_tokens(llama_model_get_vocab(model));
    std::vector<llama_token> toks;
    std::istringstream ss(argv[2]);
    for (int t; ss >> t;) toks.push_back(t);
    const int n_gen = atoi(argv[3]);
    llama_batch b = llama_batch_init(256, 0, 1);
    b.n_tokens = (int)toks.size();
    for (size_t i = 0; i < toks.size(); ++i) {
        b.token[i] = toks[i]; b.pos[i] = (int)i; b.n_seq_id[i] = 1; b.seq_id[i][0] = 0; b.logits[i] = 1;
    }
    if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
    FILE* f = fopen(argv[4], "w");
    fprintf(f, "# llama.cpp (llama-cpp-python 0.3.36 vendor) CPU, n_threads=1, KV f32; one line per prompt position: full logits (n_vocab=%d)\n", nv);
    for (size_t i = 0; i < toks.size(); ++i) {
        fprintf(f, "pos %zu token %d\n", i, toks[i]);
        const float* l = llama_get_logits_ith(ctx, (int)i);
        for (int v = 0; v < nv; ++v) fprintf(f, "%.7g%s", l[v], (v + 1) % 16 == 0 || v + 1 == nv ? "\n" : " ");
    }
    fclose(f);
    auto argmax = [&](const float* l) { int best = 0; for (int v = 1; v < nv; ++v) if (l[v] > l[best]) best = v; return best; };
    std::vector<int> gen;
    int next = argmax(llama_get_logits_ith(ctx, (int)toks.size() - 1));
    int pos = (int)toks.size();
    for (int k = 0; k < n_gen; ++k) {
        gen.push_back(next);
        b.n_tokens = 1; b.token[0] = next; b.pos[0] = pos++; b.n_seq_id[0] = 1; b.seq_id[0][0] = 0; b.logits[0] = 1;
        if (llama_decode(ctx, b)) { fprintf(stderr, "decode failed\n"); return 1; }
        next = argmax(llama_get_logits_ith(ctx, 0));
    }
    FILE* g = fopen(argv[5], "w");
    fprintf(g, "# llama.cpp (llama-cpp-python 0.3.36 vendor) CPU greedy (argmax) decode, one token per llama_decode call after the prompt batch, KV f32\n");
    fprintf(g, "prompt_tokens");
    for (int t : toks) fprintf(g, " %d", t);
    fprintf(g, "\ngenerated_tokens");
    for (int t : gen) fprintf(g, " %d", t);
    fprintf(g, "\ngenerated_text_begin\n");
    for (int t : gen) {
        char buf[256];
        const int n = llama_token_to_piece(llama_model_get_vocab(model), t, buf, sizeof(buf), 0, false);
        if (n > 0) fwrite(buf, 1, n, g);
    }
    fprintf(g, "\ngenerated_text_end\n");
    fclose(g);
    llama_batch_free(b);
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
