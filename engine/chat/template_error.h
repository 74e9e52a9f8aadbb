// The one exception the chat-template renderer throws.
#pragma once

#include "engine/error.h"

namespace quill::chat {

// A template error: the message names the template, the line and column, and what is wrong; for
// raise_exception(msg) in a template, the message is msg.
class TemplateError : public quill::Error {
public:
    using Error::Error;
};

// raise_exception(msg) called by the template itself: the template works and refuses this conversation (e.g.
// roles that do not alternate), as opposed to a construct the renderer cannot handle.
class TemplateRaised : public TemplateError {
public:
    using TemplateError::TemplateError;
};

// A template that ran out of a render budget (time, steps, memory, string, list or output size): the message
// starts with "chat template: " and ends with "(budget: what ran out)". Never a reason to fall back to another
// format: such a template is broken or hostile.
class TemplateBudgetError : public TemplateError {
public:
    using TemplateError::TemplateError;
};

}  // namespace quill::chat
