#include "engine/chat/settings.h"

#include "engine/error.h"

#include <charconv>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

namespace quill::chat {

namespace {

// The whole of `text` as a number of type T; nullopt when it is not one (or not finite). `too_big`: it is a
// number, but past what T holds (99999999999 for an int, 1e999).
template <typename T>
std::optional<T> parse_number(std::string_view text, bool& too_big) {
    T v{};
    const char* end = text.data() + text.size();
    auto [ptr, ec] = std::from_chars(text.data(), end, v);
    too_big = !text.empty() && ptr == end && ec == std::errc::result_out_of_range;
    if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
    if constexpr (std::is_floating_point_v<T>)
        if (!std::isfinite(v)) return std::nullopt;
    return v;
}

struct Parameter {
    const char* name;
    const char* kind;  // what a value must be, for the message
    std::function<std::string(const GenerationParams&)> show;
    // "" when `text` was set, else what is wrong with it: "is not " + kind, or that it is out of range.
    std::function<std::string(GenerationParams&, std::string_view)> set;
};

// A parameter of type T reached through field(params) -> T&.
template <typename T, typename Field>
Parameter make(const char* name, const char* kind, Field field) {
    return {name, kind,
            [field](const GenerationParams& p) {
                GenerationParams copy = p;
                return fmt::format("{}", field(copy));
            },
            [field, kind](GenerationParams& p, std::string_view text) -> std::string {
                bool too_big = false;
                const std::optional<T> v = parse_number<T>(text, too_big);
                if (v) field(p) = *v;
                if (v) return "";
                if (!too_big) return fmt::format("'{}' is not {}", text, kind);
                if constexpr (std::is_floating_point_v<T>)
                    return fmt::format("{} is out of range: expected a finite number", text);
                else
                    return fmt::format("{} is out of range: expected {} to {}", text, std::numeric_limits<T>::min(),
                                       std::numeric_limits<T>::max());
            }};
}

const std::vector<Parameter>& parameters() {
    static const std::vector<Parameter> all = {
        make<float>("temp", "a number", [](GenerationParams& p) -> float& { return p.sampling.temperature; }),
        make<int>("top-k", "an integer", [](GenerationParams& p) -> int& { return p.sampling.top_k; }),
        make<float>("top-p", "a number", [](GenerationParams& p) -> float& { return p.sampling.top_p; }),
        make<float>("min-p", "a number", [](GenerationParams& p) -> float& { return p.sampling.min_p; }),
        make<float>("repeat-penalty", "a number",
                    [](GenerationParams& p) -> float& { return p.sampling.repeat_penalty; }),
        make<int>("repeat-last-n", "an integer", [](GenerationParams& p) -> int& { return p.sampling.repeat_last_n; }),
        make<float>("frequency-penalty", "a number",
                    [](GenerationParams& p) -> float& { return p.sampling.frequency_penalty; }),
        make<float>("presence-penalty", "a number",
                    [](GenerationParams& p) -> float& { return p.sampling.presence_penalty; }),
        make<uint64_t>("seed", "an integer >= 0", [](GenerationParams& p) -> uint64_t& { return p.sampling.seed; }),
        make<int>("n-predict", "an integer", [](GenerationParams& p) -> int& { return p.max_tokens; }),
    };
    return all;
}

}  // namespace

std::string parameter_names() {
    std::string names;
    for (const Parameter& p : parameters()) names += (names.empty() ? "" : ", ") + std::string(p.name);
    return names;
}

void set_parameter(GenerationParams& params, std::string_view name, std::string_view value) {
    for (const Parameter& p : parameters()) {
        if (name != p.name) continue;
        GenerationParams next = params;
        if (const std::string wrong = p.set(next, value); !wrong.empty())
            throw UsageError(fmt::format("/set {}: {}", name, wrong));
        try {
            next.sampling.validate();
        } catch (const UsageError& e) {
            throw UsageError(fmt::format("/set {}: {}", name, e.what()));
        }
        if (next.max_tokens < -1)
            throw UsageError(fmt::format("/set n-predict: {} is out of range: expected >= -1", next.max_tokens));
        params = next;
        return;
    }
    throw UsageError(fmt::format("/set: unknown parameter '{}' (expected {})", name, parameter_names()));
}

std::string describe_parameters(const GenerationParams& params) {
    std::string out;
    for (const Parameter& p : parameters()) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", p.name, p.show(params));
    return out;
}

}  // namespace quill::chat
