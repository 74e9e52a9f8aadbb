#include "engine/batch/fingerprint.h"

#include "engine/error.h"
#include "engine/io/escape.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <type_traits>
#include <variant>

namespace quill::batch {

namespace {

// FNV-1a's step over 8-byte words (a model's header is megabytes: a byte at a time is several times slower), each
// product's high half folded down so that every bit reaches the low ones. Not a cryptographic hash (nothing here is
// an adversary's), only a fingerprint.
class Hash {
public:
    Hash& bytes(const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        size_t i = 0;
        for (; i + 8 <= n; i += 8) {
            uint64_t w;
            std::memcpy(&w, b + i, 8);
            step(w);
        }
        for (; i < n; ++i) step(b[i]);
        return *this;
    }
    Hash& u64(uint64_t v) { return bytes(&v, sizeof v); }
    // A length first, so that ("ab", "c") and ("a", "bc") differ.
    Hash& text(std::string_view s) { return u64(s.size()).bytes(s.data(), s.size()); }
    uint64_t value() const { return h_; }

private:
    void step(uint64_t w) {
        h_ = (h_ ^ w) * 1099511628211ull;
        h_ ^= h_ >> 32;
    }

    uint64_t h_ = 14695981039346656037ull;
};

std::string part_hex(const std::string& key) {
    const uint64_t h = Hash().text(key).value();
    return fmt::format("{:08x}", static_cast<uint32_t>(h ^ (h >> 32)));
}

std::string constraint_words(const std::optional<grammar::ConstraintSpec>& c) {
    using Kind = grammar::ConstraintSpec::Kind;
    if (!c) return "no constraint";
    switch (c->kind) {
        case Kind::json_object: return "--json-object";
        case Kind::json_schema: return "a --json-schema";
        case Kind::gbnf: return "a --grammar";
        case Kind::regex: return "a --regex";
    }
    return "a constraint";
}

PartValue prompt_part(const FingerprintInputs& in) {
    PartValue p;
    p.key = in.raw ? "raw" : fmt::format("template {}", in.template_source.size());
    if (!in.raw) p.key.append("\n").append(in.template_source);
    p.key += fmt::format("\nsystem {}\n{}", in.system.size(), in.system);
    p.shown = in.raw ? "--raw" : in.template_source.empty() ? "no chat template" : "its chat template";
    p.shown += in.system.empty() ? ", no --system" : fmt::format(", --system \"{}\"", escape_line(in.system, 40));
    return p;
}

// Greedy (no request samples), the truncation, the seed and speculative decoding change nothing: left out, so that
// a greedy run resumes with any of them.
PartValue sampling_part(const FingerprintInputs& in) {
    const SamplingParams& s = in.defaults.sampling;
    PartValue p;
    p.shown = fmt::format("--temp {}", s.temperature);
    if (in.any_request_samples)
        p.shown += fmt::format(" --top-k {} --top-p {} --min-p {}", s.top_k, s.top_p, s.min_p);
    p.shown += fmt::format(" --repeat-penalty {} --repeat-last-n {} --frequency-penalty {} --presence-penalty {}",
                           s.repeat_penalty, s.repeat_last_n, s.frequency_penalty, s.presence_penalty);
    if (in.any_request_samples) {
        p.shown += fmt::format(" --seed {}", in.seed ? std::to_string(*in.seed) : "random");
        if (in.defaults.lookup > 0 || in.draft_identity != 0)
            p.shown += fmt::format(" --lookup {} --draft {}{}", in.defaults.lookup, in.defaults.draft,
                                   in.draft_identity != 0 ? fmt::format(" --draft-model {:016x}", in.draft_identity)
                                                          : "");
    }
    p.key = p.shown;
    return p;
}

PartValue output_part(const FingerprintInputs& in) {
    PartValue p;
    const GenerationParams& g = in.defaults;
    p.shown = fmt::format("-n {}, {}, --logprobs {}, {}", g.max_tokens,
                          g.stop.empty() ? "no --stop" : fmt::format("--stop {}", g.stop), g.logprobs,
                          constraint_words(in.constraint));
    Hash stops;
    for (const std::string& s : g.stop) stops.text(s);
    p.key = fmt::format("{} {} {:016x} {}", g.max_tokens, g.stop.size(), stops.value(), g.logprobs);
    if (in.constraint)
        p.key += fmt::format(" {} {}\n{}", static_cast<int>(in.constraint->kind), in.constraint->text.size(),
                             in.constraint->text);
    return p;
}

}  // namespace

namespace {

void hash_value(Hash& h, const GgufValue& value) {
    h.u64(static_cast<uint64_t>(value.type()));
    std::visit(
        [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::string>) {
                h.text(x);
            } else if constexpr (std::is_same_v<T, GgufArray>) {
                h.u64(static_cast<uint64_t>(x.type())).u64(x.size());
                h.bytes(x.encoded().data(), x.encoded().size());
            } else {
                h.bytes(&x, sizeof x);
            }
        },
        value.v);
}

}  // namespace

uint64_t model_identity(const GgufFile& file) {
    // The first bytes of each tensor's data tell two files of one shape apart (a fine-tune, another quantization's
    // rounding): a page read per tensor, never the data itself.
    constexpr size_t kDataBytes = 64;
    Hash h;
    for (const auto& [key, value] : file.metadata()) {
        if (key.starts_with("split.")) continue;  // a split model is the same model as its whole file
        h.text(key);
        hash_value(h, value);
    }
    std::vector<const GgufTensorInfo*> tensors;
    for (const GgufTensorInfo& t : file.tensors()) tensors.push_back(&t);
    std::sort(tensors.begin(), tensors.end(), [](const auto* a, const auto* b) { return a->name < b->name; });
    for (const GgufTensorInfo* t : tensors) {
        h.text(t->name).u64(static_cast<uint64_t>(t->type)).u64(t->n_bytes).u64(t->ne.size());
        for (int64_t d : t->ne) h.u64(static_cast<uint64_t>(d));
        h.bytes(file.tensor_data(*t), std::min(kDataBytes, t->n_bytes));
    }
    return h.value();
}

std::string RunFingerprint::str() const {
    std::string s = "quill1";
    for (const PartValue& p : parts) {
        s += '-';
        s += part_hex(p.key);
    }
    return s;
}

RunFingerprint make_fingerprint(const FingerprintInputs& in) {
    RunFingerprint f;
    f.model_name = in.model_name;
    PartValue& model = f.parts[static_cast<size_t>(FingerprintPart::model)];
    model.key = fmt::format("{:016x} {:016x}", in.model_identity, Hash().text(in.tokenizer_file).value());
    model.shown = in.model_name;
    f.parts[static_cast<size_t>(FingerprintPart::prompt)] = prompt_part(in);
    f.parts[static_cast<size_t>(FingerprintPart::sampling)] = sampling_part(in);
    f.parts[static_cast<size_t>(FingerprintPart::output)] = output_part(in);
    return f;
}

namespace {

// The part hashes of a fingerprint, empty when it is not "quill1-" and four of them (another program's, a later
// quill's).
std::vector<std::string> split_fingerprint(std::string_view f) {
    constexpr std::string_view kPrefix = "quill1";
    if (!f.starts_with(kPrefix)) return {};
    std::vector<std::string> parts;
    for (f.remove_prefix(kPrefix.size()); !f.empty(); f.remove_prefix(9)) {
        if (f.size() < 9 || f[0] != '-') return {};
        parts.emplace_back(f.substr(1, 8));
    }
    return parts.size() == kFingerprintParts ? parts : std::vector<std::string>{};
}

// What differs, in words: "model X (hash), this run uses Y (hash)" and the like.
std::string difference(const EarlierConfig& was, const RunFingerprint& now) {
    const std::vector<std::string> old_parts = split_fingerprint(was.fingerprint);
    const std::string now_str = now.str();
    if (old_parts.empty())
        return fmt::format("the system_fingerprint \"{}\" (not quill's, or another version's), this run's is \"{}\"",
                           escape_line(was.fingerprint, 80), now_str);
    const std::vector<std::string> now_parts = split_fingerprint(now_str);
    size_t i = 0;
    while (i < kFingerprintParts && old_parts[i] == now_parts[i]) ++i;
    QUILL_CHECK(i < kFingerprintParts, "fingerprints {} and {} differ in no part", was.fingerprint, now_str);
    const std::string& shown = now.parts[i].shown;
    switch (static_cast<FingerprintPart>(i)) {
        case FingerprintPart::model:
            if (was.model.empty())
                return fmt::format("another model ({}), this run uses {} ({})", old_parts[i],
                                   escape_line(now.model_name, 80), now_parts[i]);
            if (was.model == now.model_name)
                return fmt::format("another file of model {} ({}, this run's is {})", escape_line(now.model_name, 80),
                                   old_parts[i], now_parts[i]);
            return fmt::format("model {} ({}), this run uses {} ({})", escape_line(was.model, 80), old_parts[i],
                               escape_line(now.model_name, 80), now_parts[i]);
        case FingerprintPart::prompt:
            return fmt::format("another chat template, --system or --raw; this run uses {}", shown);
        case FingerprintPart::sampling:
            return fmt::format("other sampling options; this run uses {}", shown);
        case FingerprintPart::output: return fmt::format("other output options; this run uses {}", shown);
    }
    return "other options";
}

}  // namespace

void check_resume_fingerprint(const ResumeScan& earlier, const RunFingerprint& now, const std::string& name,
                              const std::function<void(const std::string&)>& warn) {
    const std::string mine = now.str();
    for (const EarlierConfig& c : earlier.configs) {
        if (c.fingerprint == mine) continue;
        throw UsageError(fmt::format("--resume: {} (record \"{}\") was made with {}; use --overwrite or another "
                                     "OUTPUT",
                                     name, escape_line(c.first_id, 80), difference(c, now)));
    }
    if (earlier.unfingerprinted > 0 && warn)
        warn(fmt::format("{}: {} result record{} no system_fingerprint (an older quill's): resumed without checking "
                         "the model and options they were made with",
                         name, earlier.unfingerprinted, earlier.unfingerprinted == 1 ? " carries" : "s carry"));
}

std::string request_hash(const BatchRequest& r) {
    Hash h;
    h.u64(static_cast<uint64_t>(r.endpoint));
    if (r.prompt) h.text("prompt").text(*r.prompt);
    if (r.messages) h.text("messages").text(r.messages->dump());
    h.text(r.template_vars.dump()).text(r.model);
    // Each option as a tag and its value when the request sets it, so that an option set to the default differs
    // from the option absent (a later run's defaults may be other flags).
    const RequestOverrides& o = r.overrides;
    auto opt = [&h](const char* tag, const auto& v) {
        if (!v) return;
        h.text(tag);
        using T = std::decay_t<decltype(*v)>;
        if constexpr (std::is_same_v<T, float>) {
            h.u64(std::bit_cast<uint32_t>(*v));
        } else if constexpr (std::is_integral_v<T>) {
            h.u64(static_cast<uint64_t>(*v));
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
            h.u64(v->size());
            for (const std::string& s : *v) h.text(s);
        } else if constexpr (std::is_same_v<T, grammar::ConstraintSpec>) {
            h.u64(static_cast<uint64_t>(v->kind)).text(v->text);
        } else {
            static_assert(std::is_same_v<T, std::vector<std::pair<int32_t, float>>>);
            h.u64(v->size());
            for (const auto& [token, bias] : *v) h.u64(static_cast<uint32_t>(token)).u64(std::bit_cast<uint32_t>(bias));
        }
    };
    opt("max_tokens", o.max_tokens);
    opt("temperature", o.temperature);
    opt("top_p", o.top_p);
    opt("min_p", o.min_p);
    opt("top_k", o.top_k);
    opt("repeat_penalty", o.repeat_penalty);
    opt("frequency_penalty", o.frequency_penalty);
    opt("presence_penalty", o.presence_penalty);
    opt("repeat_last_n", o.repeat_last_n);
    opt("logit_bias", o.logit_bias);
    opt("seed", o.seed);
    opt("stop", o.stop);
    opt("logprobs", o.logprobs);
    opt("constraint", o.constraint);
    return fmt::format("{:016x}", h.value());
}

void check_resume_requests(const ResumeScan& earlier, const BatchInput& input, const std::string& name) {
    size_t changed = 0;
    const InputEntry* first = nullptr;
    for (const InputEntry& e : input.entries) {
        const auto it = earlier.request_hashes.find(e.request.id);
        if (it == earlier.request_hashes.end() || e.error || it->second == request_hash(e.request)) continue;
        ++changed;
        if (!first) first = &e;
    }
    if (changed == 0) return;
    throw UsageError(fmt::format("--resume: {} holds the result of another request for id \"{}\" (line {} has "
                                 "changed since it ran){}; give the changed lines new ids, another -o, or --overwrite",
                                 name, escape_line(first->request.id, 80), first->request.line,
                                 changed == 1 ? "" : changed == 2 ? ", and 1 more id" : fmt::format(", and {} more ids", changed - 1)));
}

bool input_samples(const BatchInput& input) {
    for (const InputEntry& e : input.entries)
        if (e.request.overrides.temperature && *e.request.overrides.temperature > 0) return true;
    return false;
}

}  // namespace quill::batch
