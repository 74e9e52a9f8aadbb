#include "engine/session.h"

#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/hub/pull.h"
#include "engine/io/input.h"
#include "engine/io/output.h"
#include "engine/io/escape.h"
#include "engine/runtime/device_plan.h"
#include "engine/runtime/split_backend.h"
#ifdef QUILL_HAVE_CUDA
#include "cuda/cuda_backend.h"
#include "cuda/device.h"
#endif

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace quill {

namespace fs = std::filesystem;

DeviceChoice parse_device(std::string_view name) {
    if (name == "auto") return DeviceChoice::auto_;
    if (name == "cpu") return DeviceChoice::cpu;
    if (name == "cuda") return DeviceChoice::cuda;
    throw UsageError(fmt::format("--device '{}': expected auto, cpu or cuda", name));
}

KvType parse_kv_type(std::string_view name) {
    if (name == "f16") return KvType::f16;
    if (name == "f32") return KvType::f32;
    throw UsageError(fmt::format("--kv-type '{}': expected f16 or f32", name));
}

std::string resolve_model_path(const std::string& given) {
    const char* env = std::getenv("QUILL_MODEL");
    const std::string named = !given.empty() ? given : env ? env : "";
    if (named.starts_with("hf:")) return hub::resolve_hf_model(named.substr(3));
    if (!named.empty()) return named;
    std::vector<fs::path> places{fs::path("models") / kDefaultModelFile};
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        places.push_back(exe.parent_path().parent_path() / "models" / kDefaultModelFile);
        places.push_back(exe.parent_path() / "models" / kDefaultModelFile);
        places.push_back(exe.parent_path().parent_path() / QUILL_INSTALLED_MODELS / kDefaultModelFile);
    }
    std::string looked;
    for (const auto& p : places) {
        if (fs::exists(p)) return p.string();
        looked += (looked.empty() ? "" : ", ") + p.string();
    }
    throw UsageError(fmt::format("no model given (-m) and the default model was not found (looked in: {}); "
                                 "fetch it with models/fetch_default.sh",
                                 looked));
}

size_t available_memory() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    size_t kb = 0;
    while (in >> key >> kb) {
        if (key == "MemAvailable:") return kb * 1024;
        in.ignore(256, '\n');
    }
    return size_t{8} << 30;
}

size_t sequence_bytes(const ModelConfig& c, KvType kv, int64_t n_ctx, int64_t n_slots, int64_t state_snapshots) {
    return cpu::kv_cache_bytes(c, kv, n_ctx, n_slots) + cpu::recurrent_state_bytes(c, n_slots, state_snapshots);
}

namespace {
// The largest context up to `most` whose sequences' memory (sequence_bytes: the CPU KV cache, sliding-window rings
// included, and a recurrent state) takes at most `budget` bytes; 0 when none does.
int64_t largest_context(const ModelConfig& c, KvType kv, int64_t n_slots, int64_t snapshots, size_t budget,
                        int64_t most) {
    int64_t lo = 0, hi = most;  // the cache grows with the context: bisect
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (sequence_bytes(c, kv, mid, n_slots, snapshots) <= budget) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    return lo;
}
}  // namespace

void check_context_fits(const ModelConfig& c, int64_t n_ctx, KvType kv, int64_t n_slots, int64_t snapshots) {
    if (n_ctx <= 0) return;
    const size_t bytes = sequence_bytes(c, kv, n_ctx, n_slots, snapshots);
    const size_t available = available_memory();
    if (bytes <= available) return;
    const std::string slots = n_slots > 1 ? fmt::format(" for {} sequences", n_slots) : "";
    const int64_t fits = largest_context(c, kv, n_slots, snapshots, available, n_ctx);
    throw UsageError(fmt::format("-c {}: the KV cache{}{} would take {}, but only {} of memory is available; {}",
                                 n_ctx, c.recurrent() ? " and recurrent state" : "", slots, format_bytes(bytes),
                                 format_bytes(available),
                                 fits > 0 ? fmt::format("at most -c {} fits", fits) : "no context fits"));
}

int64_t choose_context(const ModelConfig& c, int64_t asked, KvType kv, int64_t n_slots, int64_t snapshots) {
    if (asked > 0) {  // make_backend checks that it fits where the cache will live
        if (c.n_ctx_train > 0 && asked > c.n_ctx_train)
            print_stderr("quill: warning: -c {} is more than the {} tokens the model was trained for; past those its "
                         "output may degrade\n",
                         asked, c.n_ctx_train);
        return asked;
    }
    const int64_t fit =
        std::max<int64_t>(256, largest_context(c, kv, n_slots, snapshots, available_memory() / 4, c.n_ctx_train));
    if (c.n_ctx_train <= fit) return c.n_ctx_train;
    print_stderr("quill: context capped to {} tokens (the model was trained for {}) so the KV cache fits in "
                 "memory; -c sets it\n", fit, c.n_ctx_train);
    return fit;
}

std::string why_not_runnable(const GgufFile& file) {
    try {
        const ModelConfig config = ModelConfig::from_gguf(file);
        const Weights weights = Weights::from_gguf(file, config);
        cpu::CpuBackend::check_weights(weights);
        Tokenizer::from_gguf(file);
    } catch (const FileError& e) {
        return e.what();
    }
    return {};
}

namespace {

#ifdef QUILL_HAVE_CUDA
// The CUDA backend on device 0, with the context capped to the GPU's free memory when the user did not set it.
std::unique_ptr<Backend> make_cuda_backend(const ModelConfig& config, const Weights& weights, const SessionOptions& o,
                                           int64_t n_ctx) {
    cuda::check_model(config, weights);
    cuda::CudaBackendOptions co;
    co.n_ctx = n_ctx;
    co.n_slots = o.n_slots;
    co.kv_type = o.kv_type;
    co.tuning = cuda::read_tuning();  // the QUILL_CUDA_* developer switches (docs/cuda.md)
    if (o.ctx <= 0) {
        const int64_t fit = cuda::largest_context(config, weights, co);
        if (fit >= 1 && fit < n_ctx) {
            print_stderr("quill: context capped to {} tokens so the KV cache fits in GPU memory; -c sets it\n", fit);
            co.n_ctx = fit;
        }
    }
    return std::make_unique<cuda::CudaBackend>(config, weights, co);
}
#endif

cpu::CpuBackendOptions cpu_options(const SessionOptions& o, int64_t n_ctx) {
    cpu::CpuBackendOptions bo;
    bo.n_threads = o.threads;
    if (const int cpus = cpu::ThreadPool::available_cpus(); o.threads > cpus) {
        print_stderr("quill: warning: -t {} is more threads than the {} CPU{} this process may use; using {}\n",
                     o.threads, cpus, cpus == 1 ? "" : "s", cpus);
        bo.n_threads = cpus;
    } else if (const int cores = cpu::ThreadPool::physical_cores(); o.threads > cores) {
        print_stderr("quill: warning: -t {} is more threads than the {} core{} this process may use; the extra "
                     "threads only share cores\n",
                     o.threads, cores, cores == 1 ? "" : "s");
    }
    bo.n_ctx = n_ctx;
    bo.n_slots = o.n_slots;
    bo.cancel = o.cancel;
    bo.kv_type = o.kv_type;
    bo.kv_huge_pages = o.kv_huge_pages;
    bo.state_snapshots = o.state_snapshots;
    return bo;
}

std::unique_ptr<Backend> make_cpu_backend(const ModelConfig& config, const Weights& weights, const SessionOptions& o,
                                          int64_t n_ctx) {
    const cpu::CpuBackendOptions bo = cpu_options(o, n_ctx);
    check_context_fits(config, n_ctx, o.kv_type, o.n_slots, o.state_snapshots);
    return std::make_unique<cpu::CpuBackend>(config, weights, bo);
}

// The GPUs a plan may use: device 0 with its memory, less a reserve for the backend's scratch and the CUDA context.
std::vector<DeviceMemory> gpu_memory() {
    std::vector<DeviceMemory> memory;
#ifdef QUILL_HAVE_CUDA
    if (const cuda::DeviceInfo info = cuda::probe(); info.count > 0)
        memory.push_back({{DeviceSpec::Kind::cuda, 0}, info.total_memory, size_t{1} << 30});
#endif
    return memory;
}

// make_backend with a device plan (o.devices, o.gpu_layers).
std::unique_ptr<Backend> make_planned_backend(const ModelConfig& config, const Weights& weights,
                                              const SessionOptions& o, int64_t n_ctx) {
    if (!o.devices.empty() && o.gpu_layers)
        throw UsageError("--devices and --gpu-layers both place layers: give one of them");
    PlanRequest request = o.devices.empty() ? PlanRequest{} : parse_devices(o.devices);
    request.gpu_layers = o.gpu_layers;
    const std::vector<DeviceMemory> memory = gpu_memory();
    // each layer with its own KV cache or recurrent state
    ModelBytes bytes = model_bytes(tensor_bytes(config, weights), config.n_layer, 0);
    for (int64_t l = 0; l < config.n_layer; ++l) {
        bytes.layers[static_cast<size_t>(l)].cache = cpu::kv_layer_bytes(config, o.kv_type, n_ctx, o.n_slots, l) +
                                                     cpu::recurrent_layer_bytes(config, o.n_slots, o.state_snapshots,
                                                                                l);
    }
    const DevicePlan plan = plan_devices(bytes, request, memory);
    for (const PlanRange& r : plan.ranges) {
        if (r.device.kind == DeviceSpec::Kind::cpu) continue;
#ifdef QUILL_HAVE_CUDA
        if (plan.split() || plan.host_experts > 0 || r.device.index != 0)
            throw UsageError(fmt::format("{}: the CUDA backend runs a whole model on cuda:0 only (a split across "
                                         "devices runs on CPU ranges: --devices cpu,cpu); the plan was {}",
                                         o.devices.empty() ? "--gpu-layers" : "--devices", plan.line()));
        SessionOptions whole = o;
        whole.device = DeviceChoice::cuda;
        return make_cuda_backend(config, weights, whole, n_ctx);
#else
        throw UsageError(fmt::format("--devices {}: this quill was built without CUDA", r.device.name()));
#endif
    }
    if (!plan.split()) return make_cpu_backend(config, weights, o, n_ctx);
    // (gemma3n: a token's AltUp streams, not one hidden state, pass from layer to layer)
    if (config.altup())
        throw UsageError(fmt::format("--devices: {} models cannot be split across devices (AltUp's streams); the "
                                     "plan was {}", config.gguf_arch(), plan.line()));
    check_context_fits(config, n_ctx, o.kv_type, o.n_slots, o.state_snapshots);
    const cpu::CpuBackendOptions options = cpu_options(o, n_ctx);
    std::vector<std::unique_ptr<Backend>> ranges;
    for (const PlanRange& r : plan.ranges) {
        cpu::CpuBackendOptions bo = options;
        bo.layers = {r.begin, r.end};
        ranges.push_back(std::make_unique<cpu::CpuBackend>(config, weights, bo));
    }
    return std::make_unique<SplitBackend>(std::move(ranges), plan.line());
}

}  // namespace

std::unique_ptr<Backend> make_backend(const ModelConfig& config, const Weights& weights, const SessionOptions& o,
                                      int64_t n_ctx) {
    if (!o.devices.empty() || o.gpu_layers) return make_planned_backend(config, weights, o, n_ctx);
    if (o.device == DeviceChoice::cpu) return make_cpu_backend(config, weights, o, n_ctx);
#ifdef QUILL_HAVE_CUDA
    const cuda::DeviceInfo info = cuda::probe();
    if (info.count == 0) {
        if (o.device == DeviceChoice::cuda) throw UsageError(fmt::format("--device cuda: {}", info.reason));
        if (o.verbose) print_stderr("quill: {}; using the CPU\n", info.reason);
        return make_cpu_backend(config, weights, o, n_ctx);
    }
    try {
        return make_cuda_backend(config, weights, o, n_ctx);
    } catch (const Error& e) {
        if (o.device == DeviceChoice::cuda) throw;
        // auto: a weight type without a CUDA kernel, a model too large for the GPU, a failing GPU
        print_stderr("quill: cannot run on {} ({}); using the CPU\n", escape_line(info.name), escape_line(e.what()));
    }
#else
    if (o.device == DeviceChoice::cuda) throw UsageError("--device cuda: this quill was built without CUDA");
    if (o.verbose) print_stderr("quill: built without CUDA; using the CPU\n");
#endif
    return make_cpu_backend(config, weights, o, n_ctx);
}

std::unique_ptr<Session> Session::open(const SessionOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = std::make_unique<Session>();
    s->model = Model::load(resolve_model_path(o.model));
    s->tokenizer = o.tokenizer.empty() ? Tokenizer::from_gguf(s->model->file)
                                       : Tokenizer::from_spm_file(o.tokenizer, &s->model->file);
    SessionOptions opts = o;
    std::chrono::steady_clock::duration encode_time{0};
    if (o.ctx <= 0 && o.context_needed) {
        const ModelConfig& c = s->model->config;
        // whole key blocks of eight (the cache's unit), at most the model's training context; when that much does
        // not fit in the quarter of memory choose_context allows, choose_context caps it as without a need
        const auto asked = std::chrono::steady_clock::now();
        const int64_t need = o.context_needed(*s);
        encode_time = std::chrono::steady_clock::now() - asked;  // (not loading: left out of load_ms)
        const int64_t want = std::min((need + 7) / 8 * 8, c.n_ctx_train);
        if (need > 0 && want > 0 &&
            sequence_bytes(c, o.kv_type, want, o.n_slots, o.state_snapshots) <= available_memory() / 4) {
            opts.ctx = want;
            opts.kv_huge_pages = true;
            s->context_fitted = true;
        }
    }
    s->n_ctx = choose_context(s->model->config, opts.ctx, opts.kv_type, opts.n_slots, opts.state_snapshots);
    s->backend = make_backend(s->model->config, s->model->weights, opts, s->n_ctx);
    s->n_ctx = s->backend->kv_shape().n_ctx;  // the CUDA backend may cap it to the GPU's memory
    s->load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0 - encode_time).count();
    return s;
}

std::string describe_cuda() {
#ifdef QUILL_HAVE_CUDA
    const cuda::DeviceInfo info = cuda::probe();
    if (info.count == 0) return info.reason;
    return fmt::format("{} (compute capability {}.{}, {}){}", escape_line(info.name), info.cc_major, info.cc_minor,
                       format_bytes(info.total_memory), info.count > 1 ? fmt::format(", {} devices", info.count) : "");
#else
    return "built without CUDA";
#endif
}

std::string Session::load_line() const {
    return fmt::format("quill: {} ({:.1f} MiB) loaded in {:.0f} ms; {}; context {}",
                       escape_line(model->config.name, 200),
                       model->weight_bytes() / 1048576.0, load_ms, backend->describe().summary, n_ctx);
}

}  // namespace quill
