#include "rill/core/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <stdexcept>

namespace rill {

namespace detail {

namespace {
void escape_into(std::string& out, const std::string& s, bool quote) {
  for (char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (quote && c == '"') out += "\\\"";
    else out += c;
  }
}
void number_into(std::string& out, double v) {
  if (std::isnan(v)) out += "NaN";
  else if (std::isinf(v)) out += v > 0 ? "+Inf" : "-Inf";
  else {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out += buf;
  }
}
}  // namespace

void prom_header(std::string& out, const std::string& name, const char* type, const std::string& help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  escape_into(out, help, false);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void prom_sample(std::string& out, const std::string& name, const metric_labels& labels, double v) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    for (std::size_t i = 0; i < labels.size(); ++i) {
      if (i) out += ',';
      out += labels[i].first;
      out += "=\"";
      escape_into(out, labels[i].second, true);
      out += '"';
    }
    out += '}';
  }
  out += ' ';
  number_into(out, v);
  out += '\n';
}

void prom_summary(std::string& out, const std::string& name, const metric_labels& labels, const histogram& h,
                  double scale) {
  for (double q : {0.5, 0.9, 0.99, 0.999}) {
    auto l = labels;
    char qs[16];
    std::snprintf(qs, sizeof qs, "%g", q);
    l.emplace_back("quantile", qs);
    prom_sample(out, name, l, double(h.quantile(q)) * scale);
  }
  prom_sample(out, name + "_sum", labels, double(h.sum()) * scale);
  prom_sample(out, name + "_count", labels, double(h.count()));
}

}  // namespace detail

std::size_t metrics_registry::add(kind k, std::string name, std::string help, metric_labels labels,
                                  double scale) {
  std::lock_guard lk(mu_);
  for (std::size_t i = 0; i < metrics_.size(); ++i)
    if (metrics_[i]->k == k && metrics_[i]->name == name && metrics_[i]->labels == labels) return i;
  if (metrics_.size() == max_metrics) throw std::length_error("rill::metrics_registry: more than 4096 metrics");
  auto m = std::make_unique<metric>();
  m->k = k;
  m->name = std::move(name);
  m->help = std::move(help);
  m->labels = std::move(labels);
  m->scale = scale;
  switch (k) {
    case kind::counter: m->counters = std::make_unique<counter_cell[]>(workers_); break;
    case kind::gauge: m->gauges = std::make_unique<gauge_cell[]>(workers_); break;
    case kind::histogram: m->histograms = std::make_unique<histogram_cell[]>(workers_); break;
  }
  metrics_.push_back(std::move(m));
  return metrics_.size() - 1;
}

void metrics_registry::write_prometheus(std::string& out) const {
  std::lock_guard lk(mu_);
  std::vector<bool> done(metrics_.size());
  for (std::size_t i = 0; i < metrics_.size(); ++i) {
    if (done[i]) continue;
    const auto& first = *metrics_[i];
    static constexpr const char* types[] = {"counter", "gauge", "summary"};
    detail::prom_header(out, first.name, types[int(first.k)], first.help);
    // Every series of this name, grouped under one header as the format requires.
    for (std::size_t j = i; j < metrics_.size(); ++j) {
      const auto& m = *metrics_[j];
      if (m.name != first.name || m.k != first.k) continue;
      done[j] = true;
      if (m.k == kind::histogram) {
        histogram h;
        for (std::size_t w = 0; w < workers_; ++w) h.merge(m.histograms[w]);
        detail::prom_summary(out, m.name, m.labels, h, m.scale);
        continue;
      }
      for (std::size_t w = 0; w < workers_; ++w) {
        auto l = m.labels;
        l.emplace_back("worker", std::to_string(w));
        const double v = m.k == kind::counter ? double(m.counters[w].value()) : m.gauges[w].value();
        detail::prom_sample(out, m.name, l, v);
      }
    }
  }
}

}  // namespace rill
