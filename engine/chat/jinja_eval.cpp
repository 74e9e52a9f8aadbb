#include "engine/chat/jinja_eval.h"

#include "engine/chat/jinja_builtins.h"
#include "engine/io/escape.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace quill::chat::jinja {

namespace {

struct Scope {
    std::unordered_map<std::string, Value> vars;
    std::shared_ptr<Scope> parent;
    bool captured = false;  // a macro defined here refers to it

    const Value* find(const std::string& name) const {
        for (const Scope* s = this; s; s = s->parent.get()) {
            auto it = s->vars.find(name);
            if (it != s->vars.end()) return &it->second;
        }
        return nullptr;
    }
};
using ScopePtr = std::shared_ptr<Scope>;

enum class Flow { Normal, Break, Continue };

// Statements and expressions being run at once, across macro calls, and the stack they may use: bounds that keep
// a recursive template from overflowing the stack (a sanitizer build's frames are several times larger).
constexpr int kMaxActive = 1500;
constexpr uintptr_t kStackBudget = uintptr_t(3) << 20;

// How an expression reads in messages: `messages`, `message.content`, `foo()`.
std::string describe(const Expr& e) {
    switch (e.kind) {
        case Expr::Kind::Name: return clip(e.name);
        case Expr::Kind::Attr: return describe(*e.args[0]) + "." + clip(e.name);
        case Expr::Kind::Item: return describe(*e.args[0]) + "[...]";
        case Expr::Kind::Call: return describe(*e.args[0]) + "()";
        default: return "expression";
    }
}

// Whether `target` can be reached from `v` (assigning v into target would make a cycle), or v nests too deep.
// Each container is visited once.
bool reaches(const Value& v, const Dict* target, std::unordered_set<const void*>& seen, int depth, Budget& budget) {
    if (depth > kMaxNesting) value_error(fmt::format("values nested more than {} levels deep", kMaxNesting));
    budget.step();
    if (v.is_list()) {
        if (!seen.insert(v.as_list().get()).second) return false;
        for (const Value& item : v.as_list()->items)
            if (reaches(item, target, seen, depth + 1, budget)) return true;
    } else if (v.is_dict()) {
        if (v.as_dict().get() == target) return true;
        if (!seen.insert(v.as_dict().get()).second) return false;
        for (const auto& kv : v.as_dict()->items)
            if (reaches(kv.second, target, seen, depth + 1, budget)) return true;
    } else if (v.is_callable()) {
        return reaches(v.as_callable()->bound_self, target, seen, depth + 1, budget);
    }
    return false;
}

class Evaluator {
public:
    Evaluator(const Source& source, const RenderOptions& options)
        : src_(source), opts_(options), budget_(options), env_{budget_, options.now} {}

    Text run(const Body& body, const Value& vars) {
        auto globals = std::make_shared<Scope>();
        Dict builtins;
        add_globals(builtins, env_);
        for (const auto& [k, v] : builtins.items) globals->vars[k.as_string()] = v;
        auto root = std::make_shared<Scope>();
        root->parent = globals;
        if (vars.is_dict())
            for (const auto& [k, v] : vars.as_dict()->items)
                if (k.is_string()) root->vars[k.as_string()] = v;
        root_ = root;
        stack_base_ = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
        Text out;
        try {
            exec_body(body, root, out);
        } catch (const RaisedError& e) {
            throw TemplateRaised(escape_for_terminal(clip(e.message)));
        }
        return out;
    }

private:
    [[noreturn]] void fail(size_t offset, const std::string& what) const { src_.fail(offset, what); }
    [[noreturn]] void fail_budget(size_t offset, const std::string& what) const {
        throw TemplateBudgetError(escape_for_terminal(fmt::format("chat template: {}: {}", src_.where(offset), what)));
    }

    void tick(size_t offset) {
        try {
            budget_.step();
        } catch (const BudgetError& e) {
            fail_budget(offset, e.message);
        }
    }

    // Counts one statement or expression being run for its lifetime.
    struct Active {
        Evaluator& ev;
        Active(Evaluator& e, size_t offset) : ev(e) {
            auto here = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
            if (++ev.active_ > kMaxActive || ev.stack_base_ - here > kStackBudget) {
                --ev.active_;
                ev.fail(offset, "template nested too deeply while running (recursion?)");
            }
        }
        ~Active() { --ev.active_; }
        Active(const Active&) = delete;
        Active& operator=(const Active&) = delete;
    };

    // Appends template text or a printed value to the output.
    template <class Piece>  // std::string (the template's own text) or Text
    void emit(Text& out, const Piece& s, size_t offset) {
        if (out.size() + s.size() > opts_.max_output_bytes)
            fail_budget(offset, fmt::format("output larger than the limit of {} bytes (budget: output size)",
                                            opts_.max_output_bytes));
        try {
            append(out, s, budget_);
        } catch (const BudgetError& e) {
            fail_budget(offset, e.message);
        }
    }

    // ---- statements ----
    Flow exec_body(const Body& body, const ScopePtr& scope, Text& out) {
        for (const auto& stmt : body) {
            Flow f = exec(*stmt, scope, out);
            if (f != Flow::Normal) return f;
        }
        return Flow::Normal;
    }

    // exec and eval recurse through each other; they stay small and leave the heavy cases to helpers that are
    // not inlined, so that each level of nesting costs little stack (sanitizers multiply frame sizes).
    Flow exec(const Stmt& s, const ScopePtr& scope, Text& out) {
        tick(s.offset);
        Active active(*this, s.offset);
        switch (s.kind) {
            case Stmt::Kind::Text: emit(out, s.text, s.offset); return Flow::Normal;
            case Stmt::Kind::Output: exec_output(s, scope, out); return Flow::Normal;
            case Stmt::Kind::If:
                for (const auto& [cond, body] : s.branches)
                    if (!cond || eval(*cond, scope).truthy()) return exec_body(body, scope, out);
                return Flow::Normal;
            case Stmt::Kind::For: exec_for(s, scope, out); return Flow::Normal;
            case Stmt::Kind::Set: exec_set(s, scope); return Flow::Normal;
            case Stmt::Kind::SetBlock: exec_set_block(s, scope); return Flow::Normal;
            case Stmt::Kind::Macro: define_macro(s, scope); return Flow::Normal;
            case Stmt::Kind::CallBlock: exec_call_block(s, scope, out); return Flow::Normal;
            case Stmt::Kind::Block: return exec_body(s.body, scope, out);
            case Stmt::Kind::Break: return Flow::Break;
            case Stmt::Kind::Continue: return Flow::Continue;
        }
        return Flow::Normal;
    }

    [[gnu::noinline]] void exec_output(const Stmt& s, const ScopePtr& scope, Text& out) {
        emit(out, as_str(eval(*s.expr, scope), s.offset).as_text(), s.offset);
    }

    // str(v), for output: a BudgetError (a list printed past the string limit) points at `offset`.
    Value as_str(const Value& v, size_t offset) {
        try {
            return to_str(v, budget_);
        } catch (const BudgetError& e) {
            fail_budget(offset, e.message);
        } catch (const ValueError& e) {
            fail(offset, e.message);
        }
    }

    [[gnu::noinline]] void exec_set_block(const Stmt& s, const ScopePtr& scope) {
        Text captured;
        exec_body(s.body, scope, captured);
        scope->vars[s.targets[0]] = Value(std::move(captured));
    }

    [[gnu::noinline]] void define_macro(const Stmt& s, const ScopePtr& scope) {
        scope->vars[s.name] = make_macro(s.name, s, scope);
    }

    [[gnu::noinline]] void exec_call_block(const Stmt& s, const ScopePtr& scope, Text& out) {
        emit(out, as_str(call_block(s, scope), s.offset).as_text(), s.offset);
    }

    void bind_targets(Scope& scope, const std::vector<std::string>& targets, const Value& v, size_t offset) {
        if (targets.size() == 1) {
            scope.vars[targets[0]] = v;
            return;
        }
        std::vector<Value> items;
        try {
            items = iterate(v, env_);
        } catch (const ValueError& e) {
            fail(offset, "cannot unpack: " + e.message);
        } catch (const BudgetError& e) {
            fail_budget(offset, e.message);
        }
        if (items.size() != targets.size())
            fail(offset, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
        for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
    }

    [[gnu::noinline]] void exec_for(const Stmt& s, const ScopePtr& scope, Text& out) {
        Value iterable = eval(*s.expr, scope);
        // A list's own items (no copy: lists do not change while rendering), or what iterate() makes.
        std::vector<Value> made;
        const std::vector<Value>* list = iterable.is_list() ? &iterable.as_list()->items : &made;
        try {
            if (!iterable.is_list()) made = iterate(iterable, env_);
        } catch (const ValueError& e) {
            fail(s.expr->offset, e.message);
        } catch (const BudgetError& e) {
            fail_budget(s.expr->offset, e.message);
        }
        if (s.cond) {  // {% for x in xs if cond %}: the loop sees only the items that pass
            std::vector<Value> kept;
            for (const Value& item : *list) {
                tick(s.offset);
                auto probe = std::make_shared<Scope>();
                probe->parent = scope;
                bind_targets(*probe, s.targets, item, s.offset);
                if (eval(*s.cond, probe).truthy()) kept.push_back(item);
            }
            made = std::move(kept);
            list = &made;
        }
        const std::vector<Value>& items = *list;
        if (items.empty()) {
            exec_body(s.else_body, scope, out);
            return;
        }
        auto n = static_cast<int64_t>(items.size());
        if (!s.uses_loop) {
            ScopePtr iter_scope;
            for (int64_t i = 0; i < n; ++i) {
                tick(s.offset);
                next_iteration_scope(iter_scope, scope, s.targets, false);
                bind_targets(*iter_scope, s.targets, items[static_cast<size_t>(i)], s.offset);
                if (exec_body(s.body, iter_scope, out) == Flow::Break) break;
            }
            return;
        }
        auto loop = std::make_shared<Dict>();
        loop->set(Value("length"), Value(n));
        loop->set(Value("depth"), Value(1));
        loop->set(Value("depth0"), Value(0));
        auto cycle = std::make_shared<Callable>();
        cycle->name = "loop.cycle";
        cycle->fn = [weak = std::weak_ptr<Dict>(loop)](CallArgs& a) -> Value {
            auto l = weak.lock();
            if (!l || a.positional.empty()) value_error("loop.cycle() needs arguments inside its loop");
            auto i = static_cast<size_t>(l->find(std::string_view("index0"))->as_int());
            return a.positional[i % a.positional.size()];
        };
        loop->set(Value("cycle"), Value(cycle));
        // The per-iteration fields, in this order after the four above; updated in place (the loop dict cannot
        // gain keys: only namespaces take assignments).
        const size_t fields = loop->items.size();
        for (const char* name : {"index", "index0", "revindex", "revindex0", "first", "last", "previtem", "nextitem"})
            loop->set(Value(name), Value());
        ScopePtr iter_scope;
        for (int64_t i = 0; i < n; ++i) {
            tick(s.offset);
            next_iteration_scope(iter_scope, scope, s.targets, true);
            bind_targets(*iter_scope, s.targets, items[static_cast<size_t>(i)], s.offset);
            auto field = [&](size_t k) -> Value& { return loop->items[fields + k].second; };
            field(0) = Value(i + 1);
            field(1) = Value(i);
            field(2) = Value(n - i);
            field(3) = Value(n - i - 1);
            field(4) = Value(i == 0);
            field(5) = Value(i == n - 1);
            field(6) = i > 0 ? items[static_cast<size_t>(i - 1)] : Value();
            field(7) = i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value();
            iter_scope->vars["loop"] = Value(loop);
            if (exec_body(s.body, iter_scope, out) == Flow::Break) break;
        }
    }

    // Each iteration of a loop runs in a fresh scope whose parent is the loop's. The previous iteration's scope
    // serves again, emptied of what its body set, when nothing kept a reference to it (no macro was defined in it):
    // the same meaning without allocating a scope each time.
    static void next_iteration_scope(ScopePtr& iter_scope, const ScopePtr& parent, const std::vector<std::string>& targets,
                                     bool with_loop) {
        if (!iter_scope || iter_scope.use_count() > 1 || iter_scope->captured) {
            iter_scope = std::make_shared<Scope>();
            iter_scope->parent = parent;
            return;
        }
        auto& vars = iter_scope->vars;
        if (vars.size() == targets.size() + (with_loop ? 1 : 0)) return;  // only what is bound again next
        for (auto it = vars.begin(); it != vars.end();) {
            const bool keep = (with_loop && it->first == "loop") ||
                              std::find(targets.begin(), targets.end(), it->first) != targets.end();
            it = keep ? std::next(it) : vars.erase(it);
        }
    }

    [[gnu::noinline]] void exec_set(const Stmt& s, const ScopePtr& scope) {
        Value v = eval(*s.expr, scope);
        if (s.attr.empty()) {
            bind_targets(*scope, s.targets, v, s.offset);
            return;
        }
        const Value* ns = scope->find(s.targets[0]);
        if (!ns || !ns->is_dict() || !ns->as_dict()->is_namespace)
            fail(s.offset, fmt::format("cannot assign attribute '{}': '{}' is not a namespace", clip(s.attr),
                                       clip(s.targets[0])));
        std::unordered_set<const void*> seen;
        try {
            if (reaches(v, ns->as_dict().get(), seen, 0, budget_))
                fail(s.offset, fmt::format("cannot assign '{}.{}': the value contains the namespace itself",
                                           clip(s.targets[0]), clip(s.attr)));
        } catch (const ValueError& e) {
            fail(s.offset, e.message);
        } catch (const BudgetError& e) {
            fail_budget(s.offset, e.message);
        }
        ns->as_dict()->set(Value(s.attr), std::move(v));
    }

    // ---- macros and calls ----
    // A macro, or a call block's caller: s.params and s.body, run in a frame whose parent is `scope`.
    Value make_macro(const std::string& name, const Stmt& s, const ScopePtr& scope) {
        scope->captured = true;
        auto c = std::make_shared<Callable>();
        c->name = name;
        c->fn = [this, &s, weak = std::weak_ptr<Scope>(scope)](CallArgs& a) {
            return call_macro(s.params, s.body, weak.lock(), a);
        };
        return Value(c);
    }

    Value call_macro(const std::vector<MacroParam>& params, const Body& body, ScopePtr closure, CallArgs& a) {
        budget_.step(params.size() * (1 + a.keyword.size()) + a.positional.size());  // binding the arguments
        auto frame = std::make_shared<Scope>();
        frame->parent = closure ? closure : root_.lock();
        std::vector<Value> varargs;
        for (size_t i = 0; i < a.positional.size(); ++i) {
            if (i < params.size()) frame->vars[params[i].name] = a.positional[i];
            else varargs.push_back(a.positional[i]);
        }
        auto kwargs = std::make_shared<Dict>();
        for (auto& [k, v] : a.keyword) {
            bool is_param = false;
            for (const auto& p : params) is_param = is_param || p.name == k;
            if (is_param || k == "caller") frame->vars[k] = v;
            else kwargs->set(Value(k), v);
        }
        for (const auto& p : params)
            if (!frame->vars.count(p.name)) frame->vars[p.name] = p.default_value ? eval(*p.default_value, frame) : Value();
        frame->vars["varargs"] = Value::tuple(std::move(varargs));
        frame->vars["kwargs"] = Value(kwargs);
        Text out;
        exec_body(body, frame, out);
        return Value(std::move(out));
    }

    // Errors point at the callee: `f` in `f(x)`.
    Value invoke(const Value& callee, CallArgs& args, const Expr& callee_expr) {
        size_t offset = callee_expr.offset;
        if (!callee.is_callable()) {
            if (callee.is_undefined()) fail(offset, fmt::format("unknown function or macro '{}'", describe(callee_expr)));
            fail(offset, fmt::format("'{}' is not callable ({})", describe(callee_expr), callee.type_name()));
        }
        tick(offset);
        if (++depth_ > opts_.max_call_depth) {
            --depth_;
            fail(offset, fmt::format("calls nested more than {} deep (recursion?)", opts_.max_call_depth));
        }
        struct Unwind {
            int& d;
            ~Unwind() { --d; }
        } unwind{depth_};
        const CallablePtr c = callee.as_callable();
        try {
            return c->fn(args);
        } catch (const ValueError& e) {
            fail(offset, fmt::format("{}: {}", clip(c->name), e.message));
        }
    }

    CallArgs eval_args(const Expr& e, size_t first, const ScopePtr& scope) {
        CallArgs args;
        for (size_t i = first; i < e.args.size(); ++i) args.positional.push_back(eval(*e.args[i], scope));
        for (const auto& [k, v] : e.kwargs) args.keyword.emplace_back(k, eval(*v, scope));
        return args;
    }

    Value call_block(const Stmt& s, const ScopePtr& scope) {
        const Expr& call = *s.expr;
        Value callee = eval(*call.args[0], scope);
        CallArgs args = eval_args(call, 1, scope);
        args.keyword.emplace_back("caller", make_macro("caller", s, scope));
        return invoke(callee, args, *call.args[0]);
    }

    // ---- expressions ----
    Value eval(const Expr& e, const ScopePtr& scope) {
        Active active(*this, e.offset);
        tick(e.offset);
        try {
            return eval_inner(e, scope);
        } catch (const ValueError& err) {
            fail(e.offset, err.message);
        } catch (const BudgetError& err) {
            fail_budget(e.offset, err.message);
        }
    }

    Value eval_inner(const Expr& e, const ScopePtr& scope) {
        switch (e.kind) {
            case Expr::Kind::Literal: return e.value;
            case Expr::Kind::Name: {
                const Value* v = scope->find(e.name);
                return v ? *v : Value();
            }
            case Expr::Kind::Attr: return get_attr(eval(*e.args[0], scope), e.name, env_);
            case Expr::Kind::Item: return get_item(eval(*e.args[0], scope), eval(*e.args[1], scope), env_);
            case Expr::Kind::Slice: return eval_slice(e, scope);
            case Expr::Kind::Call:
            case Expr::Kind::Filter:
            case Expr::Kind::Test: return eval_call(e, scope);
            case Expr::Kind::Unary: return eval_unary(e, scope);
            case Expr::Kind::Binary: return eval_binary(e, scope);
            case Expr::Kind::Compare: return eval_compare(e, scope);
            case Expr::Kind::Cond:
                if (eval(*e.args[1], scope).truthy()) return eval(*e.args[0], scope);
                return e.args[2] ? eval(*e.args[2], scope) : Value();
            case Expr::Kind::ListLit:
            case Expr::Kind::TupleLit:
            case Expr::Kind::DictLit: return eval_collection(e, scope);
        }
        return Value();
    }

    [[gnu::noinline]] Value eval_slice(const Expr& e, const ScopePtr& scope) {
        Value obj = eval(*e.args[0], scope);
        Value parts[3];
        for (size_t i = 0; i < 3; ++i)
            if (e.args[i + 1]) parts[i] = eval(*e.args[i + 1], scope);
        return slice(obj, parts[0], parts[1], parts[2], env_);
    }

    // f(args), x | f(args), x is f(args)
    [[gnu::noinline]] Value eval_call(const Expr& e, const ScopePtr& scope) {
        Value first = eval(*e.args[0], scope);
        CallArgs args = eval_args(e, 1, scope);
        if (e.kind == Expr::Kind::Call) return invoke(first, args, *e.args[0]);
        if (e.kind == Expr::Kind::Filter) return apply_filter(e.name, first, args, env_);
        return Value(apply_test(e.name, first, args, env_) != e.negated);
    }

    [[gnu::noinline]] Value eval_collection(const Expr& e, const ScopePtr& scope) {
        if (e.kind == Expr::Kind::DictLit) {
            auto d = std::make_shared<Dict>();
            for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
                Value key = eval(*e.args[i], scope);
                set_item(*d, key, eval(*e.args[i + 1], scope), budget_);
            }
            return Value(d);
        }
        std::vector<Value> items;
        for (const auto& a : e.args) items.push_back(eval(*a, scope));
        budget_.alloc(items.size() * sizeof(Value));
        return e.kind == Expr::Kind::TupleLit ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }

    [[gnu::noinline]] Value eval_unary(const Expr& e, const ScopePtr& scope) {
        Value v = eval(*e.args[0], scope);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) fail(e.args[0]->offset, fmt::format("'{}' is undefined", describe(*e.args[0])));
        if (v.is_float()) return Value(e.name == "-" ? -v.as_double() : v.as_double());
        if (!v.is_int() && !v.is_bool()) value_error(fmt::format("bad operand type for unary {}: '{}'", e.name, v.type_name()));
        if (e.name == "+") return Value(v.as_int());
        if (v.as_int() == std::numeric_limits<int64_t>::min()) value_error("integer overflow");
        return Value(-v.as_int());
    }

    [[gnu::noinline]] Value eval_binary(const Expr& e, const ScopePtr& scope) {
        Value a = eval(*e.args[0], scope);
        if (e.name == "and") return a.truthy() ? eval(*e.args[1], scope) : a;
        if (e.name == "or") return a.truthy() ? a : eval(*e.args[1], scope);
        Value b = eval(*e.args[1], scope);
        if (e.name == "~") {
            Text out;
            append_str(out, a, budget_);
            append_str(out, b, budget_);
            return Value(std::move(out));
        }
        for (size_t i = 0; i < 2; ++i)
            if ((i == 0 ? a : b).is_undefined())
                fail(e.args[i]->offset, fmt::format("'{}' is undefined", describe(*e.args[i])));
        return binary_op(e.name, a, b, env_);
    }

    [[gnu::noinline]] Value eval_compare(const Expr& e, const ScopePtr& scope) {
        Value left = eval(*e.args[0], scope);
        for (size_t i = 0; i < e.ops.size(); ++i) {
            Value right = eval(*e.args[i + 1], scope);
            const std::string& op = e.ops[i];
            bool ok;
            if (op == "==") ok = equals(left, right, budget_);
            else if (op == "!=") ok = !equals(left, right, budget_);
            else if (op == "in") ok = contains(right, left, env_);
            else if (op == "not in") ok = !contains(right, left, env_);
            else {
                int c = compare(left, right, budget_);
                ok = op == "<" ? c < 0 : op == ">" ? c > 0 : op == "<=" ? c <= 0 : c >= 0;
            }
            if (!ok) return Value(false);
            left = std::move(right);
        }
        return Value(true);
    }

    const Source& src_;
    const RenderOptions& opts_;
    Budget budget_;
    BuiltinEnv env_;
    std::weak_ptr<Scope> root_;
    int depth_ = 0;   // macro calls
    int active_ = 0;  // statements and expressions
    uintptr_t stack_base_ = 0;  // the frame that started rendering; the stack grows down from it
};

}  // namespace

Text render(const Source& source, const Body& body, const Value& vars, const RenderOptions& options) {
    return Evaluator(source, options).run(body, vars);
}

}  // namespace quill::chat::jinja
