#include "engine/runtime/device_plan.h"

#include "engine/error.h"
#include "engine/io/input.h"
#include "engine/model/layer_matrices.h"
#include "engine/model/weight_vectors.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>

namespace quill {

std::string DeviceSpec::name() const { return kind == Kind::cpu ? "cpu" : fmt::format("cuda:{}", index); }

size_t ModelBytes::range_bytes(int64_t begin, int64_t end, bool experts) const {
    size_t sum = 0;
    for (int64_t l = begin; l < end; ++l) {
        const LayerBytes& b = layers[static_cast<size_t>(l)];
        sum += b.attention + b.ffn + (experts ? b.experts : 0) + kv_per_layer + b.cache;
    }
    return sum;
}

size_t ModelBytes::expert_bytes(int64_t begin, int64_t end) const {
    size_t sum = 0;
    for (int64_t l = begin; l < end; ++l) sum += layers[static_cast<size_t>(l)].experts;
    return sum;
}

std::vector<TensorBytes> tensor_bytes(const ModelConfig& c, const Weights& w) {
    std::vector<TensorBytes> t;
    auto floats = [&](const NamedVector& v) { t.push_back({v.name, v.values->size() * sizeof(float)}); };
    t.push_back({w.tok_embd.name, w.tok_embd.n_bytes});
    if (!w.output_tied) t.push_back({w.output.name, w.output.n_bytes});
    // (gemma4 E2B/E4B; gemma3n's AltUp projections)
    for (const TensorView* m : {&w.per_layer_tok_embd, &w.per_layer_model_proj, &w.altup_proj, &w.altup_unembd_proj})
        if (m->data) t.push_back({m->name, m->n_bytes});
    for (const NamedVector& v : model_vectors(c, w)) floats(v);
    for (size_t l = 0; l < w.layers.size(); ++l) {
        const LayerWeights& L = w.layers[l];
        for (const TensorView* m : layer_file_matrices(L)) t.push_back({m->name, m->n_bytes});
        for (const NamedVector& v : layer_vectors(c, L, static_cast<int64_t>(l))) floats(v);
    }
    return t;
}

ModelBytes model_bytes(std::span<const TensorBytes> tensors, int64_t n_layer, size_t kv_per_layer) {
    ModelBytes m;
    m.layers.resize(static_cast<size_t>(n_layer));
    m.kv_per_layer = kv_per_layer;
    m.tied = true;
    for (const TensorBytes& t : tensors) {
        const std::string_view name = t.name;
        if (name.starts_with("blk.")) {
            const std::string_view rest = name.substr(4);
            int64_t layer = -1;
            const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
            if (ec == std::errc() && layer >= 0 && layer < n_layer && end < rest.data() + rest.size()) {
                const std::string_view part = std::string_view(end + 1, rest.data() + rest.size() - end - 1);
                LayerBytes& b = m.layers[static_cast<size_t>(layer)];
                if (part.find("_exps") != std::string_view::npos) {
                    b.experts += t.bytes;
                } else if (part.starts_with("attn_")) {
                    b.attention += t.bytes;
                } else {
                    b.ffn += t.bytes;
                }
                continue;
            }
        }
        if (name == "token_embd.weight") {
            m.embedding += t.bytes;
        } else {
            if (name == "output.weight") m.tied = false;
            m.output += t.bytes;
        }
    }
    if (m.tied) m.output += m.embedding;
    return m;
}

DeviceSpec parse_device_spec(std::string_view text) {
    if (text == "cpu") return {DeviceSpec::Kind::cpu, 0};
    if (text == "cuda") return {DeviceSpec::Kind::cuda, 0};
    if (text.starts_with("cuda:")) {
        const std::string_view n = text.substr(5);
        int index = -1;
        const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), index);
        if (ec == std::errc() && end == n.data() + n.size() && index >= 0 && !n.empty())
            return {DeviceSpec::Kind::cuda, index};
    }
    throw UsageError(fmt::format("--devices: '{}' is not a device (expected cpu, cuda or cuda:N)", text));
}

PlanRequest parse_devices(std::string_view text) {
    PlanRequest r;
    size_t named = 0;  // devices after the first that name their first layer
    for (size_t at = 0; at <= text.size();) {
        const size_t comma = std::min(text.find(',', at), text.size());
        std::string_view item = text.substr(at, comma - at);
        int64_t first = 0;
        if (const size_t sep = item.find('@'); sep != std::string_view::npos) {
            const std::string_view n = item.substr(sep + 1);
            const auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), first);
            if (ec != std::errc() || end != n.data() + n.size() || n.empty() || first < 0)
                throw UsageError(fmt::format("--devices: '{}': expected DEVICE@FIRST_LAYER with a layer number",
                                             item));
            if (r.devices.empty() && first != 0)
                throw UsageError(fmt::format("--devices: '{}': the first device starts at layer 0", item));
            if (!r.devices.empty()) ++named;
            item = item.substr(0, sep);
        }
        r.devices.push_back(parse_device_spec(item));
        r.first_layer.push_back(first);
        at = comma + 1;
    }
    if (named == 0) {
        r.first_layer.clear();
    } else if (named + 1 != r.devices.size()) {
        throw UsageError(fmt::format("--devices '{}': give the first layer (DEVICE@LAYER) of every device after the "
                                     "first, or of none",
                                     text));
    }
    return r;
}

namespace {

const DeviceMemory* memory_of(std::span<const DeviceMemory> memory, const DeviceSpec& d) {
    for (const DeviceMemory& m : memory)
        if (m.device == d) return &m;
    return nullptr;
}

// Ranges of the devices in order, device i from first[i] to first[i + 1] (the last to n).
std::vector<PlanRange> ranges_from(const ModelBytes& model, std::span<const DeviceSpec> devices,
                                   std::span<const int64_t> first) {
    const int64_t n = model.n_layer();
    std::vector<PlanRange> ranges;
    for (size_t i = 0; i < devices.size(); ++i) {
        const int64_t end = i + 1 < devices.size() ? first[i + 1] : n;
        PlanRange r{devices[i], first[i], end, model.range_bytes(first[i], end), i + 1 == devices.size()};
        if (r.output) r.bytes += model.output;
        ranges.push_back(r);
    }
    return ranges;
}

void check_first_layers(std::span<const int64_t> first, int64_t n) {
    for (size_t i = 1; i < first.size(); ++i) {
        if (first[i] >= n)
            throw UsageError(fmt::format("--devices: layer {} is past the model's last layer ({}; it has {} layers)",
                                         first[i], n - 1, n));
        if (first[i] <= first[i - 1])
            throw UsageError(fmt::format("--devices: first layers must increase, each device at least one layer "
                                         "({} after {})",
                                         first[i], first[i - 1]));
    }
}

// The first layer of each device so that device i holds about the share weight[i] / sum of the bytes (its layers,
// their KV cache, and for the last the output), each at least one layer.
std::vector<int64_t> balanced_first_layers(const ModelBytes& model, std::span<const double> weight) {
    const int64_t n = model.n_layer();
    const auto k = static_cast<int64_t>(weight.size());
    const double total = static_cast<double>(model.range_bytes(0, n) + model.output);
    const double sum_w = std::accumulate(weight.begin(), weight.end(), 0.0);
    std::vector<int64_t> first{0};
    double share = 0.0;
    for (int64_t i = 1; i < k; ++i) {
        share += weight[static_cast<size_t>(i - 1)] / sum_w;
        const double target = total * share;
        const int64_t lo = first.back() + 1, hi = n - (k - i);  // room for one layer each after
        int64_t best = lo;
        double best_gap = INFINITY;
        for (int64_t b = lo; b <= hi; ++b) {
            const double gap = std::fabs(static_cast<double>(model.range_bytes(0, b)) - target);
            if (gap < best_gap) best = b, best_gap = gap;
        }
        first.push_back(best);
    }
    return first;
}

DevicePlan whole_on(const ModelBytes& model, const DeviceSpec& d) {
    DevicePlan p;
    p.n_layer = model.n_layer();
    const size_t emb = d.kind == DeviceSpec::Kind::cpu || model.tied ? 0 : model.embedding;
    p.ranges.push_back({d, 0, p.n_layer, model.range_bytes(0, p.n_layer) + model.output + emb, true});
    return p;
}

// One GPU and the CPU: whole, else experts in host memory, else the last layers that fit (see plan_devices).
DevicePlan plan_gpu_and_cpu(const ModelBytes& model, const DeviceMemory& gpu) {
    const int64_t n = model.n_layer();
    const size_t room = gpu.usable();
    const size_t emb = model.tied ? 0 : model.embedding;  // the GPU embeds when it holds layer 0
    DevicePlan whole = whole_on(model, gpu.device);
    if (whole.ranges[0].bytes <= room) return whole;
    const size_t dense = model.range_bytes(0, n, false) + model.output + emb;  // every layer without its experts
    if (model.expert_bytes(0, n) > 0 && dense <= room) {
        int64_t j = 0;  // layers [0, j) keep their experts in host memory
        while (dense + model.expert_bytes(j, n) > room) ++j;
        whole.host_experts = j;
        whole.host_expert_bytes = model.expert_bytes(0, j);
        whole.ranges[0].bytes = dense + model.expert_bytes(j, n);
        return whole;
    }
    int64_t k = 0;  // the last k layers on the GPU, with the output
    while (k < n && model.range_bytes(n - k - 1, n) + model.output <= room) ++k;
    if (k == 0) {
        DevicePlan p = whole_on(model, {DeviceSpec::Kind::cpu, 0});
        p.note = fmt::format("{} has {} free, less than its last layer and the output ({})", gpu.device.name(),
                             format_bytes(room), format_bytes(model.range_bytes(n - 1, n) + model.output));
        return p;
    }
    DevicePlan p;
    p.n_layer = n;
    p.ranges.push_back({{DeviceSpec::Kind::cpu, 0}, 0, n - k, model.range_bytes(0, n - k), false});
    p.ranges.push_back({gpu.device, n - k, n, model.range_bytes(n - k, n) + model.output, true});
    return p;
}

}  // namespace

DevicePlan plan_devices(const ModelBytes& model, const PlanRequest& request, std::span<const DeviceMemory> memory) {
    const int64_t n = model.n_layer();
    QUILL_CHECK(n > 0, "plan_devices: a model without layers");
    const DeviceMemory* gpu = nullptr;
    for (const DeviceMemory& m : memory)
        if (m.device.kind == DeviceSpec::Kind::cuda && gpu == nullptr) gpu = &m;
    if (request.gpu_layers) {
        const int64_t k = std::min(*request.gpu_layers, n);
        if (k < 0) throw UsageError(fmt::format("--gpu-layers {}: expected 0 or more", *request.gpu_layers));
        if (k > 0 && gpu == nullptr)
            throw UsageError(fmt::format("--gpu-layers {}: there is no GPU to put layers on", *request.gpu_layers));
        if (k == 0) return whole_on(model, {DeviceSpec::Kind::cpu, 0});
        if (k == n) return whole_on(model, gpu->device);
        const DeviceSpec devices[] = {{DeviceSpec::Kind::cpu, 0}, gpu->device};
        const int64_t first[] = {0, n - k};
        return {ranges_from(model, devices, first), 0, 0, n, {}};
    }
    if (request.devices.empty()) return gpu ? plan_gpu_and_cpu(model, *gpu) : whole_on(model, {});
    const auto k = static_cast<int64_t>(request.devices.size());
    if (k > n)
        throw UsageError(fmt::format("--devices: {} devices for a model of {} layers (each device takes at least one)",
                                     k, n));
    if (k == 1) return whole_on(model, request.devices[0]);
    std::vector<int64_t> first = request.first_layer;
    if (first.empty()) {
        std::vector<double> weight;  // by usable memory where it is known, else equal shares
        for (const DeviceSpec& d : request.devices) {
            const DeviceMemory* m = memory_of(memory, d);
            weight.push_back(m && d.kind != DeviceSpec::Kind::cpu ? static_cast<double>(m->usable()) : -1.0);
        }
        const bool known = std::all_of(weight.begin(), weight.end(), [](double w) { return w > 0; });
        if (!known) std::fill(weight.begin(), weight.end(), 1.0);
        first = balanced_first_layers(model, weight);
    }
    check_first_layers(first, n);
    return {ranges_from(model, request.devices, first), 0, 0, n, {}};
}

std::string DevicePlan::line() const {
    std::vector<const PlanRange*> order;  // GPU ranges first, then the CPU's, each in layer order
    for (const PlanRange& r : ranges)
        if (r.device.kind != DeviceSpec::Kind::cpu) order.push_back(&r);
    for (const PlanRange& r : ranges)
        if (r.device.kind == DeviceSpec::Kind::cpu) order.push_back(&r);
    std::string s = "model: ";
    for (size_t i = 0; i < order.size(); ++i) {
        const PlanRange& r = *order[i];
        s += fmt::format("{}{}{} on {} (", i == 0 ? "" : ", ", r.end - r.begin,
                         i == 0 ? fmt::format(" of {} layers", n_layer) : "", r.device.name());
        if (split()) s += r.end - r.begin == 1 ? fmt::format("layer {}, ", r.begin)
                                               : fmt::format("layers {}-{}, ", r.begin, r.end - 1);
        s += format_bytes(r.bytes) + ")";
    }
    if (host_experts > 0)
        s += fmt::format("; experts of layers 0-{} in host memory ({})", host_experts - 1,
                         format_bytes(host_expert_bytes));
    const bool one = std::all_of(ranges.begin(), ranges.end(),
                                 [&](const PlanRange& r) { return r.device == ranges[0].device; });
    s += one && !split() ? fmt::format("; KV cache on {}", ranges[0].device.name())
                         : "; KV cache with each range's layers";
    if (!note.empty()) s += "; " + note;
    return s;
}

}  // namespace quill
