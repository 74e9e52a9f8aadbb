// quill's own random numbers: xoshiro256** seeded through splitmix64, and its conversion to [0, 1). The same seed
// gives the same numbers on every machine and standard library (the sampler's draws, the synthetic models' weights).
#pragma once

#include <cstdint>

namespace quill {

// xoshiro256** seeded through splitmix64.
class Rng {
public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    double uniform();  // [0, 1) with 53 random bits

private:
    uint64_t s_[4];
};

}  // namespace quill
