// SIGINT and SIGTERM as a request to stop, not a kill: generation loops poll the flag between forward passes,
// finish what they can and exit cleanly. SIGPIPE is ignored, so a closed output is a write error, not a death.
//
// The signal handlers can only set lock-free atomics, so these are the one piece of process-wide state in quill.
#pragma once

#include <atomic>

namespace quill::signals {

// Installs the handlers (idempotent). After this, SIGINT/SIGTERM increment a counter instead of killing.
// Only commands that poll stop_flag() install them (run, chat, batch, tokenize, perplexity); the others stay
// killable by Ctrl-C.
void install();
// SIGPIPE ignored (a write to a closed pipe fails with EPIPE), and SIGBUS (a mapped model file truncated while in
// use) reported as one error line and exit status 1 instead of a crash. Every command calls this first.
void install_fault_handlers();
// Set by each SIGINT/SIGTERM until clear(); pass it as GenerateOptions::cancel.
const std::atomic<bool>& stop_flag();
// Signals received since install() (a second Ctrl-C can mean "now, really").
int count();
// The last signal received (SIGINT or SIGTERM), 0 when none.
int last();
// SIGWINCH (the terminal was resized) watched or not. While watched it sets a flag, and a blocked read of the
// terminal returns EINTR (no SA_RESTART), so that a line editor can redraw at the new width; unwatched, the
// default (ignored). Only the chat's line editor watches it, while it reads a line.
void watch_resize(bool on);
// Whether SIGWINCH came since the last call; lowers the flag.
bool take_resize();
// Lowers the stop flag (chat: a Ctrl-C ended one reply, the conversation goes on). count() keeps counting.
void clear();

}  // namespace quill::signals
