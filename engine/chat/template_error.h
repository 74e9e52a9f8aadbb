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

}  // namespace quill::chat
