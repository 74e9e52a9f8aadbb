#include "engine/cli/reasoning_printer.h"

#include "engine/error.h"

#include <fmt/format.h>


namespace quill::chat {

namespace {

constexpr std::string_view kDim = "\033[2m", kReset = "\033[0m";

}  // namespace

ReasoningDisplay reasoning_display(std::string_view value, int fd) {
    if (value == "show") return colors_allowed(fd) ? ReasoningDisplay::dim : ReasoningDisplay::plain;
    if (value == "hide") return ReasoningDisplay::hide;
    throw UsageError(fmt::format("--reasoning '{}': expected show or hide", value));
}

void ReasoningPrinter::reasoning(std::string_view text) {
    if (display_ == ReasoningDisplay::hide || text.empty()) return;
    if (!in_reasoning_) out_.write(display_ == ReasoningDisplay::dim ? kDim : std::string_view("Thinking...\n"));
    in_reasoning_ = true;
    line_ended_ = false;
    out_.put(text);
}

void ReasoningPrinter::content(std::string_view text) {
    if (text.empty()) return;
    if (in_reasoning_) {
        close();
        out_.write("\n\n");
    }
    line_open_ = text.back() != '\n';
    line_ended_ = !line_open_;
    out_.put(text);
}

void ReasoningPrinter::call(const ToolCall& call) {
    if (in_reasoning_) {
        close();
        out_.write("\n\n");
    }
    if (line_open_) out_.write("\n");
    const std::string shown = call_display(call);
    if (display_ == ReasoningDisplay::dim) out_.put(fmt::format("{}{}{}", kDim, shown, kReset));
    else out_.put(shown);
    line_open_ = true;
    line_ended_ = false;
}

void ReasoningPrinter::finish() {
    line_open_ = false;
    if (!in_reasoning_) return;
    close();
    out_.flush();
}

void ReasoningPrinter::close() {
    out_.write(display_ == ReasoningDisplay::dim ? kReset : std::string_view("\n...done thinking."));
    in_reasoning_ = false;
    line_ended_ = false;
}

}  // namespace quill::chat
