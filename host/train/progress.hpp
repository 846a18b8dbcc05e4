// train's progress bar on stderr (only when stderr is a terminal): epoch, steps, loss, samples/s.
#pragma once

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

namespace ptxlab {

class Progress {
public:
    explicit Progress(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}
    void update(unsigned epoch, unsigned done, unsigned total, double loss, double samples_per_s) {
        if (!enabled_) return;
        auto now = std::chrono::steady_clock::now();
        if (done != total && now - last_ < std::chrono::milliseconds(100)) return;
        last_ = now;
        const int width = 30;
        int filled = static_cast<int>(double(width) * done / std::max(1u, total));
        fmt::print(stderr, "\repoch {:>2} [{}{}] {:>5}/{} loss {:.4f} {:>9.0f} samples/s", epoch,
                   std::string(size_t(filled), '#'), std::string(size_t(width - filled), '.'), done, total, loss,
                   samples_per_s);
        dirty_ = true;
    }
    void clear() {
        if (enabled_ && dirty_) fmt::print(stderr, "\r{:<100}\r", "");
        dirty_ = false;
    }

private:
    bool enabled_, dirty_ = false;
    std::chrono::steady_clock::time_point last_{};
};

}  // namespace ptxlab
