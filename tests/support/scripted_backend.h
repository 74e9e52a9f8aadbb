// A backend that says a script: its every logits row makes the next token of the script the greedy choice (then an
// end of generation), over a real backend that keeps the cache as usual. A grammar still masks what it disallows, so
// a script's token the grammar forbids is not taken.
#pragma once

#include "engine/runtime/backend.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace quill::test {

class ScriptedBackend final : public Backend {
public:
    ScriptedBackend(Backend& inner, int32_t eog) : inner_(inner), eog_(eog) {}
    std::string_view name() const override { return inner_.name(); }
    const ModelConfig& config() const override { return inner_.config(); }
    const KvCacheShape& kv_shape() const override { return inner_.kv_shape(); }
    void forward(const Batch& batch, std::span<float> logits) override {
        inner_.forward(batch, logits);
        const size_t n_vocab = static_cast<size_t>(config().n_vocab);
        for (int r = 0; r < batch.n_logits(); ++r) {
            const std::span<float> row = logits.subspan(static_cast<size_t>(r) * n_vocab, n_vocab);
            std::fill(row.begin(), row.end(), 0.0f);
            row[static_cast<size_t>(next_ < script_.size() ? script_[next_++] : eog_)] = 100.0f;
        }
    }
    void say(std::vector<int32_t> tokens) {
        script_ = std::move(tokens);
        next_ = 0;
    }

private:
    Backend& inner_;
    int32_t eog_;
    std::vector<int32_t> script_;
    size_t next_ = 0;
};

}  // namespace quill::test
