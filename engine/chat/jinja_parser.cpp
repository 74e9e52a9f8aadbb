#include "engine/chat/jinja_parser.h"

#include "engine/chat/jinja_builtins.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

namespace quill::chat::jinja {

namespace {

class Parser {
public:
    Parser(const Source& source, std::vector<Token> tokens) : src_(source), toks_(std::move(tokens)) {}

    Body parse_template() {
        Body body = parse_body({}, "", 0);
        return body;
    }

private:
    // ---- token helpers ----
    const Token& cur() const { return toks_[pos_]; }
    const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
    void advance() {
        if (pos_ + 1 < toks_.size()) ++pos_;
    }
    bool is_op(std::string_view op) const { return cur().kind == TokKind::Op && cur().text == op; }
    bool is_name(std::string_view name) const { return cur().kind == TokKind::Name && cur().text == name; }
    bool skip_op(std::string_view op) {
        if (!is_op(op)) return false;
        advance();
        return true;
    }
    bool skip_name(std::string_view name) {
        if (!is_name(name)) return false;
        advance();
        return true;
    }
    static std::string describe(const Token& t) {
        switch (t.kind) {
            case TokKind::Text: return "template text";
            case TokKind::VarBegin: return "'{{'";
            case TokKind::VarEnd: return "end of print statement '}}'";
            case TokKind::BlockBegin: return "'{%'";
            case TokKind::BlockEnd: return "end of statement block '%}'";
            case TokKind::String: return "a string";
            case TokKind::End: return "end of template";
            default: return "'" + clip(t.text) + "'";
        }
    }
    [[noreturn]] void fail_here(const std::string& what) const { src_.fail(cur().offset, what); }
    void expect_op(std::string_view op) {
        if (!skip_op(op)) fail_here(fmt::format("expected '{}', got {}", op, describe(cur())));
    }
    std::string expect_name(std::string_view what) {
        if (cur().kind != TokKind::Name) fail_here(fmt::format("expected {}, got {}", what, describe(cur())));
        std::string name = cur().text;
        advance();
        return name;
    }
    void expect_block_end(std::string_view tag) {
        if (cur().kind != TokKind::BlockEnd)
            fail_here(fmt::format("expected end of '{}' tag '%}}', got {}", tag, describe(cur())));
        advance();
    }

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxParseDepth)
                p.fail_here(fmt::format("template nested more than {} levels deep", kMaxParseDepth));
        }
        ~DepthGuard() { --p.depth_; }
        DepthGuard(const DepthGuard&) = delete;
        DepthGuard& operator=(const DepthGuard&) = delete;
    };

    ExprPtr make(Expr::Kind kind, size_t offset) {
        auto e = std::make_unique<Expr>();
        e->kind = kind;
        e->offset = offset;
        return e;
    }

    // Sets the node's height from its children; a tree taller than kMaxParseDepth is an error (`1+1+...+1` and
    // `x|f|f|...|f` build tall trees without nesting in the text).
    ExprPtr finish(ExprPtr e) {
        int h = 0;
        for (const auto& a : e->args)
            if (a) h = std::max(h, a->height);
        for (const auto& kv : e->kwargs) h = std::max(h, kv.second->height);
        e->height = h + 1;
        if (e->height > kMaxParseDepth)
            src_.fail(e->offset, fmt::format("expression nested more than {} levels deep", kMaxParseDepth));
        return e;
    }

    // ---- statements ----
    // Parses until `{% <one of end_tags>` (left unconsumed) or the end of the template.
    Body parse_body(std::initializer_list<std::string_view> end_tags, std::string_view opener, size_t opener_at) {
        DepthGuard guard(*this);
        Body body;
        while (true) {
            const Token& t = cur();
            if (t.kind == TokKind::End) {
                if (end_tags.size() == 0) return body;
                src_.fail(t.offset, fmt::format("unexpected end of template: '{}' opened at {} is not closed (expected "
                                                "'{}')", opener, src_.where(opener_at), *(end_tags.end() - 1)));
            }
            if (t.kind == TokKind::Text) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::Text;
                s->offset = t.offset;
                s->text = t.text;
                body.push_back(std::move(s));
                advance();
            } else if (t.kind == TokKind::VarBegin) {
                auto s = std::make_unique<Stmt>();
                s->kind = Stmt::Kind::Output;
                s->offset = t.offset;
                advance();
                s->expr = parse_tuple_expression();
                if (cur().kind != TokKind::VarEnd) fail_here(fmt::format("expected '}}}}', got {}", describe(cur())));
                advance();
                body.push_back(std::move(s));
            } else {  // BlockBegin
                const Token& tag = peek();
                if (tag.kind == TokKind::Name &&
                    std::find(end_tags.begin(), end_tags.end(), tag.text) != end_tags.end())
                    return body;
                advance();
                body.push_back(parse_statement());
            }
        }
    }

    // After `{% name`: consumes the tag keyword given; expects `%}`.
    void close_tag(std::string_view tag) {
        advance();  // '{%'
        advance();  // the keyword
        expect_block_end(tag);
    }

    StmtPtr parse_statement() {
        size_t at = cur().offset;
        if (cur().kind != TokKind::Name) fail_here(fmt::format("expected a tag name, got {}", describe(cur())));
        std::string tag = cur().text;
        advance();
        auto s = std::make_unique<Stmt>();
        s->offset = at;
        if (tag == "if") return parse_if(std::move(s));
        if (tag == "for") return parse_for(std::move(s));
        if (tag == "set") return parse_set(std::move(s));
        if (tag == "macro") return parse_macro(std::move(s));
        if (tag == "call") return parse_call_block(std::move(s));
        if (tag == "generation") {
            expect_block_end(tag);
            s->kind = Stmt::Kind::Block;
            s->body = parse_body({"endgeneration"}, tag, at);
            close_tag("endgeneration");
            return s;
        }
        if (tag == "break" || tag == "continue") {
            if (loop_depth_ == 0) src_.fail(at, fmt::format("'{}' outside of a for loop", tag));
            s->kind = tag == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
            expect_block_end(tag);
            return s;
        }
        static constexpr std::string_view closers[] = {"endif", "elif", "else", "endfor", "endset", "endmacro",
                                                       "endcall", "endgeneration"};
        if (std::find(std::begin(closers), std::end(closers), tag) != std::end(closers))
            src_.fail(at, fmt::format("unexpected '{}': no open block that it closes", tag));
        src_.fail(at, fmt::format("unknown tag '{}'", clip(tag)));
    }

    // Inside an if statement an unknown filter or test fails when it runs, not when the template parses, as in
    // Jinja2 (DeepSeek V3.2 pipes string tool arguments through a from_json filter that Jinja2 lacks).
    StmtPtr parse_if(StmtPtr s) {
        s->kind = Stmt::Kind::If;
        ++in_if_;
        struct Leave {
            int& n;
            ~Leave() { --n; }
        } leave{in_if_};
        ExprPtr cond = parse_expression();
        expect_block_end("if");
        while (true) {
            Body body = parse_body({"elif", "else", "endif"}, "if", s->offset);
            s->branches.emplace_back(std::move(cond), std::move(body));
            advance();  // '{%'
            std::string tag = cur().text;
            advance();
            if (tag == "endif") {
                expect_block_end(tag);
                return s;
            }
            if (tag == "elif") {
                cond = parse_expression();
                expect_block_end(tag);
                continue;
            }
            expect_block_end(tag);  // else
            Body else_body = parse_body({"endif"}, "if", s->offset);
            s->branches.emplace_back(nullptr, std::move(else_body));
            close_tag("endif");
            return s;
        }
    }

    std::vector<std::string> parse_targets(std::string_view what) {
        std::vector<std::string> names;
        bool paren = skip_op("(");
        do {
            names.push_back(expect_name(what));
        } while (skip_op(","));
        if (paren) expect_op(")");
        return names;
    }

    StmtPtr parse_for(StmtPtr s) {
        s->kind = Stmt::Kind::For;
        s->targets = parse_targets("a loop variable name");
        if (!skip_name("in")) fail_here(fmt::format("expected 'in' in for loop, got {}", describe(cur())));
        s->expr = parse_expression(false);
        if (skip_name("if")) s->cond = parse_expression();
        if (is_name("recursive")) fail_here("recursive for loops are not supported");
        expect_block_end("for");
        ++loop_depth_;
        const size_t mentions = loop_mentions_;
        s->body = parse_body({"else", "endfor"}, "for", s->offset);
        s->uses_loop = loop_mentions_ != mentions;
        --loop_depth_;
        advance();  // '{%'
        std::string tag = cur().text;
        advance();
        expect_block_end(tag);
        if (tag == "else") {
            s->else_body = parse_body({"endfor"}, "for", s->offset);
            close_tag("endfor");
        }
        return s;
    }

    StmtPtr parse_set(StmtPtr s) {
        s->kind = Stmt::Kind::Set;
        if (cur().kind == TokKind::Name && peek().kind == TokKind::Op && peek().text == ".") {
            s->targets.push_back(cur().text);
            advance();
            advance();
            s->attr = expect_name("an attribute name");
        } else {
            s->targets = parse_targets("a variable name");
        }
        if (skip_op("=")) {
            s->expr = parse_tuple_expression();
            expect_block_end("set");
            return s;
        }
        if (s->targets.size() != 1 || !s->attr.empty()) fail_here("a block set takes one plain variable name");
        expect_block_end("set");
        s->kind = Stmt::Kind::SetBlock;
        s->body = parse_body({"endset"}, "set", s->offset);
        close_tag("endset");
        return s;
    }

    std::vector<MacroParam> parse_params() {
        std::vector<MacroParam> params;
        expect_op("(");
        while (!skip_op(")")) {
            if (!params.empty()) expect_op(",");
            if (skip_op(")")) break;
            MacroParam p;
            p.name = expect_name("a parameter name");
            if (skip_op("=")) p.default_value = parse_expression();
            params.push_back(std::move(p));
        }
        return params;
    }

    StmtPtr parse_macro(StmtPtr s) {
        s->kind = Stmt::Kind::Macro;
        s->name = expect_name("a macro name");
        s->params = parse_params();
        expect_block_end("macro");
        int saved_loops = loop_depth_;
        loop_depth_ = 0;
        s->body = parse_body({"endmacro"}, "macro", s->offset);
        loop_depth_ = saved_loops;
        advance();  // '{%'
        advance();  // endmacro
        if (cur().kind == TokKind::Name) advance();  // {% endmacro name %}
        expect_block_end("endmacro");
        return s;
    }

    StmtPtr parse_call_block(StmtPtr s) {
        s->kind = Stmt::Kind::CallBlock;
        if (is_op("(")) s->params = parse_params();
        s->expr = parse_expression();
        if (s->expr->kind != Expr::Kind::Call) src_.fail(s->expr->offset, "expected a macro call in 'call' tag");
        expect_block_end("call");
        s->body = parse_body({"endcall"}, "call", s->offset);
        close_tag("endcall");
        return s;
    }

    // ---- expressions ----
    // An expression, or several separated by commas (a tuple), as in `{{ a, b }}` and `{% set x = 1, 2 %}`.
    ExprPtr parse_tuple_expression() {
        size_t at = cur().offset;
        ExprPtr first = parse_expression();
        if (!is_op(",")) return first;
        auto tuple = make(Expr::Kind::TupleLit, at);
        tuple->args.push_back(std::move(first));
        while (skip_op(",")) {
            if (cur().kind == TokKind::VarEnd || cur().kind == TokKind::BlockEnd) break;
            tuple->args.push_back(parse_expression());
        }
        return finish(std::move(tuple));
    }

    ExprPtr parse_expression(bool with_condexpr = true) {
        DepthGuard guard(*this);
        if (!with_condexpr) return parse_or();
        ExprPtr expr = parse_or();
        while (is_name("if")) {
            size_t at = cur().offset;
            advance();
            auto cond = make(Expr::Kind::Cond, at);
            cond->args.push_back(std::move(expr));
            cond->args.push_back(parse_or());
            cond->args.push_back(skip_name("else") ? parse_expression() : nullptr);
            expr = finish(std::move(cond));
        }
        return expr;
    }

    ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, size_t at) {
        auto e = make(Expr::Kind::Binary, at);
        e->name = std::move(op);
        e->args.push_back(std::move(left));
        e->args.push_back(std::move(right));
        return finish(std::move(e));
    }

    ExprPtr parse_or() { return parse_left_assoc({"or"}, &Parser::parse_and); }
    ExprPtr parse_and() { return parse_left_assoc({"and"}, &Parser::parse_not); }

    ExprPtr parse_not() {
        if (is_name("not")) {
            DepthGuard guard(*this);
            auto e = make(Expr::Kind::Unary, cur().offset);
            advance();
            e->name = "not";
            e->args.push_back(parse_not());
            return finish(std::move(e));
        }
        return parse_compare();
    }

    ExprPtr parse_compare() {
        size_t at = cur().offset;
        ExprPtr first = parse_math1();
        auto cmp = make(Expr::Kind::Compare, at);
        while (true) {
            static constexpr std::string_view ops[] = {"==", "!=", "<", ">", "<=", ">="};
            if (cur().kind == TokKind::Op && std::find(std::begin(ops), std::end(ops), cur().text) != std::end(ops)) {
                cmp->ops.push_back(cur().text);
                advance();
            } else if (is_name("in")) {
                cmp->ops.push_back("in");
                advance();
            } else if (is_name("not") && peek().kind == TokKind::Name && peek().text == "in") {
                cmp->ops.push_back("not in");
                advance();
                advance();
            } else {
                break;
            }
            cmp->args.push_back(parse_math1());
        }
        if (cmp->ops.empty()) return first;
        cmp->args.insert(cmp->args.begin(), std::move(first));
        return finish(std::move(cmp));
    }

    template <class Next>
    ExprPtr parse_left_assoc(std::initializer_list<std::string_view> ops, Next next) {
        ExprPtr left = (this->*next)();
        // Operators are Op tokens (+ - ~ ...) or names (and, or).
        while ((cur().kind == TokKind::Op || cur().kind == TokKind::Name) &&
               std::find(ops.begin(), ops.end(), cur().text) != ops.end()) {
            std::string op = cur().text;
            size_t at = cur().offset;
            advance();
            left = binary(op, std::move(left), (this->*next)(), at);
        }
        return left;
    }
    ExprPtr parse_math1() { return parse_left_assoc({"+", "-"}, &Parser::parse_concat); }
    ExprPtr parse_concat() { return parse_left_assoc({"~"}, &Parser::parse_math2); }
    ExprPtr parse_math2() { return parse_left_assoc({"*", "/", "//", "%"}, &Parser::parse_pow); }
    ExprPtr parse_pow() { return parse_left_assoc({"**"}, &Parser::parse_unary_filtered); }
    ExprPtr parse_unary_filtered() { return parse_unary(true); }

    ExprPtr parse_unary(bool with_filter) {
        DepthGuard guard(*this);
        ExprPtr node;
        if (is_op("-") || is_op("+")) {
            node = make(Expr::Kind::Unary, cur().offset);
            node->name = cur().text;
            advance();
            node->args.push_back(parse_unary(false));
            node = finish(std::move(node));
        } else {
            node = parse_primary();
        }
        node = parse_postfix(std::move(node));
        if (with_filter) node = parse_filter_expr(std::move(node));
        return node;
    }

    ExprPtr literal(Value v, size_t at) {
        auto e = make(Expr::Kind::Literal, at);
        e->value = std::move(v);
        return e;
    }

    ExprPtr parse_primary() {
        const Token& t = cur();
        size_t at = t.offset;
        switch (t.kind) {
            case TokKind::Name: {
                std::string name = t.text;
                advance();
                if (name == "true" || name == "True") return literal(Value(true), at);
                if (name == "false" || name == "False") return literal(Value(false), at);
                if (name == "none" || name == "None") return literal(Value::none(), at);
                if (name == "loop") ++loop_mentions_;
                auto e = make(Expr::Kind::Name, at);
                e->name = std::move(name);
                return e;
            }
            case TokKind::String: {
                std::string s;
                while (cur().kind == TokKind::String) {
                    s += cur().text;
                    advance();
                }
                return literal(Value(std::move(s)), at);
            }
            case TokKind::Int: advance(); return literal(Value(t.int_value), at);
            case TokKind::Float: advance(); return literal(Value(t.float_value), at);
            case TokKind::Op:
                if (t.text == "(") return parse_parenthesized();
                if (t.text == "[") return parse_list();
                if (t.text == "{") return parse_dict();
                break;
            default: break;
        }
        fail_here(fmt::format("expected an expression, got {}", describe(t)));
    }

    ExprPtr parse_parenthesized() {
        size_t at = cur().offset;
        advance();  // '('
        if (skip_op(")")) return make(Expr::Kind::TupleLit, at);
        ExprPtr first = parse_expression();
        if (skip_op(")")) return first;
        auto tuple = make(Expr::Kind::TupleLit, at);
        tuple->args.push_back(std::move(first));
        while (skip_op(",")) {
            if (is_op(")")) break;
            tuple->args.push_back(parse_expression());
        }
        expect_op(")");
        return finish(std::move(tuple));
    }

    ExprPtr parse_list() {
        auto list = make(Expr::Kind::ListLit, cur().offset);
        advance();  // '['
        while (!skip_op("]")) {
            if (!list->args.empty()) expect_op(",");
            if (skip_op("]")) break;
            list->args.push_back(parse_expression());
        }
        return finish(std::move(list));
    }

    ExprPtr parse_dict() {
        auto dict = make(Expr::Kind::DictLit, cur().offset);
        advance();  // '{'
        while (!skip_op("}")) {
            if (!dict->args.empty()) expect_op(",");
            if (skip_op("}")) break;
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args.push_back(parse_expression());
        }
        return finish(std::move(dict));
    }

    ExprPtr parse_postfix(ExprPtr node) {
        while (true) {
            if (is_op(".")) {
                advance();
                size_t at = cur().offset;
                if (cur().kind == TokKind::Int) {
                    auto item = make(Expr::Kind::Item, at);
                    item->args.push_back(std::move(node));
                    item->args.push_back(literal(Value(cur().int_value), at));
                    advance();
                    node = finish(std::move(item));
                    continue;
                }
                auto attr = make(Expr::Kind::Attr, at);
                attr->name = expect_name("an attribute name");
                attr->args.push_back(std::move(node));
                node = finish(std::move(attr));
            } else if (is_op("[")) {
                node = parse_subscript(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_subscript(ExprPtr node) {
        size_t at = cur().offset;
        advance();  // '['
        ExprPtr parts[3];
        bool is_slice = false;
        if (!is_op(":")) parts[0] = parse_expression();
        if (skip_op(":")) {
            is_slice = true;
            if (!is_op("]") && !is_op(":")) parts[1] = parse_expression();
            if (skip_op(":") && !is_op("]")) parts[2] = parse_expression();
        }
        expect_op("]");
        auto e = make(is_slice ? Expr::Kind::Slice : Expr::Kind::Item, at);
        e->args.push_back(std::move(node));
        e->args.push_back(std::move(parts[0]));
        if (is_slice) {
            e->args.push_back(std::move(parts[1]));
            e->args.push_back(std::move(parts[2]));
        }
        return finish(std::move(e));
    }

    // '(' args ')' into e->args (after the ones already there) and e->kwargs.
    void parse_call_args(Expr& e) {
        expect_op("(");
        bool first = true;
        while (!skip_op(")")) {
            if (!first) expect_op(",");
            first = false;
            if (skip_op(")")) break;
            if (cur().kind == TokKind::Name && peek().kind == TokKind::Op && peek().text == "=") {
                std::string key = cur().text;
                advance();
                advance();
                e.kwargs.emplace_back(std::move(key), parse_expression());
            } else {
                if (!e.kwargs.empty()) fail_here("positional argument after keyword argument");
                e.args.push_back(parse_expression());
            }
        }
    }

    ExprPtr parse_call(ExprPtr node) {
        auto call = make(Expr::Kind::Call, cur().offset);
        call->args.push_back(std::move(node));
        parse_call_args(*call);
        return finish(std::move(call));
    }

    ExprPtr parse_filter_expr(ExprPtr node) {
        while (true) {
            if (is_op("|")) {
                advance();
                size_t at = cur().offset;
                auto f = make(Expr::Kind::Filter, at);
                f->name = expect_name("a filter name");
                if (!has_filter(f->name) && in_if_ == 0)
                    src_.fail(at, fmt::format("unknown filter '{}'", clip(f->name)));
                f->args.push_back(std::move(node));
                if (is_op("(")) parse_call_args(*f);
                node = finish(std::move(f));
            } else if (is_name("is")) {
                node = parse_test(std::move(node));
            } else if (is_op("(")) {
                node = parse_call(std::move(node));
            } else {
                return node;
            }
        }
    }

    ExprPtr parse_test(ExprPtr node) {
        advance();  // 'is'
        auto t = make(Expr::Kind::Test, cur().offset);
        t->negated = skip_name("not");
        size_t at = cur().offset;
        t->name = expect_name("a test name");
        if (!has_test(t->name) && in_if_ == 0) src_.fail(at, fmt::format("unknown test '{}'", clip(t->name)));
        t->args.push_back(std::move(node));
        const Token& c = cur();
        bool arg_follows = c.kind == TokKind::Name || c.kind == TokKind::String || c.kind == TokKind::Int ||
                           c.kind == TokKind::Float || (c.kind == TokKind::Op && (c.text == "[" || c.text == "{"));
        if (is_op("(")) {
            parse_call_args(*t);
        } else if (arg_follows && !is_name("else") && !is_name("or") && !is_name("and")) {
            if (is_name("is")) fail_here("tests cannot be chained with 'is'");
            t->args.push_back(parse_postfix(parse_primary()));
        }
        return finish(std::move(t));
    }

    const Source& src_;
    std::vector<Token> toks_;
    size_t pos_ = 0;
    int depth_ = 0;
    int loop_depth_ = 0;
    int in_if_ = 0;  // if statements open around the current position
    size_t loop_mentions_ = 0;  // `loop` read anywhere so far (a for body that never reads it needs none)
};

}  // namespace

Body parse(const Source& source) {
    return Parser(source, lex(source)).parse_template();
}

}  // namespace quill::chat::jinja
