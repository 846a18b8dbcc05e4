#include "sampler.hpp"

#include "cupti.hpp"

#include <mutex>

namespace ptxlab {

uint64_t PcRecord::samples() const {
    uint64_t n = 0;
    for (const auto& [reason, count] : stalls) n += count;
    return n;
}

std::string short_stall_reason(const std::string& name) {
    for (const char* prefix : {"smsp__pcsamp_warps_issue_stalled_", "smsp__pcsamp_", "warps_issue_stalled_"})
        if (name.rfind(prefix, 0) == 0) return name.substr(std::string(prefix).size());
    return name;
}

bool is_not_issued_reason(const std::string& name) { return name.find("not_issued") != std::string::npos; }

#if PTXLAB_HAVE_CUPTI_HEADERS

namespace {
constexpr size_t kConfigPcs = 20000, kDrainPcs = 10000;
// CUPTI's scratch buffer holds a record per PC (about 16 bytes a stall reason, 1 MB for about
// 5500 PCs with all of them, cupti_pcsampling.h): 64 MiB is room for some 350 000 PCs, more than
// every kernel of a run has. The hardware buffer keeps CUPTI's default (512 MB); its worker threads
// move the samples out of it every kWorkerSleepMs instead of every 100 ms (the default), which the
// header names as a remedy for a hardware buffer that fills.
constexpr size_t kScratchBytes = size_t(64) << 20;
constexpr uint32_t kWorkerSleepMs = 10;

// A CUpti_PCSamplingData with room for `pcs` records of `reasons` stall reasons each.
struct DataBuffer {
    CUpti_PCSamplingData data{};
    std::vector<CUpti_PCSamplingPCData> pcs;
    std::vector<CUpti_PCSamplingStallReason> reasons;
    void allocate(size_t n, size_t per_pc) {
        pcs.assign(n, CUpti_PCSamplingPCData{});
        reasons.assign(n * std::max<size_t>(per_pc, 1), CUpti_PCSamplingStallReason{});
        for (size_t i = 0; i < n; ++i) {
            pcs[i].size = sizeof(CUpti_PCSamplingPCData);
            pcs[i].stallReason = &reasons[i * std::max<size_t>(per_pc, 1)];
        }
        data = {};
        data.size = sizeof(CUpti_PCSamplingData);
        data.collectNumPcs = n;
        data.pPcData = pcs.data();
    }
};
}  // namespace

struct PcSampler::Impl {
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    bool retained = false, enabled = false, running = false;
    CUpti_SubscriberHandle subscriber = nullptr;
    SamplingMode mode = SamplingMode::Serialized;
    std::map<uint32_t, std::string> reason_names;  // CUPTI's index -> its name
    DataBuffer config, drain;
    std::mutex cubin_mutex;
    std::vector<std::string> cubins;  // as loaded, in order
    PcRecordMap records;
    SampleRun run;

    void absorb_configured();
    void drain_all();
    void configure(unsigned period);
};

namespace {
void CUPTIAPI on_resource(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* cbdata) {
    if (domain != CUPTI_CB_DOMAIN_RESOURCE || cbid != CUPTI_CBID_RESOURCE_MODULE_LOADED || !cbdata) return;
    const auto* res = static_cast<const CUpti_ResourceData*>(cbdata);
    const auto* mod = static_cast<const CUpti_ModuleResourceData*>(res->resourceDescriptor);
    if (!mod || !mod->pCubin || mod->cubinSize == 0) return;
    auto* impl = static_cast<PcSampler::Impl*>(user);
    std::lock_guard<std::mutex> lock(impl->cubin_mutex);
    impl->cubins.emplace_back(mod->pCubin, mod->cubinSize);
}
}  // namespace

void add_pc_data(const CUpti_PCSamplingData& d, const std::map<uint32_t, std::string>& reason_names, SampleRun& run,
                 PcRecordMap& records) {
    run.total_samples += d.totalSamples;
    run.dropped_samples += d.droppedSamples;
    run.non_user_samples += d.nonUsrKernelsTotalSamples;
    run.hardware_buffer_full |= d.hardwareBufferFull != 0;
    for (size_t i = 0; i < d.totalNumPcs && i < d.collectNumPcs; ++i) {
        const CUpti_PCSamplingPCData& pc = d.pPcData[i];
        const std::string fn = pc.functionName ? pc.functionName : "(unknown function)";
        PcRecord& r = records[{pc.cubinCrc, fn, pc.pcOffset}];
        r.function = fn;
        r.cubin_crc = pc.cubinCrc;
        r.pc_offset = pc.pcOffset;
        for (size_t j = 0; j < pc.stallReasonCount; ++j) {
            const uint32_t index = pc.stallReason[j].pcSamplingStallReasonIndex;  // packed: copied out
            const uint64_t count = pc.stallReason[j].samples;
            const auto it = reason_names.find(index);
            const std::string name = it == reason_names.end() ? fmt::format("reason_{}", index) : it->second;
            if (is_not_issued_reason(name) || count == 0) continue;
            r.stalls[short_stall_reason(name)] += count;
        }
    }
}

namespace {
// The read-out fields of `d`, cleared before CUPTI writes them again: a read counts only what it was given.
void clear_counts(CUpti_PCSamplingData& d) {
    d.totalNumPcs = 0;
    d.remainingNumPcs = 0;
    d.totalSamples = 0;
    d.droppedSamples = 0;
    d.nonUsrKernelsTotalSamples = 0;
    d.hardwareBufferFull = 0;
}
}  // namespace

// What CUPTI put into the configured buffer on its own (at a range's end, or on disable), once.
void PcSampler::Impl::absorb_configured() {
    if (config.data.totalNumPcs > 0) add_pc_data(config.data, reason_names, run, records);
    clear_counts(config.data);
}

// Reads every record CUPTI holds: GetData until nothing remains, and whatever CUPTI flushed
// into the configured buffer on its own. CUPTI_ERROR_OUT_OF_MEMORY here: the hardware buffer
// filled (cupti_failure_message says what to do).
void PcSampler::Impl::drain_all() {
    for (int round = 0; round < 100000; ++round) {
        clear_counts(drain.data);
        CUpti_PCSamplingGetDataParams p{};
        p.size = CUpti_PCSamplingGetDataParamsSize;
        p.ctx = ctx;
        p.pcSamplingData = &drain.data;
        CUPTI_CALL(cuptiPCSamplingGetData, &p);
        if (drain.data.totalNumPcs > 0) add_pc_data(drain.data, reason_names, run, records);  // none: nothing read
        if (drain.data.remainingNumPcs == 0) break;
    }
    absorb_configured();
}

void PcSampler::Impl::configure(unsigned period) {
    size_t n = 0;
    CUpti_PCSamplingGetNumStallReasonsParams np{};
    np.size = CUpti_PCSamplingGetNumStallReasonsParamsSize;
    np.ctx = ctx;
    np.numStallReasons = &n;
    CUPTI_CALL(cuptiPCSamplingGetNumStallReasons, &np);
    std::vector<std::vector<char>> names(n, std::vector<char>(CUPTI_STALL_REASON_STRING_SIZE, '\0'));
    std::vector<char*> name_ptrs(n);
    for (size_t i = 0; i < n; ++i) name_ptrs[i] = names[i].data();
    std::vector<uint32_t> indices(n);
    CUpti_PCSamplingGetStallReasonsParams sp{};
    sp.size = CUpti_PCSamplingGetStallReasonsParamsSize;
    sp.ctx = ctx;
    sp.numStallReasons = n;
    sp.stallReasonIndex = indices.data();
    sp.stallReasons = name_ptrs.data();
    CUPTI_CALL(cuptiPCSamplingGetStallReasons, &sp);
    for (size_t i = 0; i < n; ++i) reason_names[indices[i]] = std::string(names[i].data());
    config.allocate(kConfigPcs, n);
    drain.allocate(kDrainPcs, n);

    std::vector<CUpti_PCSamplingConfigurationInfo> a(8);
    a[0].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD;
    a[0].attributeData.samplingPeriodData.samplingPeriod = period;
    a[1].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE;
    a[1].attributeData.scratchBufferSizeData.scratchBufferSize = kScratchBytes;
    a[2].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE;
    a[2].attributeData.collectionModeData.collectionMode = mode == SamplingMode::Serialized
                                                               ? CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED
                                                               : CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
    a[3].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL;
    a[3].attributeData.enableStartStopControlData.enableStartStopControl = 1;
    a[4].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT;
    a[4].attributeData.outputDataFormatData.outputDataFormat = CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED;
    a[5].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER;
    a[5].attributeData.samplingDataBufferData.samplingDataBuffer = &config.data;
    a[6].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON;
    a[6].attributeData.stallReasonData.stallReasonCount = n;
    a[6].attributeData.stallReasonData.pStallReasonIndex = indices.data();
    a[7].attributeType = CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN;
    a[7].attributeData.workerThreadPeriodicSleepSpanData.workerThreadPeriodicSleepSpan = kWorkerSleepMs;
    CUpti_PCSamplingConfigurationInfoParams cp{};
    cp.size = CUpti_PCSamplingConfigurationInfoParamsSize;
    cp.ctx = ctx;
    cp.numAttributes = a.size();
    cp.pPCSamplingConfigurationInfo = a.data();
    CUPTI_CALL(cuptiPCSamplingSetConfigurationAttribute, &cp);
}

PcSampler::PcSampler(const Context& c, SamplingMode mode, unsigned period) : impl_(std::make_unique<Impl>()) {
    if (period < 5 || period > 31)
        PTXLAB_THROW(InputError, "--period {} is out of range: CUPTI samples every 2^period cycles, period 5 .. 31",
                     period);
    cupti();  // CuptiError when missing, before any CUPTI call
    Impl& m = *impl_;
    m.mode = mode;
    m.run.period = period;
    CU(cuDeviceGet, &m.dev, c.info().ordinal);
    CU(cuDevicePrimaryCtxRetain, &m.ctx, m.dev);
    m.retained = true;
    CUPTI_CALL(cuptiSubscribe, &m.subscriber, reinterpret_cast<CUpti_CallbackFunc>(&on_resource), &m);
    CUPTI_CALL(cuptiEnableCallback, 1, m.subscriber, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED);
    CUpti_PCSamplingEnableParams ep{};
    ep.size = CUpti_PCSamplingEnableParamsSize;
    ep.ctx = m.ctx;
    CUPTI_CALL(cuptiPCSamplingEnable, &ep);
    m.enabled = true;
    m.configure(period);
}

PcSampler::~PcSampler() {
    Impl& m = *impl_;
    if (device_hung()) return;
    const Cupti* c = nullptr;
    try {
        c = &cupti();
    } catch (const Error&) {
    }
    if (c && m.running) {
        CUpti_PCSamplingStopParams p{};
        p.size = CUpti_PCSamplingStopParamsSize;
        p.ctx = m.ctx;
        c->cuptiPCSamplingStop(&p);
    }
    if (c && m.enabled) {
        CUpti_PCSamplingDisableParams p{};
        p.size = CUpti_PCSamplingDisableParamsSize;
        p.ctx = m.ctx;
        c->cuptiPCSamplingDisable(&p);
    }
    if (c && m.subscriber) c->cuptiUnsubscribe(m.subscriber);
    if (m.retained) driver().cuDevicePrimaryCtxRelease(m.dev);
}

void PcSampler::start() {
    CU(cuCtxSynchronize);
    CUpti_PCSamplingStartParams p{};
    p.size = CUpti_PCSamplingStartParamsSize;
    p.ctx = impl_->ctx;
    CUPTI_CALL(cuptiPCSamplingStart, &p);
    impl_->running = true;
}

void PcSampler::stop() {
    CU(cuCtxSynchronize);
    CUpti_PCSamplingStopParams p{};
    p.size = CUpti_PCSamplingStopParamsSize;
    p.ctx = impl_->ctx;
    impl_->running = false;
    CUPTI_CALL(cuptiPCSamplingStop, &p);
    ++impl_->run.ranges;
    impl_->drain_all();
}

void PcSampler::drain() {
    if (!impl_->running) return;
    stop();
    start();
}

SampleRun PcSampler::take() {
    Impl& m = *impl_;
    if (m.running) stop();
    if (m.enabled) {  // what CUPTI still holds is flushed into the configured buffer on disable
        CUpti_PCSamplingDisableParams p{};
        p.size = CUpti_PCSamplingDisableParamsSize;
        p.ctx = m.ctx;
        m.enabled = false;
        CUPTI_CALL(cuptiPCSamplingDisable, &p);
        m.absorb_configured();
    }
    SampleRun out = m.run;
    for (auto& [key, r] : m.records)
        if (r.samples() > 0) out.records.push_back(r);
    std::lock_guard<std::mutex> lock(m.cubin_mutex);
    for (const auto& cubin : m.cubins) out.cubins[cubin_crc(cubin)] = cubin;
    return out;
}

uint64_t cubin_crc(const std::string& cubin) {
    CUpti_GetCubinCrcParams p{};
    p.size = CUpti_GetCubinCrcParamsSize;
    p.cubinSize = cubin.size();
    p.cubin = cubin.data();
    CUPTI_CALL(cuptiGetCubinCrc, &p);
    return p.cubinCrc;
}

#else

struct PcSampler::Impl {};
PcSampler::PcSampler(const Context&, SamplingMode, unsigned) { cupti_unavailable(); }
PcSampler::~PcSampler() = default;
void PcSampler::start() {}
void PcSampler::stop() {}
void PcSampler::drain() {}
SampleRun PcSampler::take() { return {}; }
uint64_t cubin_crc(const std::string&) { return 0; }

#endif

}  // namespace ptxlab
