// The CUDA driver API, loaded at run time.
//
// libcuda.so.1 is opened with dlopen and every entry point is fetched with
// cuGetProcAddress, so ptxlab and its tests start on machines without a driver.
// Every call goes through CU(...), which raises CudaError naming the call, the
// CUresult name and its text. RAII wrappers own contexts, modules, buffers,
// streams, events and graphs.
#pragma once

#include "error.hpp"

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ptxlab {

// The entry points ptxlab uses. Each becomes a member of Driver.
#define PTXLAB_DRIVER_FUNCTIONS(X)                                                          \
    X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion)                   \
    X(cuDeviceGetCount) X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetAttribute)           \
    X(cuDeviceTotalMem) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease)            \
    X(cuCtxSetCurrent) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuModuleLoadDataEx) X(cuModuleUnload)          \
    X(cuModuleGetFunction) X(cuFuncGetAttribute) X(cuFuncSetAttribute) X(cuMemAlloc) X(cuMemFree)                 \
    X(cuMemGetInfo) X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyHtoDAsync)    \
    X(cuMemcpyDtoHAsync) X(cuMemcpyDtoDAsync) X(cuMemsetD32) X(cuMemsetD32Async)            \
    X(cuLaunchKernel) X(cuLaunchKernelEx) X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize)           \
    X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy) X(cuEventRecord)                    \
    X(cuEventSynchronize) X(cuEventElapsedTime) X(cuEventQuery) X(cuStreamBeginCapture)     \
    X(cuStreamEndCapture) X(cuGraphInstantiateWithFlags) X(cuGraphLaunch) X(cuGraphDestroy)          \
    X(cuGraphExecDestroy) X(cuGraphUpload) X(cuOccupancyMaxActiveClusters) X(cuCtxGetStreamPriorityRange) \
    X(cuTensorMapEncodeTiled)

struct Driver {
#define PTXLAB_DECLARE(name) decltype(&::name) name = nullptr;  // the signature cuda.h maps `name` to
    PTXLAB_DRIVER_FUNCTIONS(PTXLAB_DECLARE)
#undef PTXLAB_DECLARE
    int version = 0;  // cuDriverGetVersion, e.g. 13000
};

// The loaded driver. The first call opens libcuda.so.1 (or $PTXLAB_LIBCUDA) and
// runs cuInit; it throws NoGpuError with one clear sentence when that fails.
const Driver& driver();

// A failed driver call.
class CudaError : public Error {
public:
    CudaError(CUresult code, std::string msg, std::string where)
        : Error(std::move(msg), std::move(where)), code_(code) {}
    CUresult code() const { return code_; }

private:
    CUresult code_;
};

// "CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"
std::string cu_result_text(CUresult r);
void cu_check(CUresult r, const char* call, const char* file, int line);

}  // namespace ptxlab

// CU(cuMemAlloc, &ptr, bytes): call a driver entry point and check its result.
#define CU(name, ...) ::ptxlab::cu_check(::ptxlab::driver().name(__VA_ARGS__), #name, __FILE__, __LINE__)

namespace ptxlab {

// ---- The watchdog: waiting for the GPU with a time limit -------------------------
//
// Launches note what they run ("fused_forward (ptx/fused.ptx)"); wait_for_stream()
// polls the stream and, past the limit, throws TimeoutError naming what was in
// flight. After that the device counts as hung: destructors skip their driver calls
// (which would block), and the process exits; the driver then ends the kernel.
class TimeoutError : public Error {
public:
    using Error::Error;
};
void set_kernel_timeout(double seconds);  // 0: wait without a limit; InputError when < 0 or NaN
double kernel_timeout();
bool device_hung();
void note_in_flight(const std::string& what);
const std::vector<std::string>& in_flight();
void forget_in_flight(size_t keep);
void wait_for_stream(CUstream s);

struct DeviceInfo {
    int ordinal = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    size_t total_mem = 0;
    int driver_version = 0;
    std::string arch() const { return fmt::format("sm_{}{}", cc_major, cc_minor); }
    std::string virtual_arch() const { return fmt::format("compute_{}{}", cc_major, cc_minor); }
};

// The primary context of one device, made current on the calling thread.
class Context {
public:
    explicit Context(int ordinal = 0);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;
    const DeviceInfo& info() const { return info_; }
    void synchronize() const;

private:
    CUdevice dev_ = 0;
    DeviceInfo info_;
};

// Device memory. `name` appears in out-of-memory messages.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(size_t bytes, std::string name);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept { swap(o); return *this; }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    // A non-owning view of bytes [offset, offset + bytes) of `parent` (which must outlive it),
    // under its own name: one allocation can hold many tensors (a network's parameters).
    static DeviceBuffer view(const DeviceBuffer& parent, size_t offset, size_t bytes, std::string name);

    CUdeviceptr ptr() const { return ptr_; }
    size_t bytes() const { return bytes_; }
    const std::string& name() const { return name_; }

    void upload(const void* src, size_t bytes, size_t offset = 0);
    void download(void* dst, size_t bytes, size_t offset = 0) const;
    void fill_u32(uint32_t pattern);  // every 4-byte word set to pattern

    template <class T> void upload(const std::vector<T>& v) { upload(v.data(), v.size() * sizeof(T)); }
    template <class T> std::vector<T> download_vector() const {
        std::vector<T> v(bytes_ / sizeof(T));
        download(v.data(), v.size() * sizeof(T));
        return v;
    }

private:
    void swap(DeviceBuffer& o) noexcept {
        std::swap(ptr_, o.ptr_);
        std::swap(bytes_, o.bytes_);
        std::swap(name_, o.name_);
        std::swap(owned_, o.owned_);
    }
    CUdeviceptr ptr_ = 0;
    size_t bytes_ = 0;
    std::string name_;
    bool owned_ = true;
};

class Stream {
public:
    Stream();
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    CUstream get() const { return s_; }
    void synchronize() const;

private:
    CUstream s_ = nullptr;
};

// A CUDA graph: the work `enqueue` puts on a stream, captured once (stream capture),
// instantiated, and replayed by launch().
class Graph {
public:
    Graph(CUstream s, const std::function<void()>& enqueue);
    ~Graph();
    Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)), kernels_(std::move(o.kernels_)) {}
    Graph& operator=(Graph&&) = delete;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;
    void launch(CUstream s) const;
    // Moves the graph's work to the device ahead of its first launch (which would do it otherwise).
    void upload(CUstream s) const;

private:
    CUgraphExec exec_ = nullptr;
    std::vector<std::string> kernels_;  // the kernels it runs, for the watchdog's message
};

class Event {
public:
    explicit Event(unsigned flags = CU_EVENT_DEFAULT);  // CU_EVENT_DISABLE_TIMING for ordering alone
    ~Event();
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;
    CUevent get() const { return e_; }
    void record(CUstream s);
    void synchronize() const;
    // Milliseconds from `start` to this event.
    float since(const Event& start) const;

private:
    CUevent e_ = nullptr;
};

}  // namespace ptxlab
