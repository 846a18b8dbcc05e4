// ptxlab profile's JSON (nlohmann) and its one self-contained HTML page.
#include "profile.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace ptxlab {

namespace {

using nlohmann::ordered_json;

ordered_json stalls_json(const StallCounts& c) {
    ordered_json j = ordered_json::object();
    for (const auto& [r, n] : top_reasons(c, c.size())) j[r] = n;
    return j;
}

ordered_json kernel_json(const KernelProfile& k) {
    ordered_json j;
    j["name"] = k.name;
    j["source"] = k.source;
    j["note"] = k.note;
    j["samples"] = k.samples;
    j["unmapped"] = k.unmapped;
    j["stalls"] = stalls_json(k.stalls);
    ordered_json lines = ordered_json::array(), hottest = ordered_json::array();
    std::vector<const LineProfile*> hot;
    for (const auto& l : k.lines) {
        ordered_json sass = ordered_json::array();
        for (size_t i : l.sass) {
            const auto& ins = k.code[i];
            sass.push_back({{"address", ins.address}, {"text", ins.text}, {"samples", ins.samples},
                            {"stalls", stalls_json(ins.stalls)}, {"after_barrier", ins.after_barrier}});
        }
        // after_barrier: its barrier stalls are the waits of the barrier at barrier_line (0: not on
        // a line), sampled on the instruction after it; the numbers stay where they were sampled.
        lines.push_back({{"line", l.line}, {"text", l.text}, {"block", l.block}, {"samples", l.samples},
                         {"stalls", stalls_json(l.stalls)}, {"after_barrier", l.after_barrier},
                         {"barrier_line", l.barrier_line}, {"sass", sass}});
        if (l.samples) hot.push_back(&l);
    }
    std::stable_sort(hot.begin(), hot.end(), [](const auto* a, const auto* b) { return a->samples > b->samples; });
    for (const auto* l : hot) hottest.push_back(l->line);
    j["lines"] = lines;
    j["hottest_lines"] = hottest;
    ordered_json blocks = ordered_json::array();
    for (const auto& b : k.blocks)
        blocks.push_back({{"label", b.label}, {"first_line", b.first_line}, {"samples", b.samples},
                          {"stalls", stalls_json(b.stalls)}});
    j["blocks"] = blocks;
    return j;
}

}  // namespace

std::string format_profile_json(const Profile& p) {
    ordered_json j;
    j["what"] = p.what;
    j["device"] = p.device;
    j["period"] = p.period;
    j["samples"] = p.samples;
    j["dropped"] = p.dropped;
    j["non_user"] = p.non_user;
    j["cupti_total"] = p.cupti_total;
    j["ranges"] = p.ranges;
    j["hardware_buffer_full"] = p.hardware_buffer_full;
    j["stalls"] = stalls_json(p.stalls);
    j["notes"] = p.notes;
    ordered_json ks = ordered_json::array();
    for (const auto& k : p.kernels) ks.push_back(kernel_json(k));
    j["kernels"] = ks;
    return j.dump(2) + "\n";
}

// ---- HTML -------------------------------------------------------------------------

namespace {

std::string esc(const std::string& s) {
    std::string o;
    for (char c : s) switch (c) {
            case '&': o += "&amp;"; break;
            case '<': o += "&lt;"; break;
            case '>': o += "&gt;"; break;
            case '"': o += "&quot;"; break;
            default: o += c;
        }
    return o;
}

std::string reasons_html(const StallCounts& c, size_t n = 3) {
    std::string s;
    for (const auto& [r, v] : top_reasons(c, n)) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", esc(r), v);
    return s;
}

// The line's barrier marker (barrier_mark), its legend as the tooltip.
std::string mark_html(const LineProfile& l) {
    if (!l.after_barrier) return "";
    return fmt::format(" <span class=\"after-barrier\" title=\"{}\">{}</span>", esc(kBarrierLegend),
                       esc(barrier_mark(l)));
}

double share(uint64_t part, uint64_t whole) { return whole ? 100.0 * static_cast<double>(part) / whole : 0.0; }

const char* kStyle = R"(<style>
body{font-family:sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{padding:1px 8px;text-align:left;vertical-align:top}
th{border-bottom:1px solid #999}
td.n{text-align:right;font-variant-numeric:tabular-nums}
code,pre,summary{font-family:monospace;white-space:pre}
pre{margin:2px 0 4px 1.5em;color:#444}
details summary{cursor:pointer}
.heat{width:4em}
.after-barrier{color:#a60;font-weight:bold}
</style>
)";

void html_listing(std::string& o, const KernelProfile& k) {
    uint64_t max = 1;
    for (const auto& l : k.lines) max = std::max(max, l.samples);
    o += "<table class=\"listing\"><tr><th>heat</th><th>samples</th><th>%</th><th>line</th><th>PTX (click for its "
         "SASS)</th><th>top stall reasons</th></tr>\n";
    for (const auto& l : k.lines) {
        const double a = static_cast<double>(l.samples) / static_cast<double>(max);
        o += fmt::format("<tr class=\"line\" data-line=\"{}\" data-samples=\"{}\"><td class=\"heat\" "
                         "style=\"background:rgba(220,40,20,{:.3f})\"></td><td class=\"n\">{}</td><td class=\"n\">{}</td>"
                         "<td class=\"n\">{}</td><td>",
                         l.line, l.samples, a, l.samples ? std::to_string(l.samples) : "",
                         l.samples ? fmt::format("{:.1f}", share(l.samples, k.samples)) : "", l.line);
        if (l.sass.empty()) {
            o += fmt::format("<code>{}</code>", esc(l.text));
        } else {
            o += fmt::format("<details><summary>{}</summary><pre>", esc(l.text));
            for (size_t i : l.sass) {
                const auto& ins = k.code[i];
                o += fmt::format("/*{:04x}*/  {:<40} {:>6}  {}{}\n", ins.address, esc(ins.text),
                                 ins.samples ? std::to_string(ins.samples) : "", reasons_html(ins.stalls),
                                 ins.after_barrier ? "  ^" : "");
            }
            o += "</pre></details>";
        }
        o += fmt::format("</td><td>{}{}</td></tr>\n", reasons_html(l.stalls), mark_html(l));
    }
    o += "</table>\n";
    for (const auto& l : k.lines)
        if (l.after_barrier) {
            o += fmt::format("<p class=\"legend\">{}</p>\n", esc(kBarrierLegend));
            break;
        }
}

void html_tables(std::string& o, const KernelProfile& k, size_t top) {
    std::vector<const LineProfile*> hot;
    for (const auto& l : k.lines)
        if (l.samples) hot.push_back(&l);
    std::stable_sort(hot.begin(), hot.end(), [](const auto* a, const auto* b) { return a->samples > b->samples; });
    o += "<h3>Hottest lines</h3><table class=\"hottest\"><tr><th>samples</th><th>%</th><th>line</th><th>block</th>"
         "<th>PTX</th><th>top stall reasons</th></tr>\n";
    for (size_t i = 0; i < hot.size() && i < top; ++i)
        o += fmt::format("<tr><td class=\"n\">{}</td><td class=\"n\">{:.1f}</td><td class=\"n\">{}</td><td>{}</td>"
                         "<td><code>{}</code></td><td>{}{}</td></tr>\n",
                         hot[i]->samples, share(hot[i]->samples, k.samples), hot[i]->line, esc(hot[i]->block),
                         esc(hot[i]->text), reasons_html(hot[i]->stalls), mark_html(*hot[i]));
    o += "</table>\n<h3>Blocks</h3><table class=\"blocks\"><tr><th>samples</th><th>%</th><th>line</th><th>label</th>"
         "<th>top stall reasons</th></tr>\n";
    for (const auto& b : k.blocks)
        o += fmt::format("<tr><td class=\"n\">{}</td><td class=\"n\">{:.1f}</td><td class=\"n\">{}</td><td>{}</td>"
                         "<td>{}</td></tr>\n",
                         b.samples, share(b.samples, k.samples), b.first_line, esc(b.label), reasons_html(b.stalls));
    o += "</table>\n";
}

void html_stalls(std::string& o, const StallCounts& c, uint64_t total) {
    o += "<table class=\"stalls\"><tr><th>samples</th><th>%</th><th>stall reason</th></tr>\n";
    for (const auto& [r, n] : top_reasons(c, c.size()))
        o += fmt::format("<tr><td class=\"n\">{}</td><td class=\"n\">{:.1f}</td><td>{}</td></tr>\n", n,
                         share(n, total), esc(r));
    o += "</table>\n";
}

}  // namespace

std::string format_profile_html(const Profile& p, size_t top) {
    std::string o = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>ptxlab profile: " + esc(p.what) +
                    "</title>\n" + kStyle + "</head><body>\n";
    o += fmt::format("<h1>ptxlab profile</h1>\n<p>{}<br>on {}; one sample every 2<sup>{}</sup> cycles per SM; "
                     "<b>{}</b> samples (CUPTI: {} dropped, {} in the driver's own kernels)</p>\n",
                     esc(p.what), esc(p.device), p.period, p.samples, p.dropped, p.non_user);
    for (const auto& n : p.notes) o += "<p>note: " + esc(n) + "</p>\n";
    o += "<h2>Stall reasons, all kernels</h2>\n";
    html_stalls(o, p.stalls, p.samples);
    for (const auto& k : p.kernels) {
        o += fmt::format("<h2 id=\"{0}\">.entry {0}</h2>\n<p>{1}: {2} samples, {3:.1f} % of all", esc(k.name),
                         esc(k.source.empty() ? "?" : k.source), k.samples, share(k.samples, p.samples));
        if (k.unmapped) o += fmt::format("; {} not on a PTX line", k.unmapped);
        o += "</p>\n";
        if (!k.note.empty()) o += "<p>" + esc(k.note) + "</p>\n";
        if (!k.lines.empty()) {
            html_tables(o, k, top);
            o += "<h3>Listing</h3>\n";
            html_listing(o, k);
        }
        o += "<h3>Stall reasons</h3>\n";
        html_stalls(o, k.stalls, k.samples);
    }
    o += "</body></html>\n";
    return o;
}

}  // namespace ptxlab
