#include "engine/chat/jinja_budget.h"

#include "engine/error.h"

#include <fmt/format.h>

namespace quill::chat::jinja {

Budget::Budget(const RenderOptions& o)
    : max_steps_(o.max_steps),
      max_alloc_(o.max_alloc_bytes),
      max_string_(o.max_output_bytes),
      max_list_(o.max_list_items),
      time_limit_(o.max_time),
      deadline_(std::chrono::steady_clock::now() + o.max_time),
      cancel_(o.cancel) {}

void Budget::check_clock() {
    since_check_ = 0;
    if (cancel_ && cancel_->load(std::memory_order_relaxed))
        throw quill::Interrupted("interrupted while rendering the chat template");
    if (std::chrono::steady_clock::now() > deadline_)
        throw BudgetError{fmt::format("the render ran past its deadline of {} ms (budget: time)", time_limit_.count())};
}

void Budget::steps_exceeded() const {
    throw BudgetError{fmt::format("the template ran more than {} steps (statements, expressions, loop iterations, "
                                  "calls and the values they compare, sort or print) (budget: steps)",
                                  max_steps_)};
}

void Budget::alloc_exceeded() const {
    throw BudgetError{fmt::format("the values built while rendering passed {} bytes (budget: memory)", max_alloc_)};
}

void Budget::string_exceeded(size_t n) const {
    throw BudgetError{fmt::format("a string of {} bytes is larger than the limit of {} bytes (budget: string size)",
                                  n, max_string_)};
}

void Budget::list_exceeded(size_t n) const {
    throw BudgetError{fmt::format("a list of {} items is larger than the limit of {} items (budget: list size)", n,
                                  max_list_)};
}

}  // namespace quill::chat::jinja
