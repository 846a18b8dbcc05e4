#include "cuda.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>

namespace ptxlab {

namespace {

Driver load_driver() {
    const char* env = std::getenv("PTXLAB_LIBCUDA");  // lets tests point at a stub or a missing file
    const std::string lib = (env && *env) ? env : "libcuda.so.1";
    void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* why = dlerror();
        if (env && *env)  // a library the user named: say why it did not open
            PTXLAB_THROW(NoGpuError, "no NVIDIA driver found ({}: {})", lib, why ? why : "cannot be opened");
        PTXLAB_THROW(NoGpuError, "no NVIDIA driver found (libcuda.so.1)");
    }
    auto get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
    if (!get_proc)
        PTXLAB_THROW(NoGpuError, "no NVIDIA driver found ({} has no cuGetProcAddress_v2: driver too old)", lib);

    Driver d;
    auto fetch = [&](const char* name, void** fn) {
        // Ask for the version cuda.h declares under the plain name: the newest for all we use,
        // except cuCtxSynchronize and cuCtxGetDevice, whose CUDA 13 versions (_v2) take a
        // context argument (asking for those would call them with a missing argument).
        const std::string_view n(name);
        const int version = n == "cuCtxSynchronize" || n == "cuCtxGetDevice" ? 12000 : CUDA_VERSION;
        CUdriverProcAddressQueryResult status{};
        CUresult r = get_proc(name, fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status);
        if (r != CUDA_SUCCESS || *fn == nullptr || status != CU_GET_PROC_ADDRESS_SUCCESS)
            PTXLAB_THROW(NoGpuError, "no usable NVIDIA driver ({} lacks {} for CUDA {}.{}; need driver >= 580)",
                         lib, name, CUDA_VERSION / 1000, CUDA_VERSION % 1000 / 10);
    };
    // The driver's JIT cache would hand back a cubin compiled earlier without running ptxas,
    // and then the JIT info log (registers, spills: printed with every load) is empty. A lab
    // recompiles every time unless the user set CUDA_CACHE_DISABLE themselves.
    setenv("CUDA_CACHE_DISABLE", "1", 0);
    // cuInit first: the toolkit's stub library answers it with CUDA_ERROR_STUB_LIBRARY.
    auto init = reinterpret_cast<decltype(&::cuInit)>(dlsym(handle, "cuInit"));
    if (!init) PTXLAB_THROW(NoGpuError, "no NVIDIA driver found ({} has no cuInit)", lib);
    CUresult r = init(0);
    if (r == CUDA_ERROR_STUB_LIBRARY)
        PTXLAB_THROW(NoGpuError, "no NVIDIA driver found ({} is the CUDA toolkit's stub library)", lib);
#define PTXLAB_FETCH(name) fetch(#name, reinterpret_cast<void**>(&d.name));
    PTXLAB_DRIVER_FUNCTIONS(PTXLAB_FETCH)
#undef PTXLAB_FETCH

    if (r == CUDA_ERROR_NO_DEVICE) PTXLAB_THROW(NoGpuError, "no CUDA device");
    if (r != CUDA_SUCCESS) {
        const char* name = nullptr;
        d.cuGetErrorName(r, &name);
        PTXLAB_THROW(NoGpuError, "no usable CUDA device (cuInit failed with {} ({}))",
                     name ? name : "unknown error", static_cast<int>(r));
    }
    d.cuDriverGetVersion(&d.version);
    int count = 0;
    if (d.cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) PTXLAB_THROW(NoGpuError, "no CUDA device");
    return d;
}

}  // namespace

const Driver& driver() {
    // Loaded once; a failure is remembered and raised again on every call.
    static std::once_flag once;
    static Driver d;
    static std::string failure, failure_where;
    std::call_once(once, [] {
        try {
            d = load_driver();
        } catch (const Error& e) {
            failure = e.what();
            failure_where = e.where();
        }
    });
    if (!failure.empty()) throw NoGpuError(failure, failure_where);
    return d;
}

std::string cu_result_text(CUresult r) {
    const char* name = nullptr;
    const char* text = nullptr;
    const Driver& d = driver();
    if (d.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "unknown CUresult";
    if (d.cuGetErrorString(r, &text) != CUDA_SUCCESS) text = "no description";
    return fmt::format("{} ({}): {}", name, static_cast<int>(r), text);
}

void cu_check(CUresult r, const char* call, const char* file, int line) {
    if (r == CUDA_SUCCESS) return;
    throw CudaError(r, fmt::format("{} failed: {}", call, cu_result_text(r)), source_location(file, line));
}

// ---- Context ---------------------------------------------------------------

Context::Context(int ordinal) {
    const Driver& d = driver();
    int count = 0;
    CU(cuDeviceGetCount, &count);
    if (ordinal < 0 || ordinal >= count)
        PTXLAB_THROW(InputError, "device {} does not exist ({} CUDA device{} found)", ordinal, count,
                     count == 1 ? "" : "s");
    CU(cuDeviceGet, &dev_, ordinal);
    char name[256] = {};
    CU(cuDeviceGetName, name, static_cast<int>(sizeof name), dev_);
    info_.ordinal = ordinal;
    info_.name = name;
    info_.driver_version = d.version;
    CU(cuDeviceGetAttribute, &info_.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev_);
    CU(cuDeviceGetAttribute, &info_.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev_);
    CU(cuDeviceGetAttribute, &info_.sm_count, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev_);
    CU(cuDeviceTotalMem, &info_.total_mem, dev_);
    CUcontext ctx = nullptr;
    CU(cuDevicePrimaryCtxRetain, &ctx, dev_);
    CU(cuCtxSetCurrent, ctx);
}

Context::~Context() {
    // After a --timeout the kernel is still running: a synchronize here would wait for it forever
    // (this destructor runs while the TimeoutError unwinds to main()), so a hung device is left alone.
    if (device_hung()) return;
    driver().cuCtxSynchronize();  // errors here were reported by the call that caused them
    driver().cuDevicePrimaryCtxRelease(dev_);
}

void Context::synchronize() const { CU(cuCtxSynchronize); }

// ---- DeviceBuffer ----------------------------------------------------------

DeviceBuffer::DeviceBuffer(size_t bytes, std::string name) : bytes_(bytes), name_(std::move(name)) {
    if (bytes == 0) return;
    CUresult r = driver().cuMemAlloc(&ptr_, bytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) {
        size_t free_b = 0, total_b = 0;
        driver().cuMemGetInfo(&free_b, &total_b);
        PTXLAB_THROW(Error, "out of GPU memory allocating buffer '{}' ({:.1f} MiB; {:.1f} MiB free of {:.1f} MiB)",
                     name_, bytes / 1048576.0, free_b / 1048576.0, total_b / 1048576.0);
    }
    cu_check(r, "cuMemAlloc", __FILE__, __LINE__);
}

static void check_range(const std::string& name, size_t have, size_t bytes, size_t offset) {
    if (offset > have || bytes > have - offset)
        PTXLAB_THROW(Error, "copy of {} bytes at offset {} overruns buffer '{}' ({} bytes)", bytes, offset, name,
                     have);
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_ && owned_ && !device_hung()) driver().cuMemFree(ptr_);
}

DeviceBuffer DeviceBuffer::view(const DeviceBuffer& parent, size_t offset, size_t bytes, std::string name) {
    check_range(parent.name_, parent.bytes_, bytes, offset);
    DeviceBuffer v;
    v.ptr_ = parent.ptr_ + offset;
    v.bytes_ = bytes;
    v.name_ = std::move(name);
    v.owned_ = false;
    return v;
}


// upload() and fill_u32() run on the legacy stream, and ptxlab's kernels on non-blocking
// streams that do not wait for it. A copy from pageable memory may return before its DMA has
// landed, and a memset may return before it has run, so both wait for the legacy stream:
// the data is in place before any kernel launched afterwards can read it.
void DeviceBuffer::upload(const void* src, size_t bytes, size_t offset) {
    check_range(name_, bytes_, bytes, offset);
    if (!bytes) return;
    CU(cuMemcpyHtoD, ptr_ + offset, src, bytes);
    CU(cuStreamSynchronize, nullptr);
}

void DeviceBuffer::download(void* dst, size_t bytes, size_t offset) const {
    check_range(name_, bytes_, bytes, offset);
    if (bytes) CU(cuMemcpyDtoH, dst, ptr_ + offset, bytes);
}

void DeviceBuffer::fill_u32(uint32_t pattern) {
    if (!bytes_) return;
    CU(cuMemsetD32, ptr_, pattern, bytes_ / 4);
    CU(cuStreamSynchronize, nullptr);
}

// ---- Stream, Event ---------------------------------------------------------

Stream::Stream() { CU(cuStreamCreate, &s_, CU_STREAM_NON_BLOCKING); }
Stream::~Stream() {
    if (s_ && !device_hung()) driver().cuStreamDestroy(s_);
}
void Stream::synchronize() const { wait_for_stream(s_); }

Event::Event(unsigned flags) { CU(cuEventCreate, &e_, flags); }
Event::~Event() {
    if (e_ && !device_hung()) driver().cuEventDestroy(e_);
}
void Event::record(CUstream s) { CU(cuEventRecord, e_, s); }
void Event::synchronize() const { CU(cuEventSynchronize, e_); }
float Event::since(const Event& start) const {
    float ms = 0;
    CU(cuEventElapsedTime, &ms, start.e_, e_);
    return ms;
}

}  // namespace ptxlab

namespace ptxlab {

Graph::Graph(CUstream s, const std::function<void()>& enqueue) {
    CU(cuStreamBeginCapture, s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    CUgraph g = nullptr;
    const size_t before = in_flight().size();
    try {
        enqueue();
        // The kernels launched during the capture run when the graph does.
        kernels_.assign(in_flight().begin() + long(before), in_flight().end());
        forget_in_flight(before);
    } catch (...) {
        driver().cuStreamEndCapture(s, &g);  // leave the stream usable; the first error is the one to report
        if (g) driver().cuGraphDestroy(g);
        throw;
    }
    CU(cuStreamEndCapture, s, &g);
    // Each kernel node keeps the priority it was launched with (ScopedLaunchPriority, kernels.hpp)
    // instead of taking the priority of the stream the graph is launched into.
    CUresult r = driver().cuGraphInstantiateWithFlags(&exec_, g, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY);
    driver().cuGraphDestroy(g);
    cu_check(r, "cuGraphInstantiateWithFlags", __FILE__, __LINE__);
}

Graph::~Graph() {
    if (exec_ && !device_hung()) driver().cuGraphExecDestroy(exec_);
}

void Graph::launch(CUstream s) const {
    for (const auto& k : kernels_) note_in_flight(k);
    CU(cuGraphLaunch, exec_, s);
}

void Graph::upload(CUstream s) const { CU(cuGraphUpload, exec_, s); }

}  // namespace ptxlab

// ---- The watchdog ----------------------------------------------------------------

namespace ptxlab {

namespace {
double g_timeout_s = 0;
bool g_hung = false;
std::vector<std::string> g_in_flight;
}  // namespace

void set_kernel_timeout(double seconds) {
    if (!(seconds >= 0)) PTXLAB_THROW(InputError, "--timeout must be >= 0 seconds (0: no limit), got {}", seconds);
    g_timeout_s = seconds;
}
double kernel_timeout() { return g_timeout_s; }
bool device_hung() { return g_hung; }

void note_in_flight(const std::string& what) {
    if (std::find(g_in_flight.begin(), g_in_flight.end(), what) == g_in_flight.end()) g_in_flight.push_back(what);
}
const std::vector<std::string>& in_flight() { return g_in_flight; }
void forget_in_flight(size_t keep) { g_in_flight.resize(std::min(keep, g_in_flight.size())); }

// A kernel failed while running (an illegal address, a trap): the error names the kernels that
// were in flight, since the driver reports it at the next synchronisation, not at the launch.
[[noreturn]] static void kernel_failed(CUresult r, const char* call, int line) {
    std::string names;
    for (const auto& k : g_in_flight) names += (names.empty() ? "" : ", ") + k;
    throw CudaError(r,
                    fmt::format("{} failed: {}; the kernel{} in flight: {} (compute-sanitizer --tool memcheck names "
                                "the line)",
                                call, cu_result_text(r), g_in_flight.size() == 1 ? "" : "s",
                                names.empty() ? std::string("(unknown)") : names),
                    source_location(__FILE__, line));
}

void wait_for_stream(CUstream s) {
    if (g_timeout_s <= 0) {
        CUresult r = driver().cuStreamSynchronize(s);
        if (r != CUDA_SUCCESS) kernel_failed(r, "cuStreamSynchronize", __LINE__);
        g_in_flight.clear();
        return;
    }
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::duration<double>(g_timeout_s);
    for (;;) {
        CUresult r = driver().cuStreamQuery(s);
        if (r == CUDA_SUCCESS) {
            g_in_flight.clear();
            return;
        }
        if (r != CUDA_ERROR_NOT_READY) kernel_failed(r, "cuStreamQuery", __LINE__);
        if (std::chrono::steady_clock::now() > deadline) {
            // The device is stuck: nothing may wait on it again, destructors skip their driver calls,
            // and the driver tears the context down when the process exits.
            g_hung = true;
            std::string names;
            for (const auto& k : g_in_flight) names += (names.empty() ? "" : ", ") + k;
            if (g_in_flight.size() == 1)
                PTXLAB_THROW(TimeoutError, "kernel {} did not finish within {} s (--timeout); it may loop forever",
                             names, g_timeout_s);
            PTXLAB_THROW(TimeoutError,
                         "the GPU did not finish within {} s (--timeout); one of these kernels did not return: {}",
                         g_timeout_s, names.empty() ? std::string("(unknown)") : names);
        }
        // Spin (yielding) for the first 20 ms, so that a chunk of training steps (well under a
        // millisecond) is seen to end at once; sleeping here cost up to ~100 us a chunk. Longer
        // waits (evaluations of big batches, a hung kernel) poll every 50 us instead.
        if (std::chrono::steady_clock::now() - start < std::chrono::milliseconds(20)) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
}

}  // namespace ptxlab
