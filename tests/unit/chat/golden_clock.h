// The fixed clock of the Jinja2 renderings that the template tests compare with: the time that golden/cases.json
// and tests/data/templates/cases.json give as "strftime_now_date" (noon of a Sunday; tm_wday and tm_yday set to match).
#pragma once

#include "engine/chat/template.h"

#include <ctime>

namespace quill::test {

inline quill::chat::RenderOptions golden_options() {
    quill::chat::RenderOptions o;
    std::tm tm{};
    tm.tm_year = 2026 - 1900;
    tm.tm_mon = 10;
    tm.tm_mday = 29;
    tm.tm_hour = 12;
    tm.tm_wday = 0;
    tm.tm_yday = 332;
    o.now = tm;
    return o;
}

}  // namespace quill::test
