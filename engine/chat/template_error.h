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

}  // namespace quill::chat
