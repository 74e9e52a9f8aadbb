#include "engine/hub/gguf_header.h"

#include "engine/cpu/matmul.h"
#include "engine/error.h"
#include "engine/model/model_config.h"

#include <cstring>
#include <map>
#include <string_view>

namespace quill::hub {

namespace {

struct NeedMore {};  // the prefix ended inside the header

class Reader {
public:
    Reader(std::span<const uint8_t> b, const std::string& name) : b_(b), name_(name) {}

    template <class T>
    T get() {
        T v;
        take(&v, sizeof v);
        return v;
    }
    std::string str() {
        const uint64_t n = get<uint64_t>();
        if (n > (uint64_t{1} << 30)) fail("a string longer than 1 GiB");
        if (n > b_.size() - pos_) throw NeedMore{};  // before allocating: the length may be any number
        std::string s(reinterpret_cast<const char*>(b_.data() + pos_), n);
        pos_ += n;
        return s;
    }
    void skip(uint64_t n) {
        if (n > b_.size() - pos_) throw NeedMore{};
        pos_ += n;
    }
    uint64_t pos() const { return pos_; }
    [[noreturn]] void fail(const std::string& what) const {
        throw FileError(fmt::format("{}: not a GGUF header ({} at byte {})", name_, what, pos_));
    }

private:
    void take(void* out, uint64_t n) {
        if (n > b_.size() - pos_) throw NeedMore{};
        std::memcpy(out, b_.data() + pos_, n);
        pos_ += n;
    }
    std::span<const uint8_t> b_;
    const std::string& name_;
    uint64_t pos_ = 0;
};

uint64_t scalar_size(uint32_t type) {
    switch (static_cast<GgufType>(type)) {
        case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
        case GgufType::U16: case GgufType::I16: return 2;
        case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
        case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
        default: return 0;
    }
}

// Skips one value of `type` (depth: arrays nested so far).
void skip_value(Reader& r, uint32_t type, int depth) {
    if (const uint64_t n = scalar_size(type)) return r.skip(n);
    if (type == static_cast<uint32_t>(GgufType::STRING)) return r.skip(r.get<uint64_t>());
    if (type != static_cast<uint32_t>(GgufType::ARRAY) || depth > 4) r.fail(fmt::format("value type {}", type));
    const uint32_t elem = r.get<uint32_t>();
    const uint64_t n = r.get<uint64_t>();
    if (const uint64_t size = scalar_size(elem)) {
        if (n > (uint64_t{1} << 40) / size) r.fail("an array too long");
        return r.skip(n * size);
    }
    for (uint64_t i = 0; i < n; ++i) skip_value(r, elem, depth + 1);
}

std::string type_label(uint32_t type) {
    const TypeTraits* t = find_type_traits(type);
    return t ? std::string(t->name) : fmt::format("id {}", type);
}

// blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight, a mixture of experts'
// blk.N.{ffn_gate_inp,ffn_gate_exps,ffn_up_exps,ffn_down_exps}.weight, or output.weight: the matrices
// CpuBackend::check_weights checks (layer_matrices).
bool is_weight_matrix(std::string_view name) {
    if (name == "output.weight") return true;
    if (!name.starts_with("blk.") || !name.ends_with(".weight")) return false;
    name = name.substr(4, name.size() - 4 - 7);
    const size_t dot = name.find('.');
    if (dot == 0 || dot == std::string_view::npos ||
        name.substr(0, dot).find_first_not_of("0123456789") != std::string_view::npos)
        return false;
    const std::string_view kind = name.substr(dot + 1);
    for (std::string_view m : {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
                               "ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"})
        if (kind == m) return true;
    return false;
}

}  // namespace

std::optional<GgufHeader> parse_gguf_header(std::span<const uint8_t> prefix, const std::string& name) {
    Reader r(prefix, name);
    try {
        if (r.get<uint32_t>() != 0x46554747) r.fail("no GGUF magic");
        const uint32_t version = r.get<uint32_t>();
        if (version != 2 && version != 3) r.fail(fmt::format("version {}", version));
        const uint64_t n_tensors = r.get<uint64_t>();
        const uint64_t n_kv = r.get<uint64_t>();
        if (n_tensors > (uint64_t{1} << 24) || n_kv > (uint64_t{1} << 24)) r.fail("too many tensors or keys");
        GgufHeader h;
        for (uint64_t i = 0; i < n_kv; ++i) {
            const std::string key = r.str();
            const uint32_t type = r.get<uint32_t>();
            if (key == "general.architecture" && type == static_cast<uint32_t>(GgufType::STRING)) {
                h.architecture = r.str();
            } else if (key == "split.count" && type == static_cast<uint32_t>(GgufType::U16)) {
                h.split_count = r.get<uint16_t>();
            } else {
                skip_value(r, type, 0);
            }
        }
        for (uint64_t i = 0; i < n_tensors; ++i) {
            GgufHeader::Tensor t;
            t.name = r.str();
            t.n_dims = r.get<uint32_t>();
            if (t.n_dims > 4) r.fail(fmt::format("tensor '{}' with {} dimensions", t.name, t.n_dims));
            for (uint32_t d = 0; d < t.n_dims; ++d) t.n_elements *= static_cast<double>(r.get<uint64_t>());
            t.type = r.get<uint32_t>();
            r.skip(8);  // offset
            h.tensors.push_back(std::move(t));
        }
        h.bytes = r.pos();
        return h;
    } catch (const NeedMore&) {
        return std::nullopt;
    }
}

std::string why_unsupported(const GgufHeader& h) {
    if (h.architecture.empty()) return "it has no general.architecture";
    if (!architecture_supported(h.architecture))
        return fmt::format("architecture '{}' is not supported (supported: {})", h.architecture,
                           supported_architectures());
    for (const auto& t : h.tensors) {
        if (!is_weight_matrix(t.name)) continue;
        if (!cpu::matmul_supports(static_cast<GgmlType>(t.type)))
            return fmt::format("tensor '{}' has weight type {}, which quill cannot multiply", t.name,
                               type_label(t.type));
    }
    return {};
}

std::string main_weight_type(const GgufHeader& h) {
    std::map<uint32_t, double> count;
    for (const auto& t : h.tensors)
        if (t.n_dims >= 2) count[t.type] += t.n_elements;
    if (count.empty()) return {};
    auto best = std::max_element(count.begin(), count.end(),
                                 [](const auto& a, const auto& b) { return a.second < b.second; });
    return type_label(best->first);
}

}  // namespace quill::hub
