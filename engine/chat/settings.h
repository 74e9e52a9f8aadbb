// The generation parameters a chat changes while it runs (/set NAME VALUE) and lists (/show): named as the
// command-line flags are (temp, top-k, ...), so that a setting moves between the two as it is.
#pragma once

#include "engine/runtime/generator.h"

#include <string>
#include <string_view>

namespace quill::chat {

// "temp, top-k, top-p, ...": the names /set accepts.
std::string parameter_names();

// Sets one parameter of `params` from text. UsageError naming the parameter when the name is unknown or the value
// is not a number in range; `params` is then unchanged.
void set_parameter(GenerationParams& params, std::string_view name, std::string_view value);

// "temp 0.8, top-k 40, ..., n-predict -1": every parameter with its value.
std::string describe_parameters(const GenerationParams& params);

}  // namespace quill::chat
