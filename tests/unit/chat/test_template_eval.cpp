// The template language construct by construct: small templates and the text Jinja2 3.1 renders for them (in
// Hugging Face's environment: trim_blocks, lstrip_blocks, loop controls), then the errors and limits.
#include "engine/chat/template.h"

#include <catch2/catch.hpp>

#include <chrono>

namespace test_template_eval {

using quill::chat::ChatTemplate;
using quill::chat::RenderOptions;
using quill::chat::TemplateError;
using json = nlohmann::ordered_json;

namespace {

const json& sample_vars() {
    static const json vars = json::parse(R"({
        "a": true, "b": false, "d": {"a": 1, "b": 2},
        "msgs": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
        "users": [{"name": "al", "active": true}, {"name": "bo", "active": false}, {"name": "cy", "active": true}],
        "x": {"y": {"z": "deep"}}
    })");
    return vars;
}

std::string render(std::string_view src, const json& vars = sample_vars(), const RenderOptions& o = {}) {
    return ChatTemplate::parse(src, "t").render(vars, o);
}

struct Case {
    const char* src;
    const char* expected;
};

void check_cases(const std::vector<Case>& cases) {
    for (const auto& c : cases) {
        CAPTURE(c.src);
        CHECK(render(c.src) == c.expected);
    }
}

// The message of the TemplateError that rendering (or parsing) `src` throws.
std::string error_of(std::string_view src, const RenderOptions& o = {}) {
    try {
        render(src, sample_vars(), o);
    } catch (const TemplateError& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("template expressions follow Jinja2 precedence", "[template]") {
    check_cases({
        {"{{ 1 + 2 * 3 }}|{{ (1 + 2) * 3 }}|{{ 2 ** 3 ** 2 }}|{{ -2 ** 2 }}", "7|9|64|4"},
        {"{{ 7 // 2 }}|{{ -7 // 2 }}|{{ -7 % 3 }}|{{ 7 / 2 }}|{{ 10 / 4 }}|{{ 1 + 1.5 }}", "3|-4|2|3.5|2.5|2.5"},
        {"{{ not a and b }}|{{ not (a and b) }}|{{ a or b and false }}", "False|True|True"},
        {"{{ 'x' if a else 'y' }}|{{ 'x' if b }}|{{ a is defined and not zz is defined }}", "x||True"},
        {"{{ 1 ~ 2 * 3 }}|{{ 'a' ~ 1 ~ none ~ u }}|{{ -3 | abs }}", "16|a1None|3"},
        {"{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 1 == 1.0 }}{{ 'ab' < 'b' }}{{ [1, 2] == [1, 2] }}", "TrueFalseTrueTrueTrue"},
        {"{{ 'a' in 'abc' }}{{ 'z' not in 'abc' }}{{ 1 in [1, 2] }}{{ 'a' in d }}", "TrueTrueTrueTrue"},
        {"{{ true and 'x' }}|{{ 0 or '' or 'z' }}|{{ none or [] }}", "x|z|[]"},
    });
    // `~` binds tighter than `+`, so this adds an int to a string.
    CHECK_THAT(error_of("{{ 1 ~ 2 + 3 }}"), Catch::Contains("t:1:10") && Catch::Contains("'str' and 'int'"));
}

TEST_CASE("template values print as Python prints them", "[template]") {
    check_cases({
        {"{{ [1, 'a', none, true, 1.5, {'k': \"it's\"}] }}", "[1, 'a', None, True, 1.5, {'k': \"it's\"}]"},
        {"{{ (1, 2) }}{{ (1,) }}{{ {'a': {'b': [1]}} }}", "(1, 2)(1,){'a': {'b': [1]}}"},
        {"{{ 1e20 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1 / 3 }} {{ 2.0 }} {{ 100000000000000000.0 }}",
         "1e+20 1e-05 0.30000000000000004 0.3333333333333333 2.0 1e+17"},
        {"{{ none }}|{{ None }}|{{ true }}|{{ False }}", "None|None|True|False"},
        {"{{ \"a\\tb\\\\c\\'d\\\"\" }}|{{ '\\u00e9\\x41' }}", "a\tb\\c'd\"|éA"},
        {"{{ 'ab' * 3 }}|{{ [1] * 3 }}|{{ [1] + [2] }}|{{ 'a' + 'b' }}", "ababab|[1, 1, 1]|[1, 2]|ab"},
    });
}

TEST_CASE("template slicing and subscripts follow Python", "[template]") {
    check_cases({
        {"{{ 'abc'[::-1] }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[-2:] }}|{{ [1, 2, 3, 4, 5][::2] }}", "cba|bcd|ef|[1, 3, 5]"},
        {"{{ [1, 2, 3, 4, 5][-1:0:-2] }}|{{ 'héllo wörld'[2:8] }}|{{ [1, 2, 3][10:] }}|{{ [1, 2, 3][:-5] }}",
         "[5, 3]|llo wö|[]|[]"},
        {"{% set d = {'k': {'n': [1, {'m': 2}]}} %}{{ d.k.n[1].m }}{{ d['k']['n'][0] }}{{ d.k.n.0 }}{{ 'héllo'[1] }}",
         "211é"},
        {"{{ msgs[-1].content }}|{{ msgs[5] }}|{{ d['zz'] }}", "yo||"},
    });
}

TEST_CASE("template undefined values behave as Jinja2's Undefined", "[template]") {
    check_cases({
        {"[{{ u }}]{{ u | length }}{{ u is defined }}{{ u is undefined }}{% for i in u %}no{% endfor %}", "[]0FalseTrue"},
        {"{{ u | default('dflt') }}|{{ none | default('dflt') }}|{{ '' | default('dflt', true) }}|{{ u | d('x') }}",
         "dflt|None|dflt|x"},
        {"{{ x.y.z }}|{{ x.q is defined }}|{{ d.zz }}|{{ d.a.b is defined }}", "deep|False||False"},
    });
    // Reading from undefined raises, as in Jinja2.
    CHECK_THAT(error_of("{{ u.y is defined }}"), Catch::Contains("t:1:6: cannot read 'y' of an undefined value"));
    CHECK_THAT(error_of("{{ d.a.b.c }}"), Catch::Contains("cannot read 'c' of an undefined value"));
    CHECK_THAT(error_of("{{ u[0] }}"), Catch::Contains("cannot index an undefined value"));
    CHECK_THAT(error_of("{{ u[1:] }}"), Catch::Contains("cannot slice an undefined value"));
    CHECK_THAT(error_of("{{ u + 1 }}"), Catch::Contains("t:1:4: 'u' is undefined"));
    CHECK_THAT(error_of("{{ x.q - 1 }}"), Catch::Contains("'x.q' is undefined"));
}

TEST_CASE("template for loops: loop variables, unpacking, filters, else, break and continue", "[template]") {
    check_cases({
        {"{% for x in [1, 2, 3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}"
         "{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.previtem }}{{ loop.nextitem }};{% endfor %}",
         "10TrueFalse3322;21FalseFalse32113;32FalseTrue3102;"},
        {"{% for k, v in {'a': 1, 'b': [2]}.items() %}{{ k }}={{ v }},{% endfor %}|{% for k, v in d | items %}{{ k }}"
         "{{ v }}{% endfor %}|{% for k in d %}{{ k }}{% endfor %}|{% for c in 'hé' %}[{{ c }}]{% endfor %}",
         "a=1,b=[2],|a1b2|ab|[h][é]"},
        {"{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 4 %}{% break %}{% endif %}{{ x }}"
         "{% endfor %}|{% for x in [] %}a{% else %}empty{% endfor %}",
         "0134|empty"},
        {"{% for a in [1, 2, 3] if a > 1 %}{{ loop.index }}/{{ loop.length }}{{ a }} {% endfor %}|{% for x in 'ab' %}"
         "{{ loop.cycle('o', 'e') }}{% endfor %}",
         "1/22 2/23 |oe"},
        {"{% for m in msgs %}{% for n in [1, 2] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", "121122"},
    });
}

TEST_CASE("template scoping: set, namespace, block set, loops keep their assignments", "[template]") {
    check_cases({
        {"{% set ns = namespace(n=0, s='') %}{% for m in msgs %}{% set ns.n = ns.n + 1 %}{% set ns.s = ns.s ~ "
         "m.role[0] %}{% endfor %}{{ ns.n }} {{ ns.s }}",
         "2 ua"},
        {"{% set x = 1 %}{% for i in range(2) %}{{ x }}{% set x = x + 1 %}{{ x }}|{% endfor %}{{ x }}", "12|12|1"},
        {"{% for i in range(3) %}{% if i == 0 %}{% set y = 'a' %}{% endif %}{{ y }}|{% endfor %}", "a|||"},
        {"{% if true %}{% set z = 3 %}{% endif %}{{ z }}", "3"},
        {"{% set x %}block {{ 'content' | upper }}{% endset %}{{ x }}|{% set a, b = [1, 2] %}{{ a }}{{ b }}|"
         "{% set t = 1, 2 %}{{ t }}",
         "block CONTENT|12|(1, 2)"},
        {"{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(5, 0, -2) | list }}{{ dict(a=1, b=2) }}"
         "{{ namespace(a=1).a }}",
         "[0, 1, 2][1, 3, 5][5, 3, 1]{'a': 1, 'b': 2}1"},
        {"{% if x %}a{% elif y %}b{% elif 1 %}c{% else %}d{% endif %}{% if 0 %}a{% elif 0 %}b{% else %}d{% endif %}",
         "ad"},
    });
    CHECK_THAT(error_of("{% set d = {} %}{% set d.x = 1 %}"), Catch::Contains("'d' is not a namespace"));
    CHECK_THAT(error_of("{% set ns = namespace() %}{% set ns.me = [ns] %}"), Catch::Contains("namespace itself"));
}

TEST_CASE("template macros: defaults, keyword arguments, caller, varargs, recursion", "[template]") {
    check_cases({
        {"{% macro greet(name, greeting='Hello', punct='!') %}{{ greeting }}, {{ name }}{{ punct }}{% endmacro %}"
         "{{ greet('A') }} {{ greet('B', 'Hi') }} {{ greet('C', punct='?') }}",
         "Hello, A! Hi, B! Hello, C?"},
        {"{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}bold {{ 1 + 1 }}"
         "{% endcall %}",
         "<b>bold 2</b>"},
        {"{% macro row(x) %}[{{ caller(x * 2) }}]{% endmacro %}{% call(v) row(21) %}v={{ v }}{% endcall %}", "[v=42]"},
        {"{% macro m() %}{{ yy }}{% endmacro %}{% set yy = 5 %}{{ m() }}|{% macro v() %}{{ varargs }}{{ kwargs }}"
         "{% endmacro %}{{ v(1, 2, k=3) }}",
         "5|(1, 2){'k': 3}"},
        {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(5) }}",
         "120"},
    });
}

TEST_CASE("template filters", "[template]") {
    check_cases({
        {"{{ '  hi  ' | trim }}|{{ 'Hello' | upper }}|{{ 'Hello' | lower }}|{{ [1, 2, 3] | length }}|{{ 'héllo' | length }}"
         "|{{ {'a': 1} | count }}|{{ [1, 2, 3] | join('-') }}|{{ [1, 2] | join }}",
         "hi|HELLO|hello|3|5|1|1-2-3|12"},
        {"{{ {'a': [1, 2.5, 'é\"\\n'], 'b': none, 'c': true} | tojson }}|{{ [1, {'k': []}] | tojson(indent=2) }}|"
         "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }}|{{ 'x</' | tojson }}",
         "{\"a\": [1, 2.5, \"é\\\"\\n\"], \"b\": null, \"c\": true}|[\n  1,\n  {\n    \"k\": []\n  }\n]|"
         "{\"a\": 2, \"b\": 1}|\"x</\""},
        {"{{ users | selectattr('active') | map(attribute='name') | join(',') }}|{{ users | rejectattr('active') | "
         "map(attribute='name') | list }}|{{ users | selectattr('name', 'equalto', 'bo') | list | length }}|"
         "{{ [1, 2, 3, 4] | select('odd') | list }}|{{ [1, 2, 3, 4] | reject('even') | list }}|{{ none | select | list }}",
         "al,cy|['bo']|1|[1, 3]|[1, 3]|[]"},
        {"{{ [3, 1, 2] | first }}{{ [3, 1, 2] | last }}{{ 'abc' | first }}|{{ 'ab' | list }}|{{ 42 | string }}"
         "{{ '42' | int + 1 }}{{ '3.5' | float }}{{ 'x' | int }}{{ '4.7' | int }}|{{ 'hello world' | capitalize }}|"
         "{{ 'hello wORLD' | title }}",
         "32a|['a', 'b']|42433.504|Hello world|Hello World"},
        {"{{ 'a-b-c' | replace('-', '+') }}|{{ 2.567 | round(2) }}|{{ 2.5 | round }}|{{ 3.5 | round }}|{{ 'x' | safe }}|"
         "{{ [1, 2, 1, 3] | unique | list }}|{{ ['b', 'A', 'c'] | sort }}|{{ [3, 1, 2] | sort(reverse=true) }}",
         "a+b+c|2.57|2.0|4.0|x|[1, 2, 3]|['A', 'b', 'c']|[3, 2, 1]"},
        {"{{ {'b': 1, 'a': 2} | dictsort }}|{{ [1, 2, 3] | reverse | list }}|{{ 'one two  three' | wordcount }}|"
         "{{ {'a': 1} | items | list }}|{{ 'abc' | reverse }}|{{ users | map(attribute='name') | map('upper') | list }}",
         "[('a', 2), ('b', 1)]|[3, 2, 1]|3|[('a', 1)]|cba|['AL', 'BO', 'CY']"},
        {"{{ [1, 2, 3] | sum }}{{ [3, 1] | min }}{{ [3, 1] | max }}{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}"
         "|{{ users | sort(attribute='name', reverse=true) | map(attribute='name') | list }}",
         "613a\n  b|  a\n  b|['cy', 'bo', 'al']"},
        {"{{ 'Привет' | upper }}{{ 'héllo'.upper() }}{{ 'ÀÉ' | lower }}", "ПРИВЕТHÉLLOàé"},
    });
}

TEST_CASE("template tests", "[template]") {
    check_cases({
        {"{{ 1 is number }}{{ 1.5 is float }}{{ 1 is integer }}{{ true is integer }}{{ 'a' is string }}{{ {} is mapping }}"
         "{{ [] is iterable }}{{ [] is sequence }}{{ true is boolean }}{{ none is none }}{{ u is undefined }}",
         "TrueTrueTrueFalseTrueTrueTrueTrueTrueTrueTrue"},
        {"{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ 2 is eq 2 }}"
         "{{ 2 is ne 3 }}{{ 'a' is in 'abc' }}{{ range is callable }}{{ true is true }}{{ false is false }}"
         "{{ 1 is not string }}{{ 2 is equalto(2) }}",
         "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrueTrue"},
    });
}

TEST_CASE("template methods on strings and dicts", "[template]") {
    check_cases({
        {"{{ '  x  '.strip() }}|{{ 'xxhixx'.strip('x') }}|{{ '  x'.lstrip() }}|{{ 'x  '.rstrip() }}|"
         "{{ 'hello'.startswith('he') }}{{ 'hello'.endswith('lo') }}{{ 'hello'.startswith(('x', 'h')) }}",
         "x|hi|x|x|TrueTrueTrue"},
        {"{{ 'a,b,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'a</think>b'.split('</think>')[-1] }}",
         "['a', 'b', 'c']|['a', 'b']|['a', 'b c']|b"},
        {"{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'ab'.upper() }}{{ 'AB'.lower() }}{{ 'hello wORLD'.title() }}"
         "{{ 'hELLO'.capitalize() }}|{{ 'hello'.find('l') }}{{ 'hello'.find('z') }}{{ 'hello'.count('l') }}|"
         "{{ '-'.join(['a', 'b']) }}|{{ '{} and {}'.format('x', 'y') }}",
         "bba|ABabHello WorldHello|2-12|a-b|x and y"},
        {"{{ d.get('a') }}{{ d.get('zz') }}{{ d.get('zz', 'dd') }}|{{ d.keys() | list }}|{{ d.values() | list }}|"
         "{{ d.items() | list }}",
         "1Nonedd|['a', 'b']|[1, 2]|[('a', 1), ('b', 2)]"},
    });
}

TEST_CASE("template whitespace control: trim_blocks, lstrip_blocks, - and +", "[template]") {
    check_cases({
        {"  {% if true %}\n  yes\n  {% endif %}\n  {{ 'v' }}\n  {# comment #}\nend", "  yes\n  v\nend"},
        {"a  {%- if true %}  b  {% endif -%}  c\n  {{- 'd' -}}  \ne {%+ if true %}f{% endif %}", "a  b  cde f"},
        {"{% for m in msgs %}\n  {{ m.role }}: {{ m.content }}\n{% endfor %}\ndone", "  user: hi\n  assistant: yo\ndone"},
        {"{%- for message in msgs -%}\n{{ message.role }}\n{%- endfor %}\nx", "userassistantx"},
        {"line1\n    {% for i in [1,2] %}\n    item {{ i }}\n    {% endfor %}\nline2", "line1\n    item 1\n    item 2\nline2"},
        {"{{ 'a' }}  {{ 'b' }}\n  {{ 'c' }}", "a  b\n  c"},
        {"x  {%+ if true %}y{% endif +%}\nz", "x  y\nz"},
        {"{% raw -%}   keep {{ this }}   {%- endraw %}\nend", "keep {{ this }}end"},
        {"text\t{% if true %}tab{% endif %}\r\nnext\r\n", "text\ttabnext"},
        {"{% if true %}   \nx{% endif %}\n", "   \nx"},
    });
}

TEST_CASE("template raise_exception and strftime_now", "[template]") {
    CHECK(error_of("{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}") == "Roles must alternate");
    std::tm tm{};
    tm.tm_year = 124;  // 2024
    tm.tm_mon = 6;     // July
    tm.tm_mday = 26;
    tm.tm_hour = 9;
    tm.tm_min = 5;
    RenderOptions o;
    o.now = tm;
    CHECK(render("{{ strftime_now('%d %b %Y') }}|{{ strftime_now('%Y-%m-%d %H:%M') }}", json::object(), o) ==
          "26 Jul 2024|2024-07-26 09:05");
    // Without a fixed clock: today's date.
    std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
    std::tm local{};
    localtime_r(&t, &local);
    CHECK(render("{{ strftime_now('%Y') }}", json::object()) == std::to_string(local.tm_year + 1900));
}

TEST_CASE("malformed templates are TemplateErrors with line and column", "[template]") {
    CHECK_THAT(error_of("a\n{% if x %}b"), Catch::Contains("t:2:12: unexpected end of template") && Catch::Contains("'if' opened at t:2:4"));
    CHECK_THAT(error_of("{% for x in y %}"), Catch::Contains("'for' opened at t:1:4") && Catch::Contains("endfor"));
    CHECK_THAT(error_of("{% macro m() %}x"), Catch::Contains("endmacro"));
    CHECK_THAT(error_of("ok\n  {{ 'a' | nofilter }}"), Catch::Contains("t:2:12: unknown filter 'nofilter'"));
    CHECK_THAT(error_of("{{ 'x' is nosuchtest }}"), Catch::Contains("t:1:11: unknown test 'nosuchtest'"));
    CHECK_THAT(error_of("{% bogus %}"), Catch::Contains("t:1:4: unknown tag 'bogus'"));
    CHECK_THAT(error_of("{% endif %}"), Catch::Contains("t:1:4: unexpected 'endif'"));
    CHECK_THAT(error_of("{{ undefined_fn() }}"), Catch::Contains("t:1:4: unknown function or macro 'undefined_fn'"));
    CHECK_THAT(error_of("{{ 'abc' "), Catch::Contains("t:1:1: unclosed tag '{{'"));
    CHECK_THAT(error_of("{# never closed"), Catch::Contains("t:1:1: missing end of comment"));
    CHECK_THAT(error_of("{{ 'abc }}"), Catch::Contains("t:1:4: unterminated string"));
    CHECK_THAT(error_of("{{ (1 + 2 }}"), Catch::Contains("t:1:11: unexpected '}'"));
    CHECK_THAT(error_of("{{ 1 + }}"), Catch::Contains("t:1:8: expected an expression"));
    CHECK_THAT(error_of("{% break %}"), Catch::Contains("outside of a for loop"));
    CHECK_THAT(error_of("{{ 99999999999999999999 }}"), Catch::Contains("too large"));
    CHECK_THAT(error_of("{{ 2 ** 64 }}"), Catch::Contains("integer overflow"));
    CHECK_THAT(error_of("{{ 1 // 0 }}"), Catch::Contains("by zero"));
    CHECK_THAT(error_of("{% for a, b in [1] %}{% endfor %}"), Catch::Contains("cannot unpack"));
    CHECK_THAT(error_of("{% for x in 5 %}{% endfor %}"), Catch::Contains("'int' object is not iterable"));
}

TEST_CASE("template recursion, output size, loops and nesting are bounded", "[template]") {
    CHECK_THAT(error_of("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"),
               Catch::Contains("t:1:20: calls nested more than 256 deep"));
    CHECK_THAT(error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"),
               Catch::Contains("more than 2000000 steps"));
    CHECK_THAT(error_of("{{ range(1000000000) | length }}"), Catch::Contains("range too big"));
    RenderOptions small;
    small.max_output_bytes = 1 << 20;
    CHECK_THAT(error_of("{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}", small),
               Catch::Contains("output larger than the limit of 1048576 bytes"));
    CHECK_THAT(error_of("{{ 'x' * 100000000 }}", small), Catch::Contains("larger than the limit"));
    CHECK_THAT(error_of("{% set ns = namespace(s='xx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                        "{% endfor %}", small),
               Catch::Contains("larger than the limit"));
    CHECK_THAT(error_of("{% set ns = namespace(l=[]) %}{% for i in range(2000) %}{% set ns.l = [ns.l] %}{% endfor %}"),
               Catch::Contains("nested more than 512 levels"));
    CHECK_THAT(error_of("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}"), Catch::Contains("nested more than"));
    CHECK_THAT(error_of("{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}"), Catch::Contains("nested"));
    std::string deep_ifs;
    for (int i = 0; i < 1000; ++i) deep_ifs += "{% if true %}";
    CHECK_THAT(error_of(deep_ifs), Catch::Contains("nested more than"));
    // A 1 MB template renders (or fails) promptly.
    std::string big;
    while (big.size() < (1 << 20)) big += "{{ 'chunk' ~ loop }} text {% if x %}{{ x.y.z }}{% endif %}\n";
    CHECK(render(big).size() > 200000);
    CHECK_THAT(error_of(big + "{% if %}"), Catch::Contains("expected an expression"));
}

TEST_CASE("long operator and filter chains are bounded at parse time", "[template]") {
    std::string sum = "{{ 1";
    for (int i = 0; i < 100000; ++i) sum += " + 1";
    CHECK_THAT(error_of(sum + " }}"), Catch::Contains("expression nested more than 200 levels"));
    std::string filters = "{{ 'x'";
    for (int i = 0; i < 100000; ++i) filters += "|trim";
    CHECK_THAT(error_of(filters + " }}"), Catch::Contains("expression nested more than 200 levels"));
    std::string attrs = "{{ x";
    for (int i = 0; i < 100000; ++i) attrs += ".y";
    CHECK_THAT(error_of(attrs + " }}"), Catch::Contains("expression nested more than 200 levels"));
    // Deep statements inside deep recursion: the evaluator's own bound.
    std::string body;
    for (int i = 0; i < 150; ++i) body += "{% if true %}";
    body += "{{ f(n + 1) }}";
    for (int i = 0; i < 150; ++i) body += "{% endif %}";
    CHECK_THAT(error_of("{% macro f(n) %}" + body + "{% endmacro %}{{ f(0) }}"),
               Catch::Contains("nested too deeply while running"));
}

}  // namespace test_template_eval
