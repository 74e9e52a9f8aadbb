// The parsed template: statements (text, output, if, for, set, macro, call) over expressions.
#pragma once

#include "engine/chat/jinja_value.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace quill::chat::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
    enum class Kind {
        Literal,   // value
        Name,      // name
        Attr,      // args[0].name
        Item,      // args[0][args[1]]
        Slice,     // args[0][args[1]:args[2]:args[3]] (absent parts are null)
        Call,      // args[0](args[1..], kwargs)
        Filter,    // args[0] | name(args[1..], kwargs)
        Test,      // args[0] is [not] name(args[1..])
        Unary,     // name ("-", "+", "not") args[0]
        Binary,    // args[0] name args[1]: + - * / // % ** ~ and or
        Compare,   // args[0] ops[0] args[1] ops[1] args[2] ...: == != < > <= >= in "not in"
        Cond,      // args[0] if args[1] else args[2] (args[2] null: undefined)
        ListLit,   // [args...]
        TupleLit,  // (args...) evaluated as a list
        DictLit,   // {args[0]: args[1], args[2]: args[3], ...}
    };
    Kind kind = Kind::Literal;
    size_t offset = 0;  // source position, for messages
    Value value;
    std::string name;
    std::vector<ExprPtr> args;
    std::vector<std::pair<std::string, ExprPtr>> kwargs;
    std::vector<std::string> ops;
    bool negated = false;
    int height = 1;  // 1 + the tallest child: bounded by the parser, so evaluation and freeing cannot overflow
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
    std::string name;
    ExprPtr default_value;  // null: none given
};

struct Stmt {
    enum class Kind {
        Text,       // text
        Output,     // {{ expr }}
        If,         // branches: (cond, body)...; a null cond is the else branch
        For,        // for targets in expr [if cond]: body [else else_body]
        Set,        // set targets = expr; with attr set: targets[0].attr = expr
        SetBlock,   // set targets[0]: body rendered to a string
        Macro,      // macro name(params): body
        CallBlock,  // call(params) expr: body is the caller
        Block,      // a body rendered as is ({% generation %})
        Break,
        Continue,
    };
    Kind kind = Kind::Text;
    size_t offset = 0;
    std::string text;
    ExprPtr expr;
    ExprPtr cond;
    std::vector<std::string> targets;
    std::string attr;
    std::vector<std::pair<ExprPtr, Body>> branches;
    Body body;
    Body else_body;
    std::string name;
    std::vector<MacroParam> params;
    bool uses_loop = true;  // For: the body reads `loop` (else the loop variable is not made)
};

}  // namespace quill::chat::jinja
