// The model trainer's step: any --model (conv, pool and fc layers) on the GPU, layer by layer,
// run by the one training loop (train.hpp, step_program.hpp: make_model_program);
// tests/gpu/train/test_cnn_train.cpp holds the device checks (BENCHMARKS.md: `train --model cnn`
// reaches 99.30 to 99.36 % on an H100). A network of 3 fc layers on the tc set runs whole steps in
// one launch of fc3_step instead (Fc3Step below: fc3_step_unfit says where), and an fc network
// with --dense-program as dense_program + the optimizer (DenseStep).
//
// One step on a batch X [B][C*H*W] (NCHW) with one-hot targets T [B][10]:
//   forward   every layer but the last: conv -> conv_fwd (bias and ReLU in the epilogue, act 1;
//             with the pool above it in the same launch, conv_fwd's or tc_conv_fwd's epilogue:
//             conv1 and conv2 of the CNN; the conv's full output is then never written);
//             pool -> pool_fwd (keeps the argmax); fc -> fused_forward (ptx/fused.ptx, ReLU; the
//             flattened NCHW input, nn.Linear's [out][in] weights)
//   last fc   fused_output (ptx/fused.ptx): the logits Y, the loss code's output deltas D2 and
//             D1 = W^T D2 masked where the layer's input A <= 0 (ReLU's derivative; when that
//             input is a pool output of ReLU values the mask changes nothing: a zero maximum
//             passes no gradient through the ReLU below anyway)
//   backward  the weights of the last two layers when both are fc: one fused_grad (from D1 and
//             D2, scale = grad_scale(loss, B, 10)), else the last one's through conv_bwd_weights
//             on a 1x1 image (act 0); then down the layers: conv and the other fc layers ->
//             conv_bwd_weights (act 1: dY masked by the layer's output Y > 0) and, above the
//             first layer, conv_bwd_data (conv) or fc_bwd_data (fc, ptx/fc.ptx); pool ->
//             pool_bwd, or for a pool between two convs, where the upper conv's deltas run on
//             tc_conv_bwd_data (the tc set) and TrainConfig::pool_bwd_in_conv is on (off by
//             default: measured 0.5 us slower), in that launch's epilogue (conv_bwd_data_pool:
//             the same bits, no pool_bwd launch).
//             A conv under a pool gets its ReLU mask from the pool's backward
//             (pool_bwd with Yp: a window's maximum <= 0 routes 0) and runs its backward passes
//             with act 0, without reading its output Y. Every gradient lands in its place of the flat gradient (model.hpp's
//             layout), written (not accumulated) every step. (A dense layer is a 1x1 conv of a
//             1x1 image, but the conv kernels then keep one thread a block busy: 9 ms a step
//             for fc 3136->128 at batch 64 on an H100.)
//   optimizer one launch of ptx/optim.ptx over the flat parameters, with this step's StepHyper
//             record from the epoch's table (recipe.hpp step_hyper, schedule_lr).
//   bn, and any layer with a layer step row (layer_steps.hpp): its row's forward and backward
//             passes, launches of its own kernels (CnnOps::layer_kernel); a conv or fc under a
//             bn runs without its activation (the bn carries it; layer_steps.cpp says how).
// Hidden activation other than ReLU (--activation: recipe.hpp's act_code, the codes fused_forward,
// fused_output and ptx/act.ptx take): the conv kernels' epilogues and the dense and conv backward
// passes know ReLU alone, so there they run with act 0 (none) and act.ptx applies the activation:
//   forward   fc -> fused_forward with the code (A, and for GELU Z); conv -> conv_fwd (act 0) writes
//             Z, then act_fwd A = f(Z); no pool in the conv's epilogue (conv -> act -> pool,
//             PyTorch's Conv2d, act, MaxPool2d order; the pool's max is not f's for GELU);
//             Z lives in z[l], or for the layer under the last fc in delta[L-2], where
//             fused_output reads GELU's Z and applies the derivative with its code.
//   backward  every activated layer below that one: act_bwd turns delta[l] (dL/dA) into dL/dZ in
//             place (from A, or Z for GELU), then its kernels run with act 0; a pool under the last
//             fc: fused_output's D1 has a ReLU mask, so fc_bwd_data (act 0) makes delta[L-2] from
//             D2 again; pool_bwd takes no Yp (the mask trick is ReLU's).
//   ReLU runs keep the fused epilogues above, bit for bit as before.
// The training set is shuffled on the GPU once per epoch (gather, the MLP trainer's SplitMix64
// order: the same batches as `train --layers`); chunks of steps are captured as CUDA graphs once
// and replayed every epoch (the pointers of step k are the same in every epoch).
#pragma once

#include "cuda.hpp"
#include "fc3step.hpp"
#include "fused.hpp"
#include "ref_conv.hpp"
#include "idx.hpp"
#include "kernels.hpp"
#include "model.hpp"
#include "step_program.hpp"
#include "tcconv.hpp"
#include "train.hpp"

#include <array>
#include <functional>
#include <map>
#include <optional>
#include <tuple>
#include <ostream>
#include <string>
#include <vector>

namespace ptxlab {

// The defaults of `train --model cnn` where the flag is not given (ptx-notes.md's anchors:
// CE, Nesterov 0.9, one-cycle from 0 with 20 % warm-up, batch 64, peak lr 0.05; 99.12 % after
// 2 epochs, 99.25 to 99.29 % after 4).
inline constexpr float kCnnDefaultLr = 0.05f;
inline constexpr unsigned kCnnDefaultEpochs = 4;

// What the conv layers run on: the FP32 conv kernels (ptx/conv.ptx) or the tensor cores
// (ptx/tcconv.ptx: tc_conv_fwd and tc_conv_bwd_data, TF32 inputs and FP32 sums; `--kernels tc`)
// for the passes that sum over at least kTcConvMinChannels channels (conv1's forward pass stays
// FP32). The weight gradients stay on conv_bwd_weights, the fc layers on the FP32 kernels.
enum class ConvKernels { Fp32, Tc };
ConvKernels conv_kernels_of(const KernelChoice& k);  // Tc for Design::Tc, else Fp32

// The kernel entries a CNN training run needs (act.ptx's included: any activation).
std::vector<std::string> cnn_training_entries(const OptimConfig& o, ConvKernels conv = ConvKernels::Fp32);
// The kernels a CNN's forward pass launches (evaluate_cnn, `ptxlab eval`): conv layers, pools,
// hidden fc layers (fused_forward) and the last layer (fused_output).
std::vector<std::string> cnn_forward_entries(ConvKernels conv = ConvKernels::Fp32);

// The parameters and their optimizer state on the GPU, in the model's flat layout; the bn
// layers' running statistics (model.hpp's buffer layout; empty without bn layers).
struct CnnParams {
    DeviceBuffer params, grads, state1, state2, running;
    size_t count = 0;
    // buffers: the running statistics to start from (empty: the model's initial ones).
    CnnParams(const Model& m, const std::vector<float>& init, const OptimConfig& o,
              const std::vector<float>& buffers = {});
    CUdeviceptr m_ptr(const OptimConfig& o) const;  // the optimizer's M (0 when it keeps none)
    CUdeviceptr v_ptr(const OptimConfig& o) const;  // its V
};

// Side streams for the backward pass's weight gradients: each reads deltas the main stream has
// made and nothing the main stream makes after them, so it runs beside the deltas of the layers
// below. The weight gradients take the side streams in turn, so one need not wait for the one
// before it (conv1's for conv2's). fork orders a weight gradient after the main stream's work
// so far; join[i] orders the main stream (the optimizer) after side stream i's work.
struct CnnSideStream {
    static constexpr unsigned kStreams = 2;
    Stream stream[kStreams];
    Event fork{CU_EVENT_DISABLE_TIMING};
    Event join[kStreams] = {Event(CU_EVENT_DISABLE_TIMING), Event(CU_EVENT_DISABLE_TIMING)};
    Event wt_ready{CU_EVENT_DISABLE_TIMING};  // the step's W^T copies (stream[0]) are done
};

// The per-batch buffers of a model at batch size B: each layer's output, the pool argmaxes,
// each hidden layer's output deltas and the output deltas; and the side stream of a step.
struct CnnActs {
    unsigned B = 0;
    Activation act = Activation::Relu;  // the hidden activation (other than ReLU: the z buffers)
    // out[l]: layer l's output ([B][...]; the last: unused, Y is given); idx[l]: a pool's argmax,
    // a bn's batch mean and rstd ([2][C], for its backward pass).
    std::vector<DeviceBuffer> out, idx;
    // delta[l]: dL/d(out[l]) for l < L-1, one buffer a layer, so no kernel writes a delta that a
    // weight gradient still running on the side stream reads.
    std::vector<DeviceBuffer> delta;
    DeviceBuffer D2;
    // z[l]: a conv or hidden fc layer's pre-activations Z where act.ptx applies the activation
    // (an activation other than ReLU; else empty buffers).
    std::vector<DeviceBuffer> z;
    // wt[l]: W^T [I][O] of an fc layer whose deltas run on dense_wg_k (cnn_ops.hpp
    // keeps_transposed_weights), copied from W at the start of every step; empty buffers elsewhere,
    // or none at all until keep_transposes (the tc set where dense_wg_k is loaded).
    std::vector<DeviceBuffer> wt;
    mutable CnnSideStream side;  // ordering only: launches on it change no buffer of this struct
    CnnActs(const Model& m, unsigned B, Activation act = Activation::Relu);
    // Allocates wt for the layers keeps_transposed_weights names with the step's kernels (once;
    // outside a graph's capture): the tc set (conv) where ks loads dense_wg_k and transpose32.
    void keep_transposes(const Model& m, const KernelSet& ks, ConvKernels conv);
};

// ---- The step's data flow, apart from what runs it ----
// The buffers of a step by address: the flat parameters and gradient, each layer's output and
// pool argmax (out[l], idx[l]; B rows), the deltas of each layer's output but the last
// (delta[l], L-1 of them) and the output deltas D2 [B][10]; with an activation other than ReLU,
// each layer's pre-activation buffer z[l] (0 where none) and the activation.
// running: the bn layers' running statistics; train: a training pass (bn on the batch's
// statistics, the running ones updated), else evaluation (bn on the running ones).
struct CnnBuffers {
    unsigned B = 0;
    CUdeviceptr params = 0, grads = 0, D2 = 0, running = 0;
    bool train = true;
    std::vector<CUdeviceptr> out, idx, delta, z;
    std::vector<CUdeviceptr> wt;  // W^T of layer l for its deltas (0 or missing: none; CnnActs::wt)
    Activation act = Activation::Relu;
};
// An fc layer's deltas to its input: dX [B][I] from dY, Y ([B][O]) and W [O][I] with act (0 none,
// 1 ReLU: dY masked where Y <= 0), as fc_bwd_data; where the kernels can, from Wt = W^T [I][O]
// (not 0: the step keeps it) on dense_wg_k, which does not mask dY: there dY must already be
// dL/dZ (dy_masked, or act 0), and it masks dX by Yb (not 0: the ReLU output of the layer
// below), so that dX leaves as that layer's dL/dZ.
struct FcDeltas {
    unsigned B = 0, I = 0, O = 0, act = 0;
    CUdeviceptr dX = 0, dY = 0, Y = 0, W = 0, Wt = 0, Yb = 0;
    bool dy_masked = false;
};
// One launch of a layer's own kernel as the step issues it (a layer step row's, layer_steps.hpp):
// its entry, its part in train's layer table (forward pass, deltas or weight gradient), the
// buffers it writes (the NaN hunt checks them), and how it runs: launch on the GPU, or host64 in
// float64 on host memory, the kernel's semantics with the addresses as host pointers (the CPU
// tests' CnnOps run the step's data flow that way).
struct LayerKernel {
    enum Role { kForward, kDeltas, kWeights };
    std::string entry;
    Role role = kForward;
    std::vector<CUdeviceptr> writes;
    std::function<void(const Kernel& k, CUstream s)> launch;
    std::function<void()> host64;
};
// The operations a step is made of, with the kernels' parameters and semantics (conv.hpp,
// ref_conv.hpp: act 0 none, 1 ReLU; the backward passes mask dY where Y <= 0 with act 1;
// fused_output as launch_fused_output with FusedArgs' A1, W2, b2, T, Y, D2, D1, B, H, O, loss,
// act). The GPU runs them as launches on a stream; the CPU tests run them on host memory in
// float64 (addresses are then host pointers), which checks the data flow below without a GPU.
struct CnnOps {
    virtual ~CnnOps() = default;
    // The layer whose operations follow (cnn_forward and cnn_backward say; for the NaN hunt's
    // and train's listings).
    virtual void begin_layer(size_t) {}
    // With idx (not 0): conv_fwd and the 2x2 max-pool above it in one launch, Y and idx the
    // pool's (launch_conv_fwd), where pools_in_conv says the kernels can.
    virtual void conv_fwd(const ConvDims& d, CUdeviceptr X, CUdeviceptr Wt, CUdeviceptr b, CUdeviceptr Y,
                          unsigned act, CUdeviceptr idx) = 0;
    virtual bool pools_in_conv(const ConvDims& d) const = 0;
    virtual void conv_bwd_data(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                               unsigned act) = 0;
    // The conv's deltas and the backward pass of the 2x2 max-pool below it in one launch
    // (tc_conv_bwd_data's epilogue, launch_tc_conv_bwd_data's PoolBelow): dX the pool's input
    // deltas, bit for bit conv_bwd_data then pool_bwd(P = d.N*d.C, pool.PH, pool.PW, dX, the
    // deltas, pool.idx, pool.Yp). cnn_backward takes it where pools_in_conv_bwd says the kernels
    // can; by default they cannot (the float64 data flow keeps the two passes).
    virtual bool pools_in_conv_bwd(const ConvDims&) const { return false; }
    virtual void conv_bwd_data_pool(const ConvDims& d, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y, CUdeviceptr Wt,
                                    unsigned act, const PoolBelow& pool);
    virtual void conv_bwd_weights(const ConvDims& d, CUdeviceptr dW, CUdeviceptr db, CUdeviceptr X, CUdeviceptr dY,
                                  CUdeviceptr Y, unsigned act, float scale) = 0;
    virtual void pool_fwd(unsigned P, unsigned H, unsigned W, CUdeviceptr Y, CUdeviceptr idx, CUdeviceptr X) = 0;
    // Yp (pool_fwd's Y; 0: none): also the ReLU mask of the layer below (launch_pool_bwd).
    virtual void pool_bwd(unsigned P, unsigned H, unsigned W, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr idx,
                          CUdeviceptr Yp) = 0;
    virtual void fused_output(const FusedArgs& a) = 0;
    // The fc layers as a 2-layer MLP's kernels (ptx/fused.ptx): an fc layer with ReLU before
    // the last one runs fused_forward; the last two fc layers' weight and bias gradients are one
    // fused_grad (a dense layer as a 1x1 convolution of a 1x1 image leaves the conv kernels one
    // busy thread a block: fc 3136->128 took 9 ms a step that way).
    virtual void fused_forward(const FusedArgs& a) = 0;
    virtual void fused_grad(const FusedArgs& a) = 0;
    // An fc layer's deltas back to its input (ptx/fc.ptx): dX[B][I] from dY, Y ([B][O]) and W[O][I].
    virtual void fc_bwd_data(unsigned B, unsigned I, unsigned O, CUdeviceptr dX, CUdeviceptr dY, CUdeviceptr Y,
                             CUdeviceptr W, unsigned act) = 0;
    // The same as the step issues it (FcDeltas); returns whether dX left masked by d.Yb (then the
    // next layer's deltas may take it as dL/dZ). By default fc_bwd_data, unmasked (the float64
    // data flow: the same gradients).
    virtual bool fc_deltas(const FcDeltas& d) {
        fc_bwd_data(d.B, d.I, d.O, d.dX, d.dY, d.Y, d.W, d.act);
        return false;
    }
    // W^T [I][O] from W [O][I] (transpose32), for fc_deltas' Wt; by default nothing.
    virtual void transpose_weights(unsigned O, unsigned I, CUdeviceptr Wt, CUdeviceptr W) {
        (void)O, (void)I, (void)Wt, (void)W;
    }
    // A layer's own kernel (a layer step row's: bn_fwd, bn_bwd), on the main stream.
    virtual void layer_kernel(const LayerKernel& k) = 0;
    // The hidden activation as its own pass over n floats (ptx/act.ptx; code: recipe.hpp's
    // act_code): A = f(Z); G = dA * f'(.) from A (codes 0..3) or Z (GELU), G may be dA.
    virtual void act_fwd(unsigned n, CUdeviceptr A, CUdeviceptr Z, unsigned code) = 0;
    virtual void act_bwd(unsigned n, CUdeviceptr G, CUdeviceptr dA, CUdeviceptr A, CUdeviceptr Z, unsigned code) = 0;
    // Parameters [first, first + count) of the flat array have their gradient issued (the last
    // weight-gradient launch, conv_bwd_weights or fused_grad, wrote it), and every launch of the
    // step that reads them is issued too (their layer's deltas): the optimizer may update them
    // now. cnn_backward says so for each conv and fc layer; by default nothing (the optimizer runs
    // after the step, over the whole array). KernelOps with side streams launches the update there.
    virtual void params_ready(size_t first, size_t count) { (void)first, (void)count; }
};
// A conv or fc layer as the conv kernels see it: an fc layer is {B, in = C*H*W, 1, 1, out, 1}.
ConvDims cnn_kernel_dims(const LayerSpec& l, unsigned B);
// Forward: every layer, the last through fused_output (logits to Y, D2, and the deltas of its
// input to delta[0]). Backward: every parameter's gradient (scale times the batch sum) into the
// flat gradient, the deltas down the layers through delta[0] and delta[1] in turn.
void cnn_forward(CnnOps& ops, const Model& m, const CnnBuffers& b, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y,
                 unsigned loss_code);
void cnn_backward(CnnOps& ops, const Model& m, const CnnBuffers& b, CUdeviceptr X, float scale);
// Before the forward pass: each b.wt[l] (not 0) = W^T of layer l (W changes only in the optimizer).
void cnn_transpose_weights(CnnOps& ops, const Model& m, const CnnBuffers& b);

// The launches of one step (or a forward pass), on stream s. X and T: the batch's images and
// one-hot targets; Y: where the logits go ([B][10]); hyp: this step's StepHyper record. The
// step's conv kernels are cfg.kernels' (conv_kernels_of). cfg.overlap (train's default): the
// weight gradients on a.side, beside the deltas of the layers below, the optimizer's update of a
// layer of 512K parameters or more there too, right after its gradient (the rest after the
// join), and the step's other launches at the greatest priority (ScopedLaunchPriority); the bits
// are the same either way.
// The kernels one training step of `m` launches at batch B, each named once in the order of its
// first launch with its count ("fused_forward x2, fused_output, fused_grad, ..."), and then the
// optimizer's (what `train` prints); pool_in_conv: TrainConfig::pool_bwd_in_conv; wgk: dense_wg_k
// is loaded (the tc set on a device of compute capability 9.0: cnn_wgk_loaded), as KernelOps sees it;
// transposes: transpose32 is loaded too (cnn_transposes_loaded), without which the step keeps no
// W^T and an fc layer's deltas stay off dense_wg_k.
std::string cnn_step_kernels(const Model& m, ConvKernels conv, unsigned B, Activation act = Activation::Relu,
                             bool pool_in_conv = false, bool wgk = false, bool transposes = true);
// The same by layer, one line each: the kernels of its forward pass, of its deltas to its input
// and of its weight gradient (a table, what `train` prints under its first line).
std::string cnn_layer_kernels(const Model& m, ConvKernels conv, unsigned B, Activation act = Activation::Relu,
                              bool pool_in_conv = false, bool wgk = false, bool transposes = true);
// Whether the model trainer's KernelSet loads dense_wg_k on this device (compute capability 9.0)
// from these kernels (a --ptx-dir without hopper/densewgk.ptx leaves it out, and the step keeps
// its other kernels): what train's listing of a step's kernels takes as `wgk`.
bool cnn_wgk_loaded(const DeviceInfo& dev, KernelSource source = KernelSource::Ptx,
                    const KernelDirs& dirs = KernelDirs::from_environment());
// The same for transpose32 (ptx/hopper/transpose.ptx), which W^T needs: the listing's `transposes`.
bool cnn_transposes_loaded(const DeviceInfo& dev, KernelSource source = KernelSource::Ptx,
                           const KernelDirs& dirs = KernelDirs::from_environment());

// ---- An fc-only model's step in one launch (cnn_densestep.cpp) ----
// Why the training loop does not run `m`'s step as dense_program (ptx/densestep.ptx: the forward
// pass, the loss delta and every gradient in one persistent launch) + the optimizer, or "" when it
// does: fc layers only, ReLU, the fused or tc set (or their twins), sizes dense_program takes.
// (enqueue_cnn_step above stays the layer-by-layer step: evaluation and the tests use it.)
std::string dense_step_unfit(const Model& m, const KernelChoice& k, unsigned B, Activation act);
// The same for a run: its --model with cfg.one_launch (on unless a caller turns it off to keep the
// layer-by-layer step: tests of dense_mm's path in training; the CLI refuses --three-launches there).
std::string dense_step_unfit(const TrainConfig& cfg);
// The layer table `train` prints for that step (cnn_layer_kernels' columns): dense_program's stage
// of each layer's forward pass, deltas and weight gradient.
std::string dense_step_layer_kernels(const Model& m);
// That step on the model trainer's buffers (the parameters, gradient and state of p; a's hidden
// outputs, deltas and D2). Each step's phase table (its X, T, Y inside) lives in device memory:
// prepare() uploads the tables of steps it will launch, which must happen outside a CUDA graph
// capture (the training loop calls StepProgram::prepare_steps before it captures a chunk);
// enqueue() uploads any table it lacks itself. The grid barrier's count is one 8-byte buffer a
// kernel (PTX, twin), 0 at first; every launch leaves it a multiple of the grid.
class DenseStep {
public:
    DenseStep(const Model& m, const CnnParams& p, const CnnActs& a, const TrainConfig& cfg);
    void prepare(const KernelSet& ks, const StepIO& first, unsigned steps);
    // dense_program, then the optimizer with the step's StepHyper record hyp.
    void enqueue(const KernelSet& ks, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, CUdeviceptr hyp, CUstream s);
    void launch_program(const KernelSet& ks, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y, CUstream s);

private:
    struct Table {
        CUdeviceptr ptr = 0;
        unsigned clusters = 1;
    };
    Table& table(const Kernel& k, CUdeviceptr X, CUdeviceptr T, CUdeviceptr Y);
    void prepare_one(const Kernel& k, const std::vector<std::array<CUdeviceptr, 3>>& steps);
    const Model& m_;
    const CnnParams& p_;
    const CnnActs& a_;
    OptimConfig optim_;
    unsigned loss_;
    float scale_;
    unsigned nphases_ = 0;
    std::map<std::tuple<const Kernel*, CUdeviceptr, CUdeviceptr, CUdeviceptr>, Table> tables_;
    std::map<const Kernel*, DeviceBuffer> sync_;
    std::vector<DeviceBuffer> pool_;
};

// ---- A 3-layer fc model's whole steps in one launch (cnn_fc3step.cpp) ----
// Why the training loop does not run `m`'s steps on fc3_step (ptx/fc3step.ptx: the forward pass,
// the loss, every gradient and every parameter's optimizer step in one launch, several steps a
// launch), or "" when it does: exactly 3 fc layers, ReLU, the tc set or its twins (TF32 products;
// not tc-bf16), and sizes fc3step.hpp's fc3_step_unfit takes (B <= 64, I <= 784, H1 <= 256,
// H2 <= 128, O <= 16).
std::string fc3_step_unfit(const Model& m, const KernelChoice& k, unsigned B, Activation act);
// The same for a run: its --model, with cfg.one_launch on (off: the layer-by-layer step), without
// --dense-program (dense_program runs when asked for), and fc3_step's file in the run's kernel
// directory (fc3_step_absent). Where it is empty, the step is fc3_step's (before the
// layer-by-layer step); train prints the reason for a 3-layer fc network where it is not.
std::string fc3_step_unfit(const TrainConfig& cfg);
// Why a KernelSet of `source` from `dirs` would lack fc3_step: its file missing there (a
// --ptx-dir without fc3step.ptx, a reference directory without fc3step.cu); "" when it is there.
std::string fc3_step_absent(KernelSource source, const KernelDirs& dirs);
// The layer table `train` prints for that step (cnn_layer_kernels' columns): fc3_step's stage of
// each layer's forward pass, deltas and weight gradient.
std::string fc3_step_layer_kernels(const Model& m);
// The lines `train` prints of a --model run's step: "  a step: ..." (the launches; for an fc-only
// network that no one-launch step runs, why not: fc3_step's reason for 3 fc layers, else
// dense_program's), then the layer table. wgk, transposes: cnn_wgk_loaded and
// cnn_transposes_loaded for the run's device and kernels.
std::string model_step_listing(const TrainConfig& cfg, bool wgk, bool transposes = true);
// That step on the model trainer's buffers: the flat parameters (W1, b1, W2, b2, W3, b3 back to
// back: checked, an internal Error otherwise) and the optimizer's state of p, with its own
// scratch of kFc3StepWorkBytes, zeroed once here (fc3_step keeps its grid barrier's count there
// between launches). No gradient buffer: the kernel updates the parameters itself.
class Fc3Step {
public:
    Fc3Step(const Model& m, const CnnParams& p, const TrainConfig& cfg);
    // `steps` steps from `first` on (back to back, StepIO::next): one launch, or launches of
    // cfg.steps_per_launch steps where that is set (the same bits either way).
    void enqueue_steps(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) const;
    // One step as one launch, for the NaN hunt: it writes Y, then the parameters (params: the
    // model trainer's views, each layer's weight then bias, listed fc3 first, as they update).
    StepKernel step_kernel(const KernelSet& ks, const StepIO& io, const std::vector<StepKernel::Write>& params) const;

private:
    void launch(const KernelSet& ks, const StepIO& first, unsigned steps, CUstream s) const;
    DeviceBuffer work_;
    Fc3StepArgs args_;  // all but X, T, Y, hyp and steps
    unsigned per_launch_ = 0;
};

// train false: evaluation (bn layers on their running statistics, which stay as they are).
void enqueue_cnn_forward(const KernelSet& ks, const Model& m, const CnnParams& p, const CnnActs& a, CUdeviceptr X,
                         CUdeviceptr T, CUdeviceptr Y, unsigned loss_code, CUstream s,
                         ConvKernels conv = ConvKernels::Fp32, bool train = true);
void enqueue_cnn_step(const KernelSet& ks, const Model& m, const CnnParams& p, const CnnActs& a, CUdeviceptr X,
                      CUdeviceptr T, CUdeviceptr Y, const TrainConfig& cfg, CUdeviceptr hyp, CUstream s);

// A --model's evaluation on a split (batches of 500): the split's images and targets uploaded
// once, the per-batch buffers kept, for the evaluations of a run.
class CnnEvaluator {
public:
    CnnEvaluator(const Model& m, const Split& test, Activation act = Activation::Relu);
    EvalResult run(const KernelSet& ks, const Model& m, const CnnParams& p, Loss loss, ConvKernels conv, CUstream s);

private:
    const Split& test_;
    CnnActs a_;                    // batches of 500
    std::optional<CnnActs> tail_;  // the split's last count % 500 images, when there are any
    DeviceBuffer X_, T_, Y_;
};

// Test accuracy and mean loss of the flat parameters on a split of any size (batches of 500 on
// the GPU, and one smaller batch for the rest).
EvalResult evaluate_cnn(const KernelSet& ks, const Model& m, const CnnParams& p, const Split& test, Loss loss,
                        ConvKernels conv = ConvKernels::Fp32, Activation act = Activation::Relu);

}  // namespace ptxlab
