#include "base/histogram.h"

#include <fmt/format.h>

#include <utility>

namespace tessera {

std::string prometheus_number(double v) {
    std::string s = fmt::format("{}", v);
    if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
    return s;
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value, std::int64_t count) {
    std::size_t i = 0;
    while (i < bounds_.size() && value > bounds_[i]) ++i;
    counts_[i] += count;
    sum_ += value * static_cast<double>(count);
    count_ += count;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
    const std::string sep = labels.empty() ? "" : ",";
    std::int64_t cumulative = 0;
    for (std::size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += counts_[i];
        const std::string le = i < bounds_.size() ? prometheus_number(bounds_[i]) : "+Inf";
        out += fmt::format("{}_bucket{{{}{}le=\"{}\"}} {}\n", name, labels, sep, le,
                           prometheus_number(static_cast<double>(cumulative)));
    }
    const std::string braces = labels.empty() ? "" : "{" + labels + "}";
    out += fmt::format("{}_sum{} {}\n", name, braces, prometheus_number(sum_));
    out += fmt::format("{}_count{} {}\n", name, braces, prometheus_number(static_cast<double>(count_)));
}

}  // namespace tessera
