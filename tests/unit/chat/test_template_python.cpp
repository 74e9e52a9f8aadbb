// Where Jinja2's rendering follows from Python's objects rather than from the template language: Markup from the
// safe filter, generators from map and select, json.dumps(ensure_ascii=True), Undefined that raises when read, and
// unknown filters inside if statements that fail only when they run. Each expected text is Jinja2 3.1's, in
// transformers' environment (tests/data/templates/make_renderings.py).
#include "engine/chat/template.h"

#include <catch2/catch.hpp>

namespace test_template_python {

using quill::chat::ChatTemplate;
using quill::chat::TemplateError;
using json = nlohmann::ordered_json;

namespace {

std::string render(std::string_view src, const json& vars = json::object()) {
    return ChatTemplate::parse(src, "t").render(vars);
}

std::string error_of(std::string_view src, const json& vars = json::object()) {
    try {
        render(src, vars);
    } catch (const TemplateError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("safe gives Markup: + escapes the plain str beside it, ~ does not", "[template]") {
    CHECK(render(R"({{ '<b>'|safe + ' & "x" ' + 'it\'s' }}|{{ '&' + '<'|safe }}|{{ '<'|safe ~ '>' }})") ==
          "<b> &amp; &#34;x&#34; it&#39;s|&amp;<|<>");
    CHECK(render("{{ ('<'|safe + '>') ~ '<' }}|{{ 5|safe + '&' }}|{{ '<'|safe + '<'|safe }}") == "<&gt;<|5&amp;|<<");
    CHECK(render("{{ ('<'|safe).upper() + '<' }}|{{ '<'.upper() + '<' }}") == "<&lt;|<<");
    // The provenance of escaped message text is kept: the entity of an untrusted byte is untrusted.
    const auto r = ChatTemplate::parse("{{ 'A'|safe + m }}", "t").render_tracked({{"m", "<"}});
    CHECK(r.text == "A&lt;");
    REQUIRE(r.untrusted.size() == 1);
    CHECK(r.untrusted[0] == std::pair<size_t, size_t>(1, 5));
}

TEST_CASE("tojson(ensure_ascii=true) escapes every code point past ASCII as json.dumps does", "[template]") {
    CHECK(render(R"({{ 'é€😀"\n'|tojson(ensure_ascii=True) }}|{{ {'ключ': ['я']}|tojson(ensure_ascii=true) }})") ==
          R"("\u00e9\u20ac\ud83d\ude00\"\n"|{"\u043a\u043b\u044e\u0447": ["\u044f"]})");
    CHECK(render("{{ 'é'|tojson }}|{{ 'é'|tojson(ensure_ascii=false) }}") == "\"é\"|\"é\"");
}

TEST_CASE("map, select, reject and unique give generators: true when empty, no len() and no tojson", "[template]") {
    CHECK(render("{% if [] | select('odd') %}T{% endif %}|{{ [1,2,3]|select('odd')|list|length }}|"
                 "{{ ([1]|map('string'))[0] is defined }}|{{ [1,2]|unique|list }}{% if []|unique %}T{% endif %}") ==
          "T|2|False|[1, 2]T");
    CHECK_THAT(error_of("{{ [1,2,3]|select('odd')|length }}"),
               Catch::Contains("object of type 'generator' has no len()"));
    CHECK_THAT(error_of("{{ [1]|map('string')|tojson }}"),
               Catch::Contains("Object of type generator is not JSON serializable"));
}

TEST_CASE("an unknown filter inside an if fails only when it runs", "[template]") {
    const std::string src = "{% if x is string %}{{ x|from_json }}{% endif %}ok";
    CHECK(render(src, {{"x", 1}}) == "ok");
    CHECK_THAT(error_of(src, {{"x", "1"}}), Catch::Contains("unknown filter 'from_json'"));
    CHECK_THAT(error_of("{{ x|from_json }}"), Catch::Contains("t:1:6: unknown filter 'from_json'"));
    CHECK_THAT(error_of("{% if true %}{% endif %}{{ 1 is nosuch }}"), Catch::Contains("unknown test 'nosuch'"));
}

}  // namespace test_template_python
