// A cancel flag that long loops (tokenizing, packing weights) poll every so many items, so that Ctrl-C stops them
// within milliseconds. The flag is signals::stop_flag() in the commands, null where nothing can cancel; lower layers
// take it as a pointer and never read the process's signal state themselves.
#pragma once

#include <atomic>

namespace quill {

using CancelFlag = const std::atomic<bool>*;

// Throws quill::Interrupted("interrupted while <doing>").
[[noreturn]] void throw_interrupted(const char* doing);

// throw_interrupted(doing) once `cancel` is raised; nothing when it is null.
inline void check_cancel(CancelFlag cancel, const char* doing) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) throw_interrupted(doing);
}

}  // namespace quill
