#include "ptx_text.hpp"

#include "error.hpp"
#include "files.hpp"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <fstream>
#include <optional>
#include <sstream>

namespace ptxlab {

namespace {

constexpr size_t kMaxSourceBytes = 64u << 20;

bool is_ident_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' || c == '.';
}

int line_at(std::string_view text, size_t pos) {
    return 1 + static_cast<int>(std::count(text.begin(), text.begin() + static_cast<long>(pos), '\n'));
}

std::vector<std::string_view> split_lines(std::string_view text) {
    std::vector<std::string_view> lines;
    size_t start = 0;
    while (start <= text.size()) {
        size_t nl = text.find('\n', start);
        if (nl == std::string_view::npos) {
            if (start < text.size()) lines.push_back(text.substr(start));
            break;
        }
        lines.push_back(text.substr(start, nl - start));
        start = nl + 1;
    }
    return lines;
}

std::string_view trim(std::string_view s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
    return s;
}

}  // namespace

SourceFile read_source_file(const std::string& path) {
    // Refuses directories, FIFOs, devices and unreadable files with the reason.
    std::vector<uint8_t> bytes = read_input_file(path, kMaxSourceBytes);
    std::string text(bytes.begin(), bytes.end());
    if (trim(text).empty()) PTXLAB_THROW(InputError, "{}: file is empty", path);
    auto bad = std::find_if(text.begin(), text.end(), [](char c) {
        auto u = static_cast<unsigned char>(c);
        return u == 0 || (u < 32 && u != '\n' && u != '\r' && u != '\t' && u != '\f' && u != '\v');
    });
    if (bad != text.end())
        PTXLAB_THROW(InputError, "{}:{}: binary data (byte 0x{:02x} at offset {}); expected PTX or CUDA C text",
                     path, line_at(text, static_cast<size_t>(bad - text.begin())),
                     static_cast<unsigned char>(*bad), bad - text.begin());
    return {path, std::move(text)};
}

std::string strip_comments(std::string_view text) {
    std::string out(text);
    size_t i = 0;
    while (i < out.size()) {
        if (out[i] == '"') {  // string literal: skip to its end
            for (++i; i < out.size() && out[i] != '"' && out[i] != '\n'; ++i) {}
            ++i;
        } else if (out.compare(i, 2, "//") == 0) {
            for (; i < out.size() && out[i] != '\n'; ++i) out[i] = ' ';
        } else if (out.compare(i, 2, "/*") == 0) {
            size_t end = out.find("*/", i + 2);
            size_t stop = end == std::string::npos ? out.size() : end + 2;
            for (; i < stop; ++i)
                if (out[i] != '\n') out[i] = ' ';
        } else {
            ++i;
        }
    }
    return out;
}

std::string PtxEntry::signature() const {
    std::string s = "(";
    for (size_t i = 0; i < params.size(); ++i) s += (i ? ", " : "") + params[i].type;
    return s + ")";
}

const PtxEntry* PtxInfo::find(std::string_view name) const {
    for (const auto& e : entries)
        if (e.name == name) return &e;
    return nullptr;
}

namespace {

// Tokens: identifiers/directives, numbers, string literals and single punctuation characters.
struct Tok {
    std::string s;
    size_t pos;
};

std::vector<Tok> tokenize(const std::string& text) {
    std::vector<Tok> toks;
    for (size_t i = 0; i < text.size();) {
        char c = text[i];
        if (std::isspace(static_cast<unsigned char>(c))) {
            ++i;
        } else if (c == '"') {
            size_t j = text.find('"', i + 1);
            j = (j == std::string::npos) ? text.size() : j + 1;
            toks.push_back({text.substr(i, j - i), i});
            i = j;
        } else if (is_ident_char(c)) {
            size_t j = i;
            while (j < text.size() && is_ident_char(text[j])) ++j;
            toks.push_back({text.substr(i, j - i), i});
            i = j;
        } else {
            toks.push_back({std::string(1, c), i});
            ++i;
        }
    }
    return toks;
}

// One parameter from its words: the last word is the name unless it is an array bound or a
// directive; .ptr, the state space after it and .align N are qualifiers, not the type.
void read_param_words(const std::vector<std::string>& parts, PtxParam& p) {
    std::string name;
    std::string type, quals;
    bool after_ptr = false;
    for (size_t q = 0; q < parts.size(); ++q) {
        const std::string& w = parts[q];
        if (w == ".param") continue;
        bool space = after_ptr && (w == ".global" || w == ".shared" || w == ".const" || w == ".local");
        if (w == ".ptr" || space || w == ".align") {
            after_ptr = after_ptr || w == ".ptr";
            quals += (quals.empty() ? "" : " ") + w;
            if (w == ".align" && q + 1 < parts.size() && std::isdigit(static_cast<unsigned char>(parts[q + 1][0])))
                quals += " " + parts[++q];
            continue;
        }
        if (w[0] == '.' || w == "[" || w == "]" || std::isdigit(static_cast<unsigned char>(w[0]))) {
            if (w == "]" || w == "[") {
                type += w;
            } else {
                type += (type.empty() || type.back() == '[' ? "" : " ") + w;
            }
        } else {
            name = w;
        }
    }
    p.type = type;
    p.qualifiers = quals;
    p.name = name;
}

}  // namespace

PtxInfo parse_ptx(std::string_view raw) {
    const std::string text = strip_comments(raw);
    PtxInfo info;
    const std::vector<Tok> toks = tokenize(text);

    // Line numbers by binary search over the newline offsets: counting from the start for every
    // parameter was quadratic (minutes for a 6 MB parameter list).
    std::vector<size_t> newlines;
    for (size_t i = 0; i < text.size(); ++i)
        if (text[i] == '\n') newlines.push_back(i);
    auto line_at = [&](std::string_view, size_t pos) {
        return 1 + static_cast<int>(std::lower_bound(newlines.begin(), newlines.end(), pos) - newlines.begin());
    };
    for (size_t k = 0; k < toks.size(); ++k) {
        const std::string& t = toks[k].s;
        if (t == ".version" && k + 1 < toks.size() && info.version.empty()) {
            info.version = toks[k + 1].s;
            info.version_line = line_at(text, toks[k].pos);
        } else if (t == ".target" && k + 1 < toks.size() && info.target.empty()) {
            info.target = toks[k + 1].s;
            info.target_line = line_at(text, toks[k].pos);
        } else if (t == ".entry" && k + 1 < toks.size()) {
            PtxEntry e;
            e.name = toks[k + 1].s;
            e.line = line_at(text, toks[k].pos);
            size_t j = k + 2;
            if (j < toks.size() && toks[j].s == "(") {
                ++j;
                PtxParam p;
                std::vector<std::string> parts;
                bool closed = false;
                for (; j < toks.size(); ++j) {
                    const std::string& u = toks[j].s;
                    if (u == "," || u == ")") {
                        if (!parts.empty()) {
                            read_param_words(parts, p);
                            e.params.push_back(p);
                        }
                        parts.clear();
                        if (u == ")") {
                            closed = true;
                            break;
                        }
                    } else {
                        if (parts.empty()) p.line = line_at(text, toks[j].pos);
                        parts.push_back(u);
                    }
                }
                if (!closed)
                    PTXLAB_THROW(InputError, "line {}: parameter list of entry '{}' has no closing ')'", e.line,
                                 e.name);
                k = j;
            }
            info.entries.push_back(std::move(e));
        }
    }
    return info;
}

// A line number from a log: digits that fit an int, else 0 ("no line"), never an exception.
static int line_number(std::string_view digits) {
    int n = 0;
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    return ec == std::errc() && end == digits.data() + digits.size() ? n : 0;
}

namespace {

// The logs are read by plain scanning, not std::regex: they quote the user's text (a token of up
// to kMaxPtxTokenChars, a whole line), and libstdc++'s regex recurses once per character matched
// (a 32 KB token in a log overflowed the stack).

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// The rest of a log line from `p`, up to a carriage return (as a regex's `.*` would take it).
std::string rest_of(std::string_view l, size_t p) {
    const std::string_view r = l.substr(std::min(p, l.size()));
    return std::string(r.substr(0, r.find('\r')));
}

// "line N; SEVERITY : MESSAGE" anywhere in `l` (the first place it fits), as ptxas writes
// "ptxas application ptx input, line 9; error   : Unknown symbol 'x'".
bool read_with_line(std::string_view l, Diagnostic& d) {
    for (size_t at = l.find("line "); at != std::string_view::npos; at = l.find("line ", at + 1)) {
        size_t p = at + 5;
        const size_t digits = p;
        while (p < l.size() && is_digit(l[p])) ++p;
        if (p == digits || p >= l.size() || l[p] != ';') continue;
        const std::string_view number = l.substr(digits, p - digits);
        for (++p; p < l.size() && l[p] == ' ';) ++p;
        const size_t word = p;
        while (p < l.size() && is_word(l[p])) ++p;
        if (p == word) continue;
        const std::string_view severity = l.substr(word, p - word);
        while (p < l.size() && l[p] == ' ') ++p;
        if (p >= l.size() || l[p] != ':') continue;
        for (++p; p < l.size() && l[p] == ' ';) ++p;
        d = {line_number(number), std::string(severity), rest_of(l, p)};
        return true;
    }
    return false;
}

// "[ptxas|nvlink] SEVERITY : MESSAGE" at the start of `l`, SEVERITY error, fatal or warning.
bool read_without_line(std::string_view l, Diagnostic& d) {
    size_t p = 0;
    if (l.substr(0, 5) == "ptxas") p = 5;
    else if (l.substr(0, 6) == "nvlink") p = 6;
    while (p < l.size() && is_space(l[p])) ++p;
    std::string severity;
    for (const char* s : {"error", "fatal", "warning"})
        if (l.substr(p, std::char_traits<char>::length(s)) == s) severity = s;
    if (severity.empty()) return false;
    for (p += severity.size(); p < l.size() && is_space(l[p]);) ++p;
    if (p >= l.size() || l[p] != ':') return false;
    for (++p; p < l.size() && is_space(l[p]);) ++p;
    d = {0, severity, rest_of(l, p)};
    return true;
}

}  // namespace

std::vector<Diagnostic> parse_ptxas_log(std::string_view log) {
    // ptxas application ptx input, line 9; error   : Unknown symbol 'x'
    // ptxas fatal   : Unresolved extern function 'f'
    std::vector<Diagnostic> out;
    for (auto line : split_lines(log)) {
        const std::string_view l = trim(line);
        if (l.empty()) continue;
        Diagnostic d;
        if (read_with_line(l, d) || read_without_line(l, d)) out.push_back(std::move(d));
    }
    return out;
}

namespace {

// The code point of the UTF-8 sequence at text[pos] and its length; {-1, 1} when it is not valid UTF-8.
std::pair<long, size_t> decode_utf8(std::string_view text, size_t pos) {
    auto b = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    unsigned char c = b(pos);
    size_t len = c >= 0xf0 && c < 0xf5 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (len == 0 || pos + len > text.size()) return {-1, 1};
    long cp = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
    for (size_t i = 1; i < len; ++i) {
        if ((b(pos + i) & 0xc0) != 0x80) return {-1, 1};
        cp = (cp << 6) | (b(pos + i) & 0x3f);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) || (cp >= 0xd800 && cp < 0xe000))
        return {-1, 1};
    return {cp, len};
}

}  // namespace

namespace {

// What one pass over a PTX text finds: the first of each kind of problem.
struct TextScan {
    bool bom = false;
    std::optional<Diagnostic> non_ascii, long_token;
    int long_line = 0;  // the first line over kMaxPtxLineBytes, 0 if none
    size_t long_line_bytes = 0;
};

// Byte by byte, with the state of the text (code, a // or /* */ comment, a string literal):
// the BOM, the first non-ASCII byte anywhere (ptxas takes only ASCII, in comments too), the
// first token over kMaxPtxTokenChars outside comments (a run of token characters, or a string
// literal from its quote to the closing one or the end of the line, as strip_comments reads
// it), the first line over kMaxPtxLineBytes. Columns count bytes from 1.
TextScan scan_text(std::string_view text) {
    TextScan out;
    size_t i = 0;
    if (text.substr(0, 3) == "\xEF\xBB\xBF") out.bom = true, i = 3;
    enum class State { Code, LineComment, BlockComment, String } state = State::Code;
    int line = 1;
    size_t column = 1 + i, line_start = 0;
    size_t token = 0, token_column = 0;  // the length and start of the token being read (0: none)
    auto end_token = [&] {
        if (token > kMaxPtxTokenChars && !out.long_token)
            out.long_token = Diagnostic{line, "error",
                                        fmt::format("a token of {} characters; ptxlab takes tokens of at most {} "
                                                    "(nvJitLink fails on longer ones)",
                                                    token, kMaxPtxTokenChars),
                                        static_cast<int>(token_column)};
        token = 0;
    };
    for (; i <= text.size(); ++i, ++column) {
        if (i == text.size() || text[i] == '\n') {  // the end of a line ends a token, a string, a // comment
            end_token();
            if (i - line_start > kMaxPtxLineBytes && !out.long_line) out.long_line = line, out.long_line_bytes = i - line_start;
            if (i == text.size()) break;
            if (state != State::BlockComment) state = State::Code;
            ++line, column = 0, line_start = i + 1;
            continue;
        }
        const char c = text[i];
        const auto u = static_cast<unsigned char>(c);
        if (u >= 0x80 && !out.non_ascii) {
            auto [cp, len] = decode_utf8(text, i);
            std::string what = cp < 0 ? fmt::format("byte 0x{:02X}, which is not valid UTF-8", u)
                                      : fmt::format("character U+{:04X} '{}'", cp, std::string(text.substr(i, len)));
            out.non_ascii = Diagnostic{line, "error",
                                       fmt::format("non-ASCII {} (ptxas accepts only ASCII, in comments too)", what),
                                       static_cast<int>(column)};
        }
        switch (state) {
            case State::LineComment: break;
            case State::BlockComment:
                if (c == '*' && i + 1 < text.size() && text[i + 1] == '/') state = State::Code, ++i, ++column;
                break;
            case State::String:
                ++token;
                if (c == '"') end_token(), state = State::Code;
                break;
            case State::Code:
                if (is_ident_char(c)) {  // the characters parse_ptx reads as one token
                    if (token++ == 0) token_column = column;
                    break;
                }
                end_token();
                if (c == '/' && i + 1 < text.size() && (text[i + 1] == '/' || text[i + 1] == '*')) {
                    state = text[i + 1] == '/' ? State::LineComment : State::BlockComment;
                    ++i, ++column;
                } else if (c == '"') {
                    state = State::String, token = 1, token_column = column;
                }
                break;
        }
    }
    return out;
}

// ".version" outside comments, at the start of the text or after white space, and followed by white space.
bool has_version_directive(std::string_view clean) {
    for (size_t at = clean.find(".version"); at != std::string_view::npos; at = clean.find(".version", at + 1)) {
        const size_t after = at + 8;
        if ((at == 0 || is_space(clean[at - 1])) && after < clean.size() && is_space(clean[after])) return true;
    }
    return false;
}

}  // namespace

std::vector<Diagnostic> ptx_text_problems(std::string_view text) {
    std::vector<Diagnostic> out;
    const TextScan scan = scan_text(text);
    if (scan.bom)
        out.push_back({1, "error",
                       "the file starts with a byte-order mark (UTF-8 BOM, bytes EF BB BF), which ptxas rejects; "
                       "save it as plain ASCII without a BOM",
                       1});
    if (scan.non_ascii) out.push_back(*scan.non_ascii);
    if (scan.long_token) out.push_back(*scan.long_token);
    // The header ptxas needs first.
    if (!has_version_directive(strip_comments(text.substr(scan.bom ? 3 : 0))))
        out.push_back({0, "error",
                       "no .version directive: a PTX file starts with `.version X.Y`, `.target sm_NN` and "
                       "`.address_size 64`"});
    // Very long lines: ptxas fails on them without naming a line.
    if (scan.long_line)
        out.push_back({0, "note",
                       fmt::format("line {} is {} bytes long; ptxas may fail on lines this long without naming "
                                   "them (over {} bytes)",
                                   scan.long_line, scan.long_line_bytes, kMaxPtxLineBytes)});
    return out;
}

std::vector<Diagnostic> ptx_limit_problems(std::string_view text) {
    std::vector<Diagnostic> out;
    if (auto d = scan_text(text).long_token) out.push_back(std::move(*d));
    return out;
}

std::string format_limit_problems(const SourceFile& src, const std::vector<Diagnostic>& problems) {
    std::string msg;
    for (const auto& d : problems) msg += format_diagnostic(src, d, 0);
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    return msg;
}

std::string format_diagnostic(const SourceFile& src, const Diagnostic& d, int context) {
    std::string out;
    if (d.line > 0 && d.column > 0)
        out = fmt::format("{}:{}:{}: {}: {}\n", src.path, d.line, d.column, d.severity, d.message);
    else if (d.line > 0)
        out = fmt::format("{}:{}: {}: {}\n", src.path, d.line, d.severity, d.message);
    else
        out = fmt::format("{}: {}: {}\n", src.path, d.severity, d.message);
    if (d.line <= 0) return out;
    auto lines = split_lines(src.text);
    int first = std::max(1, d.line - context);
    int last = std::min(static_cast<int>(lines.size()), d.line + context);
    for (int n = first; n <= last; ++n) {
        std::string_view l = lines[static_cast<size_t>(n - 1)];
        // A huge line is cut short: the message names it, the terminal need not hold it.
        const bool cut = l.size() > 200;
        out += fmt::format("{} {:5} | {}{}\n", n == d.line ? ">" : " ", n, l.substr(0, 200), cut ? " [...]" : "");
        if (n == d.line && d.column > 0 && static_cast<size_t>(d.column) <= 200) {
            // The caret under the column: the line's own tabs kept, so that it lines up.
            std::string pad;
            for (size_t i = 0; i + 1 < static_cast<size_t>(d.column) && i < l.size(); ++i)
                pad += l[i] == '\t' ? '\t' : ' ';
            out += fmt::format("  {:5} | {}^\n", "", pad);
        }
    }
    return out;
}

AnnotatedPtx annotate_line_info(std::string_view text, const std::string& path) {
    return annotate_line_info(text, path, {});
}

AnnotatedPtx annotate_line_info(std::string_view text, const std::string& path, const std::vector<LineSpan>& spans) {
    const std::string clean = strip_comments(text);
    auto raw_lines = split_lines(text);
    auto lines = split_lines(clean);
    AnnotatedPtx out;
    auto emit = [&](std::string_view s, int orig) {
        out.text.append(s);
        out.text.push_back('\n');
        out.line_map.push_back(orig);
    };
    auto escape = [](const std::string& p) {
        std::string e;
        for (char c : p) {
            if (c == '"' || c == '\\') e.push_back('\\');
            e.push_back(c);
        }
        return e;
    };
    const std::string escaped = escape(path);
    // The other files, each once (file 2, 3, ...), and the file and line a text line came from:
    // file 1 (`path`) unless a span holds it.
    std::vector<std::string> others;
    for (const auto& s : spans)
        if (std::find(others.begin(), others.end(), s.path) == others.end()) others.push_back(s.path);
    auto origin = [&](int orig) -> std::pair<size_t, int> {
        for (const auto& s : spans)
            if (orig >= s.first_line && orig < s.first_line + s.lines)
                return {size_t(std::find(others.begin(), others.end(), s.path) - others.begin()) + 2,
                        s.file_line + orig - s.first_line};
        return {1, orig};
    };
    int depth = 0;
    bool file_emitted = false;
    bool has_file = clean.find(".file") != std::string::npos || clean.find(".loc") != std::string::npos;
    bool continued = false;  // the last code line left a statement open (an instruction over several lines)
    for (size_t i = 0; i < raw_lines.size(); ++i) {
        const int orig = static_cast<int>(i) + 1;
        std::string_view code = i < lines.size() ? trim(lines[i]) : std::string_view{};
        // Inside a function body, an instruction line gets a .loc before it (not a line that
        // continues the instruction above it).
        bool instruction = !has_file && depth > 0 && !continued && !code.empty() && code[0] != '.' &&
                           code[0] != '{' && code[0] != '}' && code.back() != ':' &&
                           code.find(':') == std::string_view::npos;
        if (instruction) {
            const auto [file, line] = origin(orig);
            emit(fmt::format(".loc {} {} 0", file, line), orig);
        }
        if (!code.empty()) {
            const char last = code.back();
            continued = depth > 0 && last != ';' && last != '{' && last != '}' && last != ':';
        }
        emit(raw_lines[i], orig);
        if (!has_file && !file_emitted && code.rfind(".address_size", 0) == 0) {
            emit(fmt::format(".file 1 \"{}\"", escaped), orig);
            for (size_t k = 0; k < others.size(); ++k)
                emit(fmt::format(".file {} \"{}\"", k + 2, escape(others[k])), orig);
            file_emitted = true;
        }
        for (char c : code) depth += (c == '{') - (c == '}');
    }
    if (!has_file && !file_emitted) {
        // No .address_size line: the .loc lines would be unusable, so leave the text as it was.
        out.text = std::string(text);
        out.line_map.clear();
        for (size_t i = 0; i < raw_lines.size(); ++i) out.line_map.push_back(static_cast<int>(i) + 1);
    }
    return out;
}

std::string remap_log_lines(std::string_view log, const std::vector<int>& line_map) {
    // Every "line N" (plain scanning: the log quotes the user's text).
    std::string out;
    size_t last = 0;
    for (size_t at = log.find("line "); at != std::string_view::npos; at = log.find("line ", at)) {
        size_t p = at + 5;
        while (p < log.size() && is_digit(log[p])) ++p;
        if (p == at + 5) {  // no number after it
            at += 5;
            continue;
        }
        out.append(log, last, at - last);
        const int n = line_number(log.substr(at + 5, p - at - 5));
        if (n >= 1 && static_cast<size_t>(n) <= line_map.size())
            out += fmt::format("line {}", line_map[static_cast<size_t>(n - 1)]);
        else
            out.append(log, at, p - at);  // not a line of the annotated text: left as it was
        last = at = p;
    }
    out.append(log, last, std::string_view::npos);
    return out;
}

}  // namespace ptxlab
