#include "report.hpp"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

namespace netflow {

namespace {

constexpr std::array<rill::ip_proto, 5> proto_order = {rill::ip_proto::tcp, rill::ip_proto::udp, rill::ip_proto::icmp,
                                                       rill::ip_proto::icmpv6, rill::ip_proto::other};
constexpr std::array<const char*, 5> colours = {"#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#7f7f7f"};

std::size_t slot_of(rill::ip_proto p) {
  for (std::size_t i = 0; i < proto_order.size(); ++i)
    if (proto_order[i] == p) return i;
  return proto_order.size() - 1;
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v >= 100 || v == 0 ? "%.0f" : "%.3g", v);
  return b;
}

/// An SVG line chart: one polyline per protocol that has traffic; x = seconds since the
/// first window, y = rate. Fixed 900 x 280 viewBox, scaled by CSS to the page width.
void chart(std::ostream& out, const char* id, const char* title, const std::vector<double>& xs,
           const std::vector<std::string>& xlabels, const std::array<std::vector<double>, 5>& ys) {
  const double w = 900, h = 280, l = 70, r = 70, t = 30, b = 40;
  const double xmax = xs.empty() ? 1 : std::max(1.0, xs.back());
  double ymax = 0;
  for (const auto& y : ys)
    for (double v : y) ymax = std::max(ymax, v);
  if (ymax <= 0) ymax = 1;
  auto X = [&](double x) { return l + (w - l - r) * x / xmax; };
  auto Y = [&](double y) { return h - b - (h - t - b) * y / ymax; };
  out << "<svg id=\"" << id << "\" class=\"chart\" viewBox=\"0 0 900 280\" role=\"img\" aria-label=\"" << title
      << "\">\n<text x=\"" << l << "\" y=\"18\" class=\"title\">" << title << "</text>\n";
  for (int i = 0; i <= 4; ++i) {  // horizontal grid and y labels
    const double y = ymax * i / 4;
    out << "<line x1=\"" << l << "\" x2=\"" << w - r << "\" y1=\"" << Y(y) << "\" y2=\"" << Y(y)
        << "\" class=\"grid\"/><text x=\"" << l - 6 << "\" y=\"" << Y(y) + 4 << "\" class=\"yl\">" << num(y)
        << "</text>\n";
  }
  const std::size_t every = std::max<std::size_t>(1, (xs.size() + 4) / 5);  // at most 5 labels
  for (std::size_t i = 0; i < xs.size(); i += every)
    out << "<text x=\"" << X(xs[i]) << "\" y=\"" << h - b + 16 << "\" class=\"xl\">" << esc(xlabels[i]) << "</text>\n";
  for (std::size_t p = 0; p < ys.size(); ++p) {
    if (std::all_of(ys[p].begin(), ys[p].end(), [](double v) { return v == 0; })) continue;
    out << "<polyline fill=\"none\" stroke=\"" << colours[p] << "\" stroke-width=\"2\" points=\"";
    for (std::size_t i = 0; i < xs.size(); ++i) out << X(xs[i]) << ',' << Y(ys[p][i]) << ' ';
    out << "\"/>\n";
    if (xs.size() <= 60)  // few windows: a dot on each
      for (std::size_t i = 0; i < xs.size(); ++i)
        out << "<circle cx=\"" << X(xs[i]) << "\" cy=\"" << Y(ys[p][i]) << "\" r=\"3\" fill=\"" << colours[p] << "\"/>\n";
  }
  double lx = l + 10;
  for (std::size_t p = 0; p < ys.size(); ++p) {  // legend
    out << "<rect x=\"" << lx << "\" y=\"" << h - 14 << "\" width=\"10\" height=\"10\" fill=\"" << colours[p]
        << "\"/><text x=\"" << lx + 14 << "\" y=\"" << h - 5 << "\" class=\"leg\">"
        << rill::to_string(proto_order[p]) << "</text>\n";
    lx += 80;
  }
  out << "</svg>\n";
}

/// "2026-12-01 18:30:00" (UTC) of `ns` since the epoch.
std::string utc(std::int64_t ns) {
  const std::time_t t = std::time_t(ns / 1'000'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tm);
  return b;
}

}  // namespace

void traffic_report::add(const flow_row& r) {
  auto& t = by_window_[r.window_start.time_since_epoch().count()];
  const auto s = slot_of(r.key.proto);
  t.packets[s] += r.packets;
  t.bytes[s] += r.bytes;
  auto& c = conversations_[r.key];
  c.first += r.packets;
  c.second += r.bytes;
}

void traffic_report::write_html(std::ostream& out, const nlohmann::json& summary) const {
  const double win_s = std::chrono::duration<double>(window_).count();
  // A time axis with every window (empty ones at 0) while the span is at most 2,000
  // windows; beyond (captures from different days), only the windows with traffic, in
  // order and evenly spaced, each labelled with its UTC start.
  std::vector<double> xs;
  std::vector<std::string> labels;
  std::array<std::vector<double>, 5> pps, bps;
  const std::int64_t first = by_window_.empty() ? 0 : by_window_.begin()->first;
  const std::int64_t last = by_window_.empty() ? 0 : by_window_.rbegin()->first;
  const std::int64_t step = std::max<std::int64_t>(1, window_.count());
  const bool continuous = (last - first) / step < 2000;
  auto point = [&](double x, std::int64_t start, const totals& t) {
    xs.push_back(x);
    labels.push_back(continuous ? num(double(start - first) / 1e9) + " s" : utc(start));
    for (std::size_t p = 0; p < protos; ++p) {
      pps[p].push_back(double(t.packets[p]) / win_s);
      bps[p].push_back(double(t.bytes[p]) / win_s);
    }
  };
  if (continuous) {
    for (std::int64_t start = first; !by_window_.empty() && start <= last; start += step) {
      const auto it = by_window_.find(start);
      point(double(start - first) / 1e9, start, it == by_window_.end() ? totals{} : it->second);
    }
  } else {
    for (const auto& [start, t] : by_window_) point(double(xs.size()), start, t);
  }
  std::vector<std::pair<rill::flow_key, std::pair<std::uint64_t, std::uint64_t>>> top(conversations_.begin(),
                                                                                     conversations_.end());
  std::stable_sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
  if (top.size() > 20) top.resize(20);

  out << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>netflow report</title>\n<style>\n"
         "body{font-family:sans-serif;margin:24px;color:#222;max-width:1000px}\n"
         ".chart{width:100%;height:auto;border:1px solid #ddd;margin:8px 0 20px}\n"
         ".title{font-size:15px;font-weight:bold}.grid{stroke:#eee}.yl{font-size:11px;text-anchor:end}\n"
         ".xl{font-size:11px;text-anchor:middle}.leg{font-size:12px}\n"
         "table{border-collapse:collapse;margin:8px 0 20px}td,th{border:1px solid #ccc;padding:3px 8px;"
         "font-size:13px}th{background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
         "</style></head>\n<body>\n<h1>netflow report</h1>\n";
  out << "<p>" << conversations_.size() << " conversations, " << by_window_.size() << " windows of " << num(win_s)
      << " s from " << (by_window_.empty() ? std::string("-") : utc(first)) << " UTC"
      << (continuous ? ", time in s since then" : "; the inputs are far apart in time, so only the windows with traffic are shown, evenly spaced")
      << ". Rates are a window's packets or bytes over its length, at the window's start.</p>\n";
  chart(out, "packets-chart", "packets per second by protocol", xs, labels, pps);
  chart(out, "bytes-chart", "bytes per second by protocol", xs, labels, bps);
  out << "<h2>Top " << top.size() << " conversations by bytes</h2>\n<table id=\"top-conversations\">\n"
         "<tr><th>#</th><th>proto</th><th>a</th><th>b</th><th>packets</th><th>bytes</th></tr>\n";
  std::size_t rank = 0;
  for (const auto& [k, pb] : top) {
    auto ep = [](const std::string& ip, const std::optional<std::uint16_t>& port) {
      return esc(ip) + (port ? ":" + std::to_string(*port) : std::string());
    };
    out << "<tr><td class=\"n\">" << ++rank << "</td><td>" << rill::to_string(k.proto) << "</td><td>"
        << ep(k.a_ip_string(), k.a_port) << "</td><td>" << ep(k.b_ip_string(), k.b_port) << "</td><td class=\"n\">"
        << pb.first << "</td><td class=\"n\">" << pb.second << "</td></tr>\n";
  }
  out << "</table>\n<h2>Summary</h2>\n<table id=\"summary\">\n";
  for (const auto& [k, v] : summary.items())
    out << "<tr><th>" << esc(k) << "</th><td>" << esc(v.is_string() ? v.get<std::string>() : v.dump())
        << "</td></tr>\n";
  // Records the rendered chart's size on <body> (data-chart-width/height): what a headless
  // browser's DOM dump shows to prove the page laid out.
  out << "</table>\n<script>\nwindow.addEventListener('load', () => {\n"
         "  const r = document.getElementById('packets-chart').getBoundingClientRect();\n"
         "  document.body.dataset.chartWidth = Math.round(r.width);\n"
         "  document.body.dataset.chartHeight = Math.round(r.height);\n});\n</script>\n</body></html>\n";
}

}  // namespace netflow
