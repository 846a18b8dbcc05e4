// Planted bugs as small patches of the live kernels (tests/fixtures/planted/NAME.patch), applied
// at test time: a planted kernel is today's kernel with one mistake, never a stale copy.
//
// A patch file:
//   # what it plants and which test uses it (comment lines start with #)
//   file ptx/conv.ptx            the kernel it patches, relative to the source tree
//   all 2                        the next change: the text occurs exactly 2 times, all replaced
//   first 2                      or: it occurs exactly 2 times, only the first is replaced
//   swap OLD => NEW              a change inside lines (OLD and NEW on one line, no newline)
//   find                         or a change of whole lines: the lines up to `into` ...
//   ...
//   into                         ... become the lines up to `end`
//   ...
//   end
// Each change's count defaults to `all 1`. When the kernel has moved on and OLD no longer
// occurs as often as the patch says, applying it throws, naming the patch and the text: a
// stale patch fails loudly instead of testing nothing.
#pragma once

#include "helpers.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace ptxlab::test {

struct PlantedPatch {
    std::string name;    // the patch's file stem
    std::string target;  // "ptx/conv.ptx"
    std::string text;    // the patch itself
};

inline std::string planted_dir() { return std::string(PTXLAB_FIXTURES) + "/planted"; }

inline PlantedPatch read_planted(const std::string& name) {
    const std::string path = planted_dir() + "/" + name + ".patch";
    std::ifstream f(path);
    if (!f) throw std::runtime_error("no planted patch " + path);
    std::stringstream ss;
    ss << f.rdbuf();
    PlantedPatch p{name, "", ss.str()};
    std::istringstream in(p.text);
    for (std::string line; std::getline(in, line);)
        if (line.rfind("file ", 0) == 0) p.target = line.substr(5);
    if (p.target.empty()) throw std::runtime_error(path + ": no `file` line");
    return p;
}

namespace detail {
// Offsets of `what` in `text`; whole lines only when `lines` (at a line start, ending at a line end).
inline std::vector<size_t> occurrences(const std::string& text, const std::string& what, bool lines) {
    std::vector<size_t> at;
    for (size_t p = text.find(what); p != std::string::npos; p = text.find(what, p + 1))
        if (!lines || ((p == 0 || text[p - 1] == '\n') && (p + what.size() == text.size() || text[p + what.size()] == '\n')))
            at.push_back(p);
    return at;
}
}  // namespace detail

// Applies the patch to `source` (the target's text); throws std::runtime_error on a stale or
// malformed patch.
inline std::string apply_planted(const PlantedPatch& p, std::string source) {
    std::istringstream in(p.text);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    size_t count = 1;
    bool first_only = false;
    int changes = 0;
    auto fail = [&](const std::string& why) { throw std::runtime_error("planted patch " + p.name + ": " + why); };
    auto change = [&](const std::string& from, const std::string& to, bool whole_lines) {
        const std::vector<size_t> at = detail::occurrences(source, from, whole_lines);
        if (at.size() != count)
            fail("`" + from.substr(0, 120) + "` occurs " + std::to_string(at.size()) + " times in " + p.target +
                 ", the patch expects " + std::to_string(count) + " (the kernel changed: update the patch)");
        for (size_t i = at.size(); i-- > 0;)  // from the back, so earlier offsets stay valid
            if (!first_only || i == 0) source.replace(at[i], from.size(), to);
        ++changes;
        count = 1;
        first_only = false;
    };
    for (size_t i = 0; i < lines.size(); ++i) {
        const std::string& l = lines[i];
        if (l.empty() || l[0] == '#' || l.rfind("file ", 0) == 0) continue;
        if (l.rfind("all ", 0) == 0 || l.rfind("first ", 0) == 0) {
            first_only = l[0] == 'f';
            count = std::stoul(l.substr(first_only ? 6 : 4));
        } else if (l.rfind("swap ", 0) == 0) {
            const size_t arrow = l.find(" => ");
            if (arrow == std::string::npos) fail("`swap` needs OLD => NEW: " + l);
            change(l.substr(5, arrow - 5), l.substr(arrow + 4), false);
        } else if (l == "find") {
            std::string from, to;
            size_t j = i + 1;
            for (; j < lines.size() && lines[j] != "into"; ++j) from += (from.empty() ? "" : "\n") + lines[j];
            size_t k = j + 1;
            for (; k < lines.size() && lines[k] != "end"; ++k) to += (k == j + 1 ? "" : "\n") + lines[k];
            if (j >= lines.size() || k >= lines.size() || from.empty()) fail("`find` needs its lines, `into` and `end`");
            change(from, to, true);
            i = k;
        } else {
            fail("unknown line `" + l + "`");
        }
    }
    if (changes == 0) fail("no change in it");
    return source;
}

// The planted kernel in a fresh directory of its own, under its original file name, beside
// copies of today's other kernels (ptx/*.ptx), so that KernelDirs::from_ptx_dir(dir()) and
// `verify --ptx-dir` load it in place of the live one, and a file that links another's
// functions (ptx_link.hpp: step.ptx and tcstep.ptx take optimizer_update from optim.ptx) links
// the planted one where the patch is of that file.
struct PlantedKernel {
    TempDir tmp;
    std::string path;  // the patched file
    std::string dir() const { return tmp.path.string(); }
};
inline PlantedKernel plant(const std::string& name) {
    const PlantedPatch p = read_planted(name);
    std::ifstream f(std::string(PTXLAB_SOURCE_DIR) + "/" + p.target);
    if (!f) throw std::runtime_error("planted patch " + name + ": cannot read " + p.target);
    std::stringstream ss;
    ss << f.rdbuf();
    PlantedKernel k;
    for (const auto& e : std::filesystem::directory_iterator(std::string(PTXLAB_SOURCE_DIR) + "/ptx"))
        if (e.path().extension() == ".ptx") std::filesystem::copy_file(e.path(), k.tmp.path / e.path().filename());
    k.path = k.tmp.file(std::filesystem::path(p.target).filename().string());
    write_text(k.path, apply_planted(p, ss.str()));
    return k;
}

}  // namespace ptxlab::test
