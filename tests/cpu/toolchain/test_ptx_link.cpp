// PTX files that share a function (ptx_link.hpp): step.ptx and tcstep.ptx declare optim.ptx's
// optimizer_update and optimizer_state `.extern`; ptxlab links the definitions in as text, so
// check, sass, profile and the driver's JIT assemble one module. A declaration that no file
// defines, or defines otherwise, fails loudly, naming both files.
#include "../../helpers.hpp"
#include "../../planted.hpp"
#include "compile.hpp"
#include "ptx_link.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <sstream>

using namespace ptxlab;
using namespace ptxlab::test;

namespace {
std::string tree(const std::string& file) { return std::string(PTXLAB_SOURCE_DIR) + "/ptx/" + file; }

const PtxFunc* find_func(const std::vector<PtxFunc>& fs, const std::string& name) {
    auto it = std::find_if(fs.begin(), fs.end(), [&](const PtxFunc& f) { return f.name == name; });
    return it == fs.end() ? nullptr : &*it;
}

// The tree's step.ptx and optim.ptx in a fresh directory, optim.ptx changed by `edit`.
struct StepPair {
    TempDir tmp;
    std::string step;
};
StepPair step_pair(const std::function<std::string(std::string)>& edit) {
    StepPair p;
    p.step = p.tmp.file("step.ptx");
    write_text(p.step, read_source_file(tree("step.ptx")).text);
    write_text(p.tmp.file("optim.ptx"), edit(read_source_file(tree("optim.ptx")).text));
    return p;
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
    const size_t at = s.find(from);
    REQUIRE(at != std::string::npos);
    return s.replace(at, from.size(), to);
}
}  // namespace

TEST_CASE("link: a .func head reads as its name, linkage and types, its names left out") {
    const std::string text = ".version 8.0\n.target sm_90\n.address_size 64\n"
                             "// .func in a comment is no function\n"
                             ".extern .func (.param .align 16 .b8 r[16]) f(\n    .reg .f32 a, .reg .u32 k);\n"
                             ".visible .func (.reg .u32 out) g(.reg .u32 k)\n{\n    mov.u32 out, k;\n    ret;\n}\n"
                             ".func h\n{\n    ret;\n}\n";
    const std::vector<PtxFunc> fs = ptx_functions(text);
    REQUIRE(fs.size() == 3);
    CHECK(fs[0].name == "f");
    CHECK(fs[0].linkage == ".extern");
    CHECK_FALSE(fs[0].defined);
    CHECK(fs[0].line == 5);
    CHECK(fs[0].signature == "(.param .align 16 .b8 [16]) (.reg .f32, .reg .u32)");
    CHECK(fs[1].name == "g");
    CHECK(fs[1].linkage == ".visible");
    CHECK(fs[1].defined);
    CHECK(fs[1].signature == "(.reg .u32) (.reg .u32)");
    CHECK(text.substr(fs[1].begin, 8) == ".visible");
    CHECK(text[fs[1].end - 1] == '}');
    CHECK(fs[2].name == "h");
    CHECK(fs[2].linkage.empty());
    CHECK(fs[2].signature == "()");
}

TEST_CASE("link: step.ptx, tcstep.ptx and fc3step.ptx declare optimizer_update and optimizer_state as optim.ptx defines them") {
    const std::vector<PtxFunc> optim = ptx_functions(read_source_file(tree("optim.ptx")).text);
    for (const char* file : {"step.ptx", "tcstep.ptx", "fc3step.ptx"}) {
        CAPTURE(file);
        const std::vector<PtxFunc> fs = ptx_functions(read_source_file(tree(file)).text);
        for (const char* name : {"optimizer_update", "optimizer_state"}) {
            CAPTURE(name);
            const PtxFunc* decl = find_func(fs, name);
            const PtxFunc* def = find_func(optim, name);
            REQUIRE(decl);
            REQUIRE(def);
            CHECK(decl->linkage == ".extern");
            CHECK_FALSE(decl->defined);  // one copy: the step files hold no body of it
            CHECK(def->linkage == ".visible");
            CHECK(def->defined);
            CHECK(decl->signature == def->signature);
        }
        CHECK(find_func(fs, "optimizer_update")->signature ==
              "(.param .align 16 .b8 [16]) (.reg .f32, .reg .f32, .reg .f32, .reg .f32, .reg .u32, .reg .f32, "
              ".reg .f32, .reg .f32, .reg .f32, .reg .f32, .reg .f32, .reg .f32, .reg .f32, .reg .f32, .reg .f32)");
        CHECK(find_func(fs, "optimizer_state")->signature == "(.reg .u32) (.reg .u32)");
    }
    // Every optimizer code has its rule in the one copy.
    const std::string text = read_source_file(tree("optim.ptx")).text;
    const size_t from = text.find("// optimizer_update: one parameter's step.");
    REQUIRE(from != std::string::npos);
    for (const char* rule : {"0 sgd", "1 momentum", "2 nesterov", "3 adam", "4 adamw", "5 rmsprop", "6 nadam"})
        CHECK(text.find(rule, from) != std::string::npos);
    CHECK(text.find("setp.eq.u32     nadam, kind, 6;", from) != std::string::npos);
}

TEST_CASE("link: the linked text is the file with its declarations made forward ones and the definitions after it") {
    const SourceFile step = read_source_file(tree("step.ptx"));
    const LinkedPtx l = link_ptx(step);
    CHECK(l.problems.empty());
    REQUIRE(l.pieces.size() == 2);
    REQUIRE(l.files().size() == 1);
    CHECK(std::filesystem::path(l.files()[0]).filename() == "optim.ptx");
    CHECK(l.pieces[0].function == "optimizer_update");
    CHECK(l.pieces[1].function == "optimizer_state");
    // The file's own lines keep their numbers; each piece's lines are its file's, in order.
    const int own = static_cast<int>(std::count(step.text.begin(), step.text.end(), '\n'));
    CHECK(l.own_lines == own);
    CHECK(l.pieces[0].first_line == own + 1);
    CHECK(l.pieces[1].first_line == own + 1 + l.pieces[0].lines);
    const auto text_lines = [](const std::string& t) {
        std::vector<std::string> out;
        std::istringstream in(t);
        for (std::string s; std::getline(in, s);) out.push_back(s);
        return out;
    };
    const auto linked = text_lines(l.text), optim = text_lines(l.pieces[0].file.text);
    CHECK(linked[size_t(l.pieces[0].first_line - 1)] == optim[size_t(l.pieces[0].file_line - 1)]);
    CHECK(linked[size_t(l.pieces[0].first_line - 1)].rfind(".visible .func", 0) == 0);
    CHECK(l.text.find(".extern .func") == std::string::npos);
    CHECK(l.text.find(".visible .func (.reg .u32 keeps) optimizer_state(.reg .u32 kind);") != std::string::npos);
    // A file that declares nothing is itself.
    const SourceFile grad = read_source_file(tree("grad.ptx"));
    const LinkedPtx none = link_ptx(grad);
    CHECK(none.text == grad.text);
    CHECK(none.pieces.empty());
}

TEST_CASE("link: check assembles step.ptx with optim.ptx and reports fused_step's resources, no spills") {
    for (const char* file : {"step.ptx", "tcstep.ptx", "fc3step.ptx"}) {
        CAPTURE(file);
        const AssemblyResult r = assemble_offline(read_source_file(tree(file)), "sm_90");
        CAPTURE(r.error_log);
        REQUIRE(r.ok);
        REQUIRE(r.linked.size() == 1);
        CHECK(std::filesystem::path(r.linked[0]).filename() == "optim.ptx");
        REQUIRE(r.entries.size() == 1);
        const std::string entry = std::string(file) == "step.ptx"     ? "fused_step"
                                  : std::string(file) == "tcstep.ptx" ? "tc_step"
                                                                      : "fc3_step";
        CHECK(r.entries[0].name == entry);
        CHECK(r.entries[0].registers > 100);
        // Linked as text, the calls stay inside one module: no spills, and no stack frame beyond
        // the 16 bytes nvJitLink's (relocatable) assembly gave these kernels before the move (an
        // object-level link, each file on its own, gave tc_step 32 bytes and 12 of spills).
        CHECK(r.entries[0].stack <= 16);
        CHECK(r.entries[0].spill_stores == 0);
        CHECK(r.entries[0].spill_loads == 0);
        CHECK(r.info_log.find("Function properties for optimizer_update") != std::string::npos);
    }
    RunResult run = run_command(ptxlab_cmd("check " + tree("step.ptx")));
    CAPTURE(run.output);
    CHECK(run.code == 0);
    CHECK(run.output.find("links " + tree("optim.ptx")) != std::string::npos);
    CHECK(run.output.find("fused_step") != std::string::npos);
    CHECK(run.output.find("spill st/ld 0/0") != std::string::npos);
}

TEST_CASE("link: a declaration without its definition, or with another signature, fails loudly naming both files") {
    const SourceFile step = read_source_file(tree("step.ptx"));
    const PtxFunc* decl = nullptr;
    const std::vector<PtxFunc> fs = ptx_functions(step.text);
    decl = find_func(fs, "optimizer_update");
    REQUIRE(decl);
    const std::string line = ":" + std::to_string(decl->line) + ": error: ";
    // optim.ptx without the function.
    StepPair gone = step_pair([](std::string t) {
        return replace_once(t, ".visible .func (.param .align 16 .b8 pmv[16]) optimizer_update(",
                            ".visible .func (.param .align 16 .b8 pmv[16]) optimizer_update_gone(");
    });
    AssemblyResult r = assemble_offline(read_source_file(gone.step), "sm_90");
    CHECK_FALSE(r.ok);
    REQUIRE(r.diagnostics.size() == 1);
    CHECK(r.diagnostics[0].line == decl->line);
    CHECK(r.diagnostics[0].message.find("`.extern .func optimizer_update` is defined by no .ptx file in " +
                                        gone.tmp.path.string()) != std::string::npos);
    RunResult run = run_command(ptxlab_cmd("check --no-twin " + gone.step));
    CAPTURE(run.output);
    CHECK(run.code == 1);
    CHECK(run.output.find(gone.step + line + "`.extern .func optimizer_update` is defined by no .ptx file") !=
          std::string::npos);
    CHECK(run.output.find("FAIL") != std::string::npos);
    // No optim.ptx at all: the same message.
    std::filesystem::remove(gone.tmp.file("optim.ptx"));
    r = assemble_offline(read_source_file(gone.step), "sm_90");
    CHECK_FALSE(r.ok);
    REQUIRE(r.diagnostics.size() == 2);  // optimizer_update and optimizer_state
    CHECK(r.diagnostics[1].message.find("`.extern .func optimizer_state` is defined by no .ptx file") != std::string::npos);
    // Another signature: both files, both lines, both signatures.
    StepPair other = step_pair([](std::string t) {
        return replace_once(t, ".reg .f32 alpha, .reg .f32 wd)\n{", ".reg .f32 alpha, .reg .u32 wd)\n{");
    });
    r = assemble_offline(read_source_file(other.step), "sm_90");
    CHECK_FALSE(r.ok);
    REQUIRE(r.diagnostics.size() == 1);
    CHECK(r.diagnostics[0].line == decl->line);
    CHECK(r.diagnostics[0].message.find("but " + other.tmp.file("optim.ptx") + ":") != std::string::npos);
    CHECK(r.diagnostics[0].message.find(".reg .f32, .reg .u32)") != std::string::npos);
    // Two definitions: both named.
    StepPair twice = step_pair([](std::string t) { return t; });
    std::filesystem::copy_file(twice.tmp.file("optim.ptx"), twice.tmp.file("optim2.ptx"));
    r = assemble_offline(read_source_file(twice.step), "sm_90");
    CHECK_FALSE(r.ok);
    REQUIRE_FALSE(r.diagnostics.empty());
    CHECK(r.diagnostics[0].message.find("defined twice: " + twice.tmp.file("optim.ptx")) != std::string::npos);
    CHECK(r.diagnostics[0].message.find(twice.tmp.file("optim2.ptx")) != std::string::npos);
}

TEST_CASE("link: an error inside a linked function names its file and line") {
    StepPair bad = step_pair([](std::string t) {
        return replace_once(t, "    neg.f32         neg_rate, step_size;\n    fma.rn.f32      p, neg_rate, ratio, p;\n    bra.uni         OPT_DONE;",
                            "    neg.f32         neg_rate, nosuchreg;\n    fma.rn.f32      p, neg_rate, ratio, p;\n    bra.uni         OPT_DONE;");
    });
    const SourceFile optim = read_source_file(bad.tmp.file("optim.ptx"));
    const int at = 1 + static_cast<int>(std::count(optim.text.begin(), optim.text.begin() +
                                                   static_cast<std::ptrdiff_t>(optim.text.find("nosuchreg")), '\n'));
    for (bool line_info : {false, true}) {
        CAPTURE(line_info);
        const AssemblyResult r =
            assemble_offline(read_source_file(bad.step), "sm_90", AssembleOptions{.line_info = line_info});
        CHECK_FALSE(r.ok);
        bool found = false;
        for (const auto& d : r.diagnostics)
            found |= d.line == 0 && d.message.find("in optimizer_update, linked in from " + optim.path) != std::string::npos &&
                     d.message.find(optim.path + ":" + std::to_string(at) + ": error: ") != std::string::npos &&
                     d.message.find("nosuchreg") != std::string::npos;
        CHECK(found);
    }
}

TEST_CASE("link: line info names the linked file's lines") {
    const std::string text = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n    ret;\n}\n"
                             ".visible .func f()\n{\n    ret;\n}\n";
    const AnnotatedPtx a = annotate_line_info(text, "/a/k.ptx", {LineSpan{8, 4, 40, "/a/optim.ptx"}});
    CHECK(a.text.find(".file 1 \"/a/k.ptx\"\n.file 2 \"/a/optim.ptx\"\n") != std::string::npos);
    CHECK(a.text.find(".loc 1 6 0\n    ret;") != std::string::npos);
    CHECK(a.text.find(".loc 2 42 0\n    ret;") != std::string::npos);  // text line 10 is optim.ptx's line 42
    // line_map still counts the linked text's lines (attribute_diagnostics places them).
    CHECK(std::find(a.line_map.begin(), a.line_map.end(), 10) != a.line_map.end());
}

TEST_CASE("link: a planted optimizer_update reaches fused_step, tc_step and fc3_step, linked from the planted directory") {
    const PlantedKernel planted = plant("optimizer_update_nadam_without_gradient_term");
    for (const char* file : {"step.ptx", "tcstep.ptx", "fc3step.ptx"}) {
        CAPTURE(file);
        const SourceFile src = read_source_file(planted.dir() + "/" + file);
        const LinkedPtx l = link_ptx(src);
        REQUIRE(l.files().size() == 1);
        CHECK(l.files()[0] == planted.path);
        CHECK(l.text.find("PLANTED BUG") != std::string::npos);
        CHECK(src.text.find("PLANTED BUG") == std::string::npos);
        CHECK(assemble_offline(src, "sm_90").ok);
    }
}
