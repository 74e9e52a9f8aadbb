#include "engine/hub/quant_choice.h"

#include <algorithm>
#include <map>
#include <regex>

namespace quill::hub {

namespace {

// Quantizations and their bits per weight (hundredths, as llama.cpp's quantize lists them); the default choice is
// the one nearest to Q4_K_M in bits.
struct QuantBits {
    std::string_view name;
    int bits;
};
constexpr QuantBits kQuants[] = {
    {"IQ1_S", 156},  {"IQ1_M", 175},  {"IQ2_XXS", 206}, {"IQ2_XS", 231}, {"IQ2_S", 250},  {"IQ2_M", 270},
    {"Q2_K_S", 290}, {"Q2_K", 296},   {"IQ3_XXS", 306}, {"IQ3_XS", 330}, {"IQ3_S", 344},  {"Q3_K_S", 350},
    {"IQ3_M", 366},  {"Q3_K_M", 391}, {"IQ4_XS", 425},  {"Q3_K_L", 427}, {"IQ4_NL", 450}, {"Q4_0", 450},
    {"Q4_K_S", 458}, {"Q4_K_M", 489}, {"Q4_1", 500},    {"Q5_0", 550},   {"Q5_K_S", 554}, {"Q5_K_M", 570},
    {"Q5_1", 600},   {"Q6_K", 656},   {"Q8_0", 850},    {"BF16", 1600},  {"F16", 1600},   {"F32", 3200},
};
constexpr std::string_view kDefaultQuant = "Q4_K_M";

// Bits per weight in hundredths; -1 for a quantization not in the table.
int bits_of(std::string_view quant) {
    for (const QuantBits& q : kQuants)
        if (q.name == quant) return q.bits;
    return -1;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return out;
}

std::string base_name(std::string_view path) {
    const size_t slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

const std::regex& split_form() {
    static const std::regex form(R"((.*)-(\d{5})-of-(\d{5})\.gguf)", std::regex::icase);
    return form;
}

std::string describe(const GgufModel& m) {
    return fmt::format("{} ({}{}{})", m.files.front(), human_size(m.bytes),
                       m.files.size() > 1 ? fmt::format(", {} parts", m.files.size()) : "",
                       m.complete ? "" : ", parts missing");
}

std::string list_of(const std::vector<const GgufModel*>& models) {
    std::string out;
    for (const GgufModel* m : models) out += (out.empty() ? "" : "; ") + describe(*m);
    return out;
}

}  // namespace

std::string quant_of(std::string_view file_name) {
    std::string name = base_name(file_name);
    std::smatch m;
    if (std::regex_match(name, m, split_form())) name = m[1].str() + ".gguf";
    if (name.size() > 5 && upper(name.substr(name.size() - 5)) == ".GGUF") name.resize(name.size() - 5);
    static const std::regex tag(R"((?:^|[-._])((?:I?Q[1-8](?:_[A-Z0-9]+)*)|BF16|F16|F32|MXFP4(?:_MOE)?)(?=$|[-.]))",
                                std::regex::icase);
    std::string found;
    for (auto it = std::sregex_iterator(name.begin(), name.end(), tag); it != std::sregex_iterator(); ++it)
        found = (*it)[1].str();  // the last one: "Q8_0-Q4_K_M" style names end with the file's own
    return upper(found);
}

std::vector<GgufModel> gguf_models(const std::vector<RepoFile>& files) {
    std::vector<GgufModel> out;
    struct Split {
        uint64_t count = 0;
        std::map<uint64_t, const RepoFile*> parts;
    };
    std::map<std::string, Split> splits;
    for (const RepoFile& f : files) {
        const std::string base = base_name(f.path);
        if (upper(base).find(".GGUF") != base.size() - 5 || base.size() < 5) continue;
        if (upper(base).find("MMPROJ") != std::string::npos) continue;
        std::smatch m;
        if (std::regex_match(f.path, m, split_form())) {
            Split& s = splits[m[1].str() + "/" + m[3].str()];
            s.count = std::stoull(m[3].str());
            s.parts[std::stoull(m[2].str())] = &f;
            continue;
        }
        out.push_back({quant_of(f.path), {f.path}, f.size, true});
    }
    for (const auto& [key, s] : splits) {
        GgufModel g;
        for (const auto& [index, f] : s.parts) {
            g.files.push_back(f->path);
            g.bytes += f->size;
        }
        g.quant = quant_of(g.files.front());
        g.complete = s.parts.size() == s.count && s.parts.begin()->first == 1 && s.parts.rbegin()->first == s.count;
        out.push_back(std::move(g));
    }
    std::sort(out.begin(), out.end(), [](const GgufModel& a, const GgufModel& b) { return a.files < b.files; });
    return out;
}

GgufModel choose_model(const std::vector<GgufModel>& models, const std::string& quant, const std::string& repo) {
    if (models.empty()) throw UsageError(fmt::format("{}: the repository has no GGUF file", repo));
    std::vector<const GgufModel*> all, matches;
    for (const GgufModel& m : models) all.push_back(&m);
    std::string asked = quant;
    if (upper(quant).ends_with(".GGUF")) {
        for (const GgufModel& m : models)
            for (const std::string& f : m.files)
                if (f == quant || base_name(f) == quant) matches.push_back(&m);
    } else if (!quant.empty()) {
        for (const GgufModel& m : models)
            if (m.quant == upper(quant)) matches.push_back(&m);
    } else if (models.size() == 1) {
        matches.push_back(&models.front());
    } else {
        // Q4_K_M, else the nearest in bits per weight (the larger on a tie).
        const GgufModel* best = nullptr;
        int best_distance = 1 << 30;
        const int target = bits_of(kDefaultQuant);
        for (const GgufModel& m : models) {
            const int bits = bits_of(m.quant);
            if (bits < 0) continue;
            const int distance = std::abs(bits - target);
            if (distance < best_distance || (distance == best_distance && bits > bits_of(best->quant))) {
                best = &m;
                best_distance = distance;
            }
        }
        for (const GgufModel& m : models)
            if (best && m.quant == best->quant) matches.push_back(&m);
        if (!best) matches = all;  // no known quantization in any name: the user must name a file
        asked = best ? best->quant : "no quantization";
    }
    if (matches.empty())
        throw UsageError(fmt::format("{}: no GGUF file for {}; choose one with {}:QUANT or {}:FILE.gguf from: {}",
                                     repo, quant, repo, repo, list_of(all)));
    if (matches.size() > 1)
        throw UsageError(fmt::format("{}: {} GGUF models match {}; name one with {}:FILE.gguf: {}", repo,
                                     matches.size(), asked, repo, list_of(matches)));
    if (!matches.front()->complete)
        throw UsageError(fmt::format("{}: the split model {} lacks parts", repo, describe(*matches.front())));
    return *matches.front();
}

std::string human_size(uint64_t bytes) {
    if (bytes >= 1'000'000'000) return fmt::format("{:.1f} GB", static_cast<double>(bytes) / 1e9);
    if (bytes >= 1'000'000) return fmt::format("{:.0f} MB", static_cast<double>(bytes) / 1e6);
    if (bytes >= 1'000) return fmt::format("{:.0f} kB", static_cast<double>(bytes) / 1e3);
    return fmt::format("{} B", bytes);
}

}  // namespace quill::hub
