// A ready-to-run model: the mapped GGUF, its tokenizer and a backend, built from the options every command
// shares (model path, device, threads, context, KV type). run, chat, batch and bench all start here, so device
// choice, the context size and the load line live in one place.
#pragma once

#include "engine/io/cancel.h"
#include "engine/model/model.h"
#include "engine/runtime/backend.h"
#include "tokenizer/tokenizer.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace quill {

enum class DeviceChoice { auto_, cpu, cuda };
// "auto", "cpu", "cuda"; UsageError otherwise.
DeviceChoice parse_device(std::string_view name);
// "f16", "f32"; UsageError otherwise.
KvType parse_kv_type(std::string_view name);

struct SessionOptions {
    std::string model;      // GGUF path; empty: $QUILL_MODEL, then the default model (see resolve_model_path)
    std::string tokenizer;  // a sentencepiece tokenizer.model overriding the GGUF's vocabulary
    DeviceChoice device = DeviceChoice::auto_;
    // --devices: the layers split across these backends (parse_devices' spelling, "cpu,cpu@12"); empty: `device`.
    std::string devices;
    std::optional<int64_t> gpu_layers;  // --gpu-layers: the last N layers on the GPU, the rest on the CPU
    int threads = 0;        // CPU threads; 0: the physical cores
    int64_t ctx = 0;        // positions per slot; 0: the model's, capped to fit memory
    int64_t n_slots = 1;    // sequences in flight at once (batch --parallel)
    KvType kv_type = KvType::f16;
    // When ctx is 0: the positions a slot will need at most, asked once the model and tokenizer are loaded and before
    // the backend is built (0: not known). A context fitted that way (capped to the model's) takes no memory beyond
    // what the requests can use, and the CPU backend backs it with 2 MiB pages.
    std::function<int64_t(const struct Session&)> context_needed;
    bool kv_huge_pages = false;  // the CPU backend's CpuBackendOptions::kv_huge_pages (set for a fitted context)
    // A recurrent model's snapshots of each slot's state (CpuBackendOptions::state_snapshots; chat keeps a few).
    int64_t state_snapshots = 0;
    // Say on stderr why "auto" chose the CPU when no GPU can be used (no driver, no device, no CUDA in this build);
    // said only when asked, since every command would say it on a machine without a GPU.
    bool verbose = false;
    CancelFlag cancel = nullptr;  // raised (a signal): Interrupted while the CPU backend packs the weights
};

// The file name of the default model, looked for in ./models, next to the binary and where `cmake --install` puts it
// (<prefix>/share/quill/models, with the binary in <prefix>/bin; CMakeLists.txt installs it under this name).
inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";

// `given` when non-empty, else $QUILL_MODEL when non-empty, else the default model; either of the first two may be
// hf:owner/repo[:QUANT] (the model in the Hugging Face cache, pulled on first use). UsageError saying where it looked.
std::string resolve_model_path(const std::string& given);

// Bytes of memory the OS says are available (MemAvailable), or 8 GiB when it cannot tell.
size_t available_memory();

// The host memory that n_slots sequences of n_ctx positions take on the CPU: the KV cache (cpu::kv_cache_bytes) and
// a recurrent model's state with state_snapshots copies of each slot's (cpu::recurrent_state_bytes).
size_t sequence_bytes(const ModelConfig& config, KvType kv, int64_t n_ctx, int64_t n_slots,
                      int64_t state_snapshots = 0);

// The context: `asked` when > 0 (make_backend checks that it fits; one warning line when it is above the model's
// training context), else the model's training context capped so that the sequences' memory (sequence_bytes) of
// n_slots sequences takes at most a quarter of the available memory (said on stderr when it caps).
int64_t choose_context(const ModelConfig& config, int64_t asked, KvType kv, int64_t n_slots,
                       int64_t state_snapshots = 0);

// UsageError when the memory of n_slots sequences of n_ctx positions (sequence_bytes) cannot fit in the available
// memory, saying how large it would be and the largest context that fits.
void check_context_fits(const ModelConfig& config, int64_t n_ctx, KvType kv, int64_t n_slots,
                        int64_t state_snapshots = 0);

// Why `run` would refuse this file, or "" when it would load it: the checks of Session::open (config, weights,
// tokenizer, the weight types the backend multiplies), without allocating a backend.
std::string why_not_runnable(const GgufFile& file);

// A backend for these weights (which must outlive it), on the device asked: "cpu" never touches the driver; "cuda"
// builds the CUDA backend or fails saying why (no device, a weight type without a kernel, not enough GPU memory);
// "auto" tries CUDA when a GPU is present and otherwise uses the CPU: with one line on stderr saying why when a GPU
// is there but cannot run the model, or when o.verbose. More threads than the CPUs this process may use are capped
// to those CPUs with one warning line (spinning threads beyond them stall each other). The CPU backend checks that
// n_ctx fits in host memory (check_context_fits); the CUDA backend plans its device memory first and, when the user
// set no context (o.ctx == 0), caps n_ctx to what fits. With o.devices or o.gpu_layers, a device plan
// (plan_devices) places the layers, and a plan of several ranges runs as a SplitBackend whose load line states the
// plan; a range on a GPU is refused (UsageError) while the CUDA backend cannot run part of a model.
std::unique_ptr<Backend> make_backend(const ModelConfig& config, const Weights& weights, const SessionOptions& o,
                                      int64_t n_ctx);

struct Session {
    std::unique_ptr<Model> model;
    std::unique_ptr<Tokenizer> tokenizer;
    std::unique_ptr<Backend> backend;
    int64_t n_ctx = 0;
    bool context_fitted = false;  // n_ctx came from SessionOptions::context_needed
    double load_ms = 0;

    // Loads everything. Throws FileError / UsageError with a one-line message.
    static std::unique_ptr<Session> open(const SessionOptions& options);

    // "quill: <name> (<MiB>) loaded in <ms>; cpu backend, <n> threads, <isa> kernels; context <n>"
    std::string load_line() const;
};

// What this build and machine offer CUDA: "built without CUDA", "no CUDA driver", "NVIDIA H100 80GB HBM3 (compute
// capability 9.0, 79.1 GiB)"; asks the driver, never fails.
std::string describe_cuda();

}  // namespace quill
