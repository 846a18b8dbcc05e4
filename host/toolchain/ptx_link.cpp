#include "ptx_link.hpp"

#include "error.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace ptxlab {

namespace fs = std::filesystem;

namespace {

bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '$' ||
           c == '.' || c == '%';
}

size_t skip_space(std::string_view t, size_t p) {
    while (p < t.size() && (t[p] == ' ' || t[p] == '\t' || t[p] == '\n' || t[p] == '\r')) ++p;
    return p;
}

// The offset past the `close` that matches the `open` at p, or npos.
size_t match(std::string_view t, size_t p, char open, char close) {
    int depth = 0;
    for (; p < t.size(); ++p) {
        depth += (t[p] == open) - (t[p] == close);
        if (depth == 0) return p + 1;
    }
    return std::string_view::npos;
}

// "(.reg .f32 p, .param .b8 x[16])" -> "(.reg .f32, .param .b8 [16])": each parameter's tokens but
// its name (an array's size stays).
std::string param_types(std::string_view group) {
    std::string out = "(";
    std::string_view inner = group.substr(1, group.size() - 2);
    bool first = true;
    while (!inner.empty()) {
        const size_t comma = inner.find(',');
        std::string_view one = inner.substr(0, comma);
        inner = comma == std::string_view::npos ? std::string_view{} : inner.substr(comma + 1);
        std::vector<std::string> tokens;
        std::istringstream in{std::string(one)};
        for (std::string tok; in >> tok;) tokens.push_back(tok);
        if (tokens.empty()) continue;
        std::string name = tokens.back();
        tokens.pop_back();
        if (const size_t br = name.find('['); br != std::string::npos) tokens.push_back(name.substr(br));
        std::string p;
        for (const auto& tok : tokens) p += (p.empty() ? "" : " ") + tok;
        out += (first ? "" : ", ") + p;
        first = false;
    }
    return out + ")";
}

int line_of(std::string_view t, size_t offset) {
    return 1 + static_cast<int>(std::count(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
}

// Reads one `.func` head at `at` (the offset of `.func`) of the comment-free text; false when unreadable.
bool read_func(std::string_view t, size_t at, PtxFunc& f) {
    // The linkage directive before it, if any.
    size_t b = at;
    while (b > 0 && (t[b - 1] == ' ' || t[b - 1] == '\t' || t[b - 1] == '\n' || t[b - 1] == '\r')) --b;
    size_t a = b;
    while (a > 0 && ident_char(t[a - 1])) --a;
    const std::string_view before = t.substr(a, b - a);
    f.begin = at;
    if (before == ".extern" || before == ".visible" || before == ".weak") {
        f.linkage = std::string(before);
        f.begin = a;
    }
    size_t p = skip_space(t, at + 5);
    std::string ret;
    if (p < t.size() && t[p] == '(') {
        const size_t e = match(t, p, '(', ')');
        if (e == std::string_view::npos) return false;
        ret = param_types(t.substr(p, e - p)) + " ";
        p = skip_space(t, e);
    }
    const size_t n0 = p;
    while (p < t.size() && ident_char(t[p])) ++p;
    if (p == n0) return false;
    f.name = std::string(t.substr(n0, p - n0));
    p = skip_space(t, p);
    std::string params = "()";
    if (p < t.size() && t[p] == '(') {
        const size_t e = match(t, p, '(', ')');
        if (e == std::string_view::npos) return false;
        params = param_types(t.substr(p, e - p));
        p = e;
    }
    f.signature = ret + params;
    f.line = line_of(t, at);
    // Performance directives (.noreturn, .pragma ...) up to the `;` of a declaration or the body.
    const size_t stop = t.find_first_of(";{", p);
    if (stop == std::string_view::npos) return false;
    f.defined = t[stop] == '{';
    f.end = f.defined ? match(t, stop, '{', '}') : stop + 1;
    return f.end != std::string_view::npos;
}

// Functions the driver supplies to every module: a declaration of one needs no file.
bool system_function(const std::string& name) {
    return name == "vprintf" || name == "malloc" || name == "free" || name == "__assertfail";
}

// The `.ptx` files of a directory but `skip` (its own file), by name: path and text.
std::vector<SourceFile> sibling_files(const std::string& dir, const std::string& skip) {
    std::vector<SourceFile> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir.empty() ? "." : dir, ec)) {
        if (e.path().extension() != ".ptx" || e.path().filename() == skip || !e.is_regular_file(ec)) continue;
        std::ifstream f(e.path(), std::ios::binary);
        std::stringstream ss;
        ss << f.rdbuf();
        if (f) out.push_back({e.path().string(), ss.str()});
    }
    std::sort(out.begin(), out.end(), [](const SourceFile& a, const SourceFile& b) { return a.path < b.path; });
    return out;
}

}  // namespace

std::vector<PtxFunc> ptx_functions(std::string_view text) {
    const std::string clean = strip_comments(text);
    const std::string_view t = clean;
    std::vector<PtxFunc> out;
    for (size_t at = t.find(".func"); at != std::string_view::npos; at = t.find(".func", at + 5)) {
        if ((at > 0 && ident_char(t[at - 1])) || (at + 5 < t.size() && ident_char(t[at + 5]))) continue;
        PtxFunc f;
        if (read_func(t, at, f)) {
            out.push_back(f);
            at = std::max(at, f.end - 5);  // nothing inside a body is a head
        }
    }
    return out;
}

std::vector<std::string> LinkedPtx::files() const {
    std::vector<std::string> out;
    for (const auto& p : pieces)
        if (std::find(out.begin(), out.end(), p.file.path) == out.end()) out.push_back(p.file.path);
    return out;
}

std::vector<LineSpan> LinkedPtx::spans() const {
    std::vector<LineSpan> out;
    for (const auto& p : pieces) out.push_back({p.first_line, p.lines, p.file_line, p.file.path});
    return out;
}

LinkedPtx link_ptx(const SourceFile& src, const std::string& dir_in) {
    LinkedPtx out;
    out.text = src.text;
    out.own_lines = line_of(src.text, src.text.size()) - (src.text.empty() || src.text.back() == '\n');
    std::vector<PtxFunc> externs;
    for (auto& f : ptx_functions(src.text))
        if (f.linkage == ".extern" && !f.defined && !system_function(f.name)) externs.push_back(std::move(f));
    if (externs.empty()) return out;

    const fs::path own(src.path);
    const std::string dir = dir_in.empty() ? own.parent_path().string() : dir_in;
    const std::vector<SourceFile> siblings = sibling_files(dir, own.filename().string());
    std::map<std::string, std::vector<PtxFunc>> defined;  // a sibling's path -> its functions
    for (const auto& s : siblings)
        for (const auto& f : externs)
            if (s.text.find(f.name) != std::string::npos) {
                defined[s.path] = ptx_functions(s.text);
                break;
            }
    const std::string where = dir.empty() ? "." : dir;
    std::string appended;
    int next_line = out.own_lines + 1;
    for (const auto& f : externs) {
        std::vector<std::pair<const SourceFile*, const PtxFunc*>> found;
        for (const auto& s : siblings) {
            auto it = defined.find(s.path);
            if (it == defined.end()) continue;
            for (const auto& g : it->second)
                if (g.name == f.name && g.defined && g.linkage == ".visible") found.push_back({&s, &g});
        }
        if (found.empty()) {
            out.problems.push_back({f.line, "error",
                                    fmt::format("`.extern .func {}` is defined by no .ptx file in {} (ptxlab links the "
                                                "file that defines `.visible .func {}(...) {{ ... }}` beside this one)",
                                                f.name, where, f.name)});
            continue;
        }
        if (found.size() > 1) {
            out.problems.push_back({f.line, "error",
                                    fmt::format("`.extern .func {}` is defined twice: {}:{} and {}:{}; keep one", f.name,
                                                found[0].first->path, found[0].second->line, found[1].first->path,
                                                found[1].second->line)});
            continue;
        }
        const auto& [file, def] = found.front();
        if (def->signature != f.signature) {
            out.problems.push_back({f.line, "error",
                                    fmt::format("`.extern .func {}` here is {} but {}:{} defines it as {}", f.name,
                                                f.signature, file->path, def->line, def->signature)});
            continue;
        }
        // The definition's whole lines, appended; the declaration becomes a forward declaration.
        const size_t from = file->text.rfind('\n', def->begin) == std::string::npos ? 0
                                                                                    : file->text.rfind('\n', def->begin) + 1;
        size_t to = file->text.find('\n', def->end - 1);
        to = to == std::string::npos ? file->text.size() : to;
        const std::string piece = file->text.substr(from, to - from) + "\n";
        LinkedPiece lp{*file, f.name, next_line, line_of(file->text, from), 0};
        lp.lines = static_cast<int>(std::count(piece.begin(), piece.end(), '\n'));
        next_line += lp.lines;
        appended += piece;
        out.pieces.push_back(std::move(lp));
    }
    if (!out.problems.empty()) return out;
    for (auto it = externs.rbegin(); it != externs.rend(); ++it)  // from the back: offsets stay valid
        out.text.replace(it->begin, 7, ".visible");
    if (!out.text.empty() && out.text.back() != '\n') out.text += '\n';
    out.text += appended;
    return out;
}

std::vector<Diagnostic> attribute_diagnostics(const LinkedPtx& linked, std::vector<Diagnostic> diags) {
    for (auto& d : diags) {
        if (d.line <= linked.own_lines) continue;
        for (const auto& p : linked.pieces) {
            if (d.line < p.first_line || d.line >= p.first_line + p.lines) continue;
            Diagnostic there = d;
            there.line = p.file_line + d.line - p.first_line;
            std::string quoted = format_diagnostic(p.file, there, 0);
            while (!quoted.empty() && quoted.back() == '\n') quoted.pop_back();
            d = {0, d.severity, fmt::format("in {}, linked in from {}:\n{}", p.function, p.file.path, quoted)};
            break;
        }
    }
    return diags;
}

}  // namespace ptxlab
