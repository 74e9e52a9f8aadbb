// The files of /load and /save: read without blocking or unbounded memory, written so that a failure never
// destroys an earlier file.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace quill::chat {

// A conversation file for /load: a regular file (opened without blocking, so a FIFO or a device is refused at
// once), at most max_bytes. FileError or UsageError (too long) naming the path.
std::string read_conversation_file(const std::string& path, size_t max_bytes);

// Writes `text` to `path` as a whole or not at all: a new file next to it, then rename over it (through a symbolic
// link, its target). Refuses, without opening it, a path that exists and is not a regular file (a FIFO, a device, a
// directory). The mode of a file it replaces is kept. FileError naming the path.
void write_conversation_file(const std::string& path, std::string_view text);

}  // namespace quill::chat
