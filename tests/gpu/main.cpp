// GPU test runner: exits with 77 (shown by ctest as skipped) when there is no usable GPU,
// so that machines without one skip these tests instead of passing them.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <random>

#include "common.hpp"

#include <fmt/format.h>

#include <memory>
#include <sstream>
#include <string_view>

namespace {
std::unique_ptr<ptxlab::Context> g_ctx;
}

const ptxlab::Context& ptxlab::test::gpu() { return *g_ctx; }

ptxlab::TrainResult ptxlab::test::train_model_steps(const Dataset& data, const std::string& spec, unsigned steps,
                                                    KernelSource src, unsigned batch, bool one_launch) {
    TrainConfig cfg;
    if (batch != 0) cfg.batch = batch;
    cfg.one_launch = one_launch;
    cfg.model = parse_model(spec);
    cfg.layers = cfg.model->fc_sizes();
    cfg.epochs = 1;
    cfg.max_steps = steps;
    cfg.kernels = {Design::Tc, src};
    cfg.progress = false;
    std::ostringstream out;
    TrainResult r = train(gpu(), data, cfg, out);
    MESSAGE(out.str());
    return r;
}

ptxlab::TrainConfig ptxlab::test::model_run_config(const ModelRun& r, unsigned steps) {
    TrainConfig cfg;
    cfg.model = parse_model(r.model);
    if (cfg.model->fc_only()) cfg.layers = cfg.model->fc_sizes();
    cfg.optim.kind = r.optim;
    cfg.lr = r.lr;
    cfg.epochs = 1;
    cfg.max_steps = steps;
    cfg.kernels = {Design::Tc, KernelSource::Ptx};
    cfg.progress = false;
    return cfg;
}

int main(int argc, char** argv) {
    bool listing = false;
    for (int i = 1; i < argc; ++i)
        if (std::string_view(argv[i]).find("-l") == 0 || std::string_view(argv[i]).find("--list") == 0)
            listing = true;
    if (!listing) {
        try {
            g_ctx = std::make_unique<ptxlab::Context>(0);
        } catch (const ptxlab::NoGpuError& e) {
            fmt::print("SKIPPED: {}\n", e.what());
            return 77;
        }
        fmt::print("GPU: {} ({}), driver {}\n", g_ctx->info().name, g_ctx->info().arch(), g_ctx->info().driver_version);
    }
    doctest::Context ctx;
    ctx.applyCommandLine(argc, argv);
    int rc = ctx.run();
    g_ctx.reset();
    return rc;
}

ptxlab::CaseResult ptxlab::test::verify_one(const std::string& entry, std::vector<unsigned> shape,
                                            const KernelDirs& ptx_dirs, unsigned seed) {
    VerifyOptions opt;
    opt.seed = seed;
    opt.reference_dirs = KernelDirs::from_environment();
    opt.ptx_dirs = ptx_dirs;
    return run_verify(gpu(), {{entry, std::move(shape)}}, opt).at(0);
}

void ptxlab::test::check_both_sets(const std::string& entry, const std::vector<unsigned>& shape) {
    const unsigned seed = std::random_device{}();  // fresh inputs every run
    INFO("seed ", seed);
    CaseResult r = verify_one(entry, shape, KernelDirs::from_environment(), seed);
    INFO(format_result(r));
    CHECK(r.elements > 0);
    // Each set on its own: every output written and within the float64 bound.
    CHECK(r.unwritten_ptx == 0);
    CHECK(r.f64_fail_ptx == 0);
    CHECK(r.unwritten_ref == 0);
    CHECK(r.f64_fail_ref == 0);
    // And the two sets agree to the bit.
    CHECK(r.differing == 0);
    CHECK(r.max_ulp == 0);
}

void ptxlab::test::check_planted_caught(const CaseResult& r) {
    CHECK_FALSE(r.pass());
    CHECK(r.differing > 0);
    CHECK(r.f64_fail_ptx > 0);
    CHECK(r.f64_fail_ref == 0);
}

ptxlab::test::StepBuffers::StepBuffers(const std::vector<float>& x, const std::vector<float>& t, const OptimConfig& o,
                                       const std::vector<double>& lrs)
    : X(x.size() * 4, "X"), T(t.size() * 4, "T"), Y(lrs.size() * t.size() * 4, "Y"),
      H(lrs.size() * sizeof(StepHyper), "hyp"), y_bytes(t.size() * 4) {
    std::vector<StepHyper> hyp;
    for (size_t k = 0; k < lrs.size(); ++k) hyp.push_back(step_hyper(o, lrs[k], k + 1));
    X.upload(x);
    T.upload(t);
    H.upload(hyp);
    Y.fill_u32(0x7fc00000u);
}
