// `cpudl train --report` and `cpudl eval --report`: one page a person opens after a run or an
// evaluation. Self-contained (inline SVG and CSS, no script, no network fetch), so it can be
// mailed, archived or opened offline.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "cli/train_monitor.h"
#include "cpudl/error.h"
#include "measure/doctor_report.h"

namespace cpudl::cli {

namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string num(double value, int decimals = 2) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// A line chart: x and y series in data units, drawn into a w x h box with axes and tick labels.
struct Chart {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
  int w = 720, h = 260, left = 60, right = 20, top = 16, bottom = 36;
  double px(double x) const { return left + (x - x0) / std::max(x1 - x0, 1e-12) * (w - left - right); }
  double py(double y) const { return h - bottom - (y - y0) / std::max(y1 - y0, 1e-12) * (h - top - bottom); }

  std::string axes(const std::string& x_label, const std::string& y_label) const {
    std::ostringstream s;
    s << "<line x1='" << left << "' y1='" << h - bottom << "' x2='" << w - right << "' y2='" << h - bottom
      << "' class='axis'/><line x1='" << left << "' y1='" << top << "' x2='" << left << "' y2='" << h - bottom
      << "' class='axis'/>";
    for (int i = 0; i <= 4; ++i) {
      const double y = y0 + (y1 - y0) * i / 4, x = x0 + (x1 - x0) * i / 4;
      s << "<text x='" << left - 6 << "' y='" << py(y) + 4 << "' class='tick' text-anchor='end'>"
        << num(y, std::abs(y1 - y0) < 5 ? 2 : 0) << "</text>";
      s << "<line x1='" << left << "' y1='" << py(y) << "' x2='" << w - right << "' y2='" << py(y)
        << "' class='grid'/>";
      s << "<text x='" << px(x) << "' y='" << h - bottom + 16 << "' class='tick' text-anchor='middle'>"
        << num(x, std::abs(x1 - x0) < 5 ? 1 : 0) << "</text>";
    }
    s << "<text x='" << (left + w - right) / 2 << "' y='" << h - 4 << "' class='label' text-anchor='middle'>"
      << escape(x_label) << "</text>";
    s << "<text x='14' y='" << (top + h - bottom) / 2
      << "' class='label' text-anchor='middle' transform='rotate(-90 14 " << (top + h - bottom) / 2 << ")'>"
      << escape(y_label) << "</text>";
    return s.str();
  }

  std::string polyline(const std::vector<std::pair<double, double>>& points, const std::string& cls) const {
    std::ostringstream s;
    s << "<polyline class='" << cls << "' points='";
    for (const auto& [x, y] : points) s << num(px(x), 1) << "," << num(py(y), 1) << " ";
    s << "'/>";
    return s.str();
  }
};

void fit(Chart& c, const std::vector<std::pair<double, double>>& points, bool from_zero) {
  if (points.empty()) return;
  c.x0 = points.front().first;
  c.x1 = points.back().first;
  c.y0 = from_zero ? 0 : points.front().second;
  c.y1 = points.front().second;
  for (const auto& [x, y] : points) {
    c.x0 = std::min(c.x0, x), c.x1 = std::max(c.x1, x);
    c.y0 = std::min(c.y0, y), c.y1 = std::max(c.y1, y);
  }
  if (c.x1 <= c.x0) c.x1 = c.x0 + 1;
  if (c.y1 <= c.y0) c.y1 = c.y0 + 1;
  c.y1 += (c.y1 - c.y0) * 0.05;
}

std::string svg_open(const Chart& c, const std::string& label) {
  return "<svg role='img' aria-label='" + escape(label) + "' viewBox='0 0 " + std::to_string(c.w) + " " +
         std::to_string(c.h) + "' width='" + std::to_string(c.w) + "' height='" + std::to_string(c.h) + "'>";
}

// Loss per step (and the test loss per epoch) on one chart.
std::string loss_chart(const std::vector<StepRecord>& steps, const std::vector<EpochRecord>& epochs) {
  std::vector<std::pair<double, double>> loss, test;
  for (std::size_t i = 0; i < steps.size(); ++i) loss.emplace_back(static_cast<double>(i + 1), steps[i].loss);
  std::size_t step_count = 0;
  for (const EpochRecord& e : epochs) {
    while (step_count < steps.size() && steps[step_count].seconds <= e.seconds) ++step_count;
    test.emplace_back(static_cast<double>(step_count), e.report.test_loss);
  }
  if (loss.empty()) return "<p>No step was taken.</p>";
  Chart c;
  auto all = loss;
  all.insert(all.end(), test.begin(), test.end());
  std::sort(all.begin(), all.end());
  fit(c, all, true);
  std::string s = svg_open(c, "training loss per step") + c.axes("step", "loss") + c.polyline(loss, "series");
  for (const auto& [x, y] : test)
    s += "<circle cx='" + num(c.px(x), 1) + "' cy='" + num(c.py(y), 1) + "' r='4' class='marker'/>";
  return s +
         "</svg><p class='legend'><span class='key series'></span> training loss per step "
         "<span class='key marker'></span> test loss after each epoch</p>";
}

std::string accuracy_table(const std::vector<EpochRecord>& epochs) {
  std::ostringstream s;
  s << "<table><tr><th>epoch</th><th>loss</th><th>test loss</th><th>test accuracy</th><th>seconds</th>"
       "<th>images/s</th></tr>";
  for (const EpochRecord& e : epochs)
    s << "<tr><td>" << e.report.epoch << "</td><td>" << num(e.report.loss, 4) << "</td><td>"
      << num(e.report.test_loss, 4) << "</td><td>" << num(100 * e.report.test_accuracy, 2) << "%</td><td>"
      << num(e.report.seconds, 1) << "</td><td>" << num(e.report.images_per_second, 0) << "</td></tr>";
  return s.str() + "</table>";
}

// Images/s over time, smoothed over a few steps, with the governor's decisions marked.
std::string throughput_chart(const std::vector<StepRecord>& steps, const std::vector<GovernorEvent>& events) {
  if (steps.empty()) return "";
  std::vector<std::pair<double, double>> rate;
  const std::size_t window = std::max<std::size_t>(1, steps.size() / 100);
  for (std::size_t i = 0; i < steps.size(); i += window) {
    double seconds = 0, images = 0;
    for (std::size_t j = i; j < std::min(steps.size(), i + window); ++j) {
      seconds += steps[j].step_seconds;
      images += static_cast<double>(steps[j].images);
    }
    if (seconds > 0)
      rate.emplace_back(steps[std::min(steps.size(), i + window) - 1].seconds, images / seconds);
  }
  if (rate.empty()) return "";
  Chart c;
  fit(c, rate, true);
  c.x0 = 0;
  std::string s =
      svg_open(c, "images per second over time") + c.axes("seconds", "images/s") + c.polyline(rate, "series");
  for (const GovernorEvent& e : events) {
    const double x = c.px(std::clamp(e.seconds, c.x0, c.x1));
    s += "<line x1='" + num(x, 1) + "' y1='" + std::to_string(c.top) + "' x2='" + num(x, 1) + "' y2='" +
         std::to_string(c.h - c.bottom) + "' class='event'><title>" + escape(e.decision.text) +
         "</title></line>";
    s += "<text x='" + num(x + 3, 1) + "' y='" + std::to_string(c.top + 10) + "' class='event-label'>" +
         escape(e.decision.pause    ? "paused"
                : e.decision.resume ? "resumed"
                                    : std::to_string(e.decision.to) + " threads") +
         "</text>";
  }
  s += "</svg>";
  if (!events.empty()) {
    s += "<ul class='events'>";
    for (const GovernorEvent& e : events)
      s += "<li>" + num(e.seconds, 1) + " s: governor: " + escape(e.decision.text) + "</li>";
    s += "</ul>";
  } else {
    s += "<p class='legend'>The thread governor made no change during the run.</p>";
  }
  return s;
}

// The confusion matrix as a heat map: each cell shaded by its share of its true class.
std::string confusion_heatmap(const std::vector<std::vector<std::int64_t>>& m) {
  if (m.empty()) return "<p>No evaluation.</p>";
  const int n = static_cast<int>(m.size()), cell = n <= 10 ? 40 : std::max(8, 400 / n), pad = 40;
  const int size = pad + n * cell + 10;
  std::ostringstream s;
  s << "<svg role='img' aria-label='confusion matrix' viewBox='0 0 " << size << " " << size + 10
    << "' width='" << size << "' height='" << size + 10 << "'>";
  for (int t = 0; t < n; ++t) {
    std::int64_t row = 0;
    for (std::int64_t v : m[static_cast<std::size_t>(t)]) row += v;
    for (int p = 0; p < n; ++p) {
      const std::int64_t v = m[static_cast<std::size_t>(t)][static_cast<std::size_t>(p)];
      const double share = row > 0 ? static_cast<double>(v) / static_cast<double>(row) : 0;
      // Correct answers in blue, mistakes in red, the shade by the share of the true class.
      const int shade = static_cast<int>(std::lround(255 * (1 - std::sqrt(share))));
      const std::string colour = t == p
                                     ? "rgb(" + std::to_string(shade) + "," + std::to_string(shade) + ",255)"
                                     : "rgb(255," + std::to_string(shade) + "," + std::to_string(shade) + ")";
      s << "<rect x='" << pad + p * cell << "' y='" << pad + t * cell << "' width='" << cell << "' height='"
        << cell << "' fill='" << colour << "' class='cell'><title>true " << t << ", predicted " << p << ": "
        << v << "</title></rect>";
      if (cell >= 28 && v > 0)
        s << "<text x='" << pad + p * cell + cell / 2 << "' y='" << pad + t * cell + cell / 2 + 4
          << "' class='count" << (share > 0.5 ? " light" : "") << "' text-anchor='middle'>" << v << "</text>";
    }
    if (cell >= 14) {
      s << "<text x='" << pad - 6 << "' y='" << pad + t * cell + cell / 2 + 4
        << "' class='tick' text-anchor='end'>" << t << "</text>";
      s << "<text x='" << pad + t * cell + cell / 2 << "' y='" << pad - 6
        << "' class='tick' text-anchor='middle'>" << t << "</text>";
    }
  }
  s << "<text x='" << pad + n * cell / 2 << "' y='12' class='label' text-anchor='middle'>predicted</text>";
  s << "<text x='10' y='" << pad + n * cell / 2
    << "' class='label' text-anchor='middle' transform='rotate(-90 10 " << pad + n * cell / 2
    << ")'>true class</text></svg>";
  return s.str();
}

// Where the time went, per op and phase: horizontal bars.
std::string op_bars(const std::vector<OpTime>& ops) {
  if (ops.empty()) return "<p>No per-op times were collected.</p>";
  double total = 0;
  for (const OpTime& o : ops) total += o.seconds;
  const std::size_t shown = std::min<std::size_t>(ops.size(), 15);
  const int row = 22, label = 230, bar = 420, h = static_cast<int>(shown) * row + 10;
  std::ostringstream s;
  s << "<svg role='img' aria-label='time per op' viewBox='0 0 " << label + bar + 120 << " " << h
    << "' width='" << label + bar + 120 << "' height='" << h << "'>";
  for (std::size_t i = 0; i < shown; ++i) {
    const OpTime& o = ops[i];
    const double share = total > 0 ? o.seconds / total : 0;
    const int y = static_cast<int>(i) * row + 4;
    s << "<text x='" << label - 8 << "' y='" << y + 14 << "' class='tick' text-anchor='end'>" << escape(o.op)
      << " (" << escape(o.phase) << ")</text>";
    s << "<rect x='" << label << "' y='" << y << "' width='" << num(std::max(1.0, share * bar), 1)
      << "' height='" << row - 6 << "' class='bar'/>";
    s << "<text x='" << label + share * bar + 6 << "' y='" << y + 14 << "' class='tick'>"
      << num(100 * share, 1) << "% · " << num(o.seconds, 2) << " s</text>";
  }
  return s.str() + "</svg>";
}

std::string machine_table() {
  const auto j = doctor_json(runtime(), std::nullopt);
  const auto text = [](const nlohmann::ordered_json& v) {
    return v.is_string() ? v.get<std::string>() : v.dump();
  };
  std::vector<std::pair<std::string, std::string>> rows;
  const auto& cpu = j["cpu"];
  rows.emplace_back("CPU", text(cpu["model_name"]) + " (" + text(cpu["vendor"]) + ", family " +
                               text(cpu["family"]) + " model " + text(cpu["model"]) + ")");
  if (cpu.contains("hypervisor") && !text(cpu["hypervisor"]).empty() && !cpu["hypervisor"].is_null())
    rows.emplace_back("hypervisor", text(cpu["hypervisor"]));
  rows.emplace_back("cores", text(j["cores"]["physical"]) + " physical, " + text(j["cores"]["logical"]) +
                                 " logical, " + text(j["cores"]["sockets"]) + " socket(s)");
  rows.emplace_back("caches", "L1d " + text(j["caches"]["l1d_bytes"]) + " B, L2 " +
                                  text(j["caches"]["l2_bytes"]) + " B, L3 " + text(j["caches"]["l3_bytes"]) +
                                  " B");
  rows.emplace_back("NUMA nodes", std::to_string(j["numa_nodes"].size()));
  rows.emplace_back("memory", text(j["memory"]["total_bytes"]) + " B total, cgroup limit " +
                                  text(j["memory"]["cgroup_limit_bytes"]));
  rows.emplace_back("cgroup CPU quota",
                    text(j["cgroup"]["cpu_quota"]) + " (" + text(j["cgroup"]["version"]) + ")");
  std::string features;
  for (const auto& [name, usable] : j["isa"].items())
    if (usable.is_boolean() && usable.get<bool>()) features += (features.empty() ? "" : " ") + name;
  rows.emplace_back("instruction sets", features);
  rows.emplace_back("kernel level", text(j["level"]));
  rows.emplace_back("threads", text(j["threads"]) + ": " + text(j["threads_reason"]));
  if (j.contains("blas")) rows.emplace_back("BLAS", text(j["blas"]["active"]));
  for (const auto& w : j["warnings"]) rows.emplace_back("warning", text(w));
  std::ostringstream s;
  s << "<table class='machine'>";
  for (const auto& [key, value] : rows)
    s << "<tr><th>" << escape(key) << "</th><td>" << escape(value) << "</td></tr>";
  return s.str() + "</table>";
}

// The page's head and style; the caller appends the body and page_end().
std::string page_start(const std::string& title) {
  std::ostringstream s;
  s << "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>" << escape(title)
    << "</title><style>"
       "body{font:14px system-ui,sans-serif;margin:24px auto;max-width:820px;color:#1d2430}"
       "h1{font-size:22px}h2{font-size:17px;margin-top:28px;border-bottom:1px solid #dde}"
       "table{border-collapse:collapse}td,th{padding:3px 10px;text-align:right;border-bottom:1px solid #eef}"
       ".machine th,.machine td{text-align:left}.summary b{font-size:18px}"
       ".axis{stroke:#444}.grid{stroke:#eee}.tick{font-size:11px;fill:#555}.label{font-size:12px;fill:#333}"
       ".series{fill:none;stroke:#2a6fdb;stroke-width:1.6}.marker{fill:#e8590c}"
       ".event{stroke:#c92a2a;stroke-dasharray:4 3}.event-label{font-size:11px;fill:#c92a2a}"
       ".count{font-size:11px;fill:#111}.count.light{fill:#fff}.bar{fill:#2a6fdb}.legend{color:#555}"
       ".key{display:inline-block;width:14px;height:4px;vertical-align:middle;margin:0 4px 0 12px}"
       ".key.series{background:#2a6fdb}.key.marker{background:#e8590c;height:8px;border-radius:4px}"
       ".worst{display:flex;flex-wrap:wrap;gap:10px}.worst figure{margin:0;text-align:center;font-size:12px}"
       ".sample{background:#000}"
       "</style></head><body>";
  return s.str();
}

std::string page_end() { return "</body></html>\n"; }

}  // namespace

std::string training_report_html(const ReportInput& in) {
  const auto steps = in.monitor->steps();
  const auto epochs = in.monitor->epochs();
  std::ostringstream s;
  s << page_start("cpudl train: " + in.title);
  const train::Summary& sum = in.summary;
  s << "<h1>cpudl train: " << escape(in.title) << "</h1><p class='summary'>" << escape(sum.model) << ", "
    << sum.parameters << " parameters · " << sum.epochs_run << " epoch" << (sum.epochs_run == 1 ? "" : "s")
    << " · test accuracy <b>" << num(100 * sum.test_accuracy, 2) << "%</b> · <b>"
    << num(sum.images_per_second, 0) << "</b> images/s · " << num(sum.seconds_per_epoch, 2)
    << " s/epoch · peak memory " << num(static_cast<double>(sum.peak_memory_bytes) / (1 << 20), 1) << " MiB"
    << (sum.ranks > 1 ? " · " + std::to_string(sum.ranks) + " ranks" : "") << "</p>";
  s << "<h2>Loss</h2>" << loss_chart(steps, epochs) << accuracy_table(epochs);
  s << "<h2>Throughput and the thread governor</h2>"
    << throughput_chart(steps, in.monitor->governor_events());
  s << "<h2>Confusion matrix (test split, last epoch)</h2>"
    << confusion_heatmap(epochs.empty() ? std::vector<std::vector<std::int64_t>>{}
                                        : epochs.back().report.confusion);
  s << "<h2>Time per op</h2>" << op_bars(in.ops);
  if (in.monitor->roof_gflops() > 0)
    s << "<p class='legend'>Measured fp32 roof of this run's threads: " << num(in.monitor->roof_gflops(), 1)
      << " GFLOP/s.</p>";
  s << "<h2>Machine</h2>" << machine_table() << page_end();
  return s.str();
}

namespace {

// One sample drawn as an SVG pixel grid (grey or RGB), the normalisation undone.
std::string sample_svg(const data::Dataset& d, std::int64_t index, int scale) {
  const Tensor& images = d.images;
  if (images.dim() != 4) return "";
  const std::int64_t c = images.size(1), h = images.size(2), w = images.size(3);
  const float* px = images.data() + index * c * h * w;
  std::ostringstream s;
  s << "<svg viewBox='0 0 " << w << " " << h << "' width='" << w * scale << "' height='" << h * scale
    << "' shape-rendering='crispEdges' class='sample'>";
  for (std::int64_t y = 0; y < h; ++y)
    for (std::int64_t x = 0; x < w; ++x) {
      int rgb[3];
      for (std::int64_t k = 0; k < 3; ++k) {
        const std::int64_t ch = c == 3 ? k : 0;
        const float mean = d.mean.empty() ? 0.f : d.mean[static_cast<std::size_t>(ch) % d.mean.size()];
        const float sd = d.std.empty() ? 1.f : d.std[static_cast<std::size_t>(ch) % d.std.size()];
        const float v = px[(ch * h + y) * w + x] * sd + mean;
        rgb[k] = static_cast<int>(std::lround(255 * std::clamp(v, 0.f, 1.f)));
      }
      if (rgb[0] == 0 && rgb[1] == 0 && rgb[2] == 0) continue;  // the black background below
      s << "<rect x='" << x << "' y='" << y << "' width='1' height='1' fill='rgb(" << rgb[0] << "," << rgb[1]
        << "," << rgb[2] << ")'/>";
    }
  return s.str() + "</svg>";
}

}  // namespace

void check_report_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path report(path);
  const auto dir = report.has_parent_path() ? report.parent_path() : std::filesystem::path(".");
  if (std::filesystem::is_directory(report, ec))
    throw UsageError("--report " + path + " is a directory: give the .html file to write");
  if (!std::filesystem::is_directory(dir, ec) || ::access(dir.c_str(), W_OK) != 0)
    throw Error("--report " + path + ": cannot write into " + dir.string());
}

std::string evaluation_report_html(const std::string& title, const data::Dataset& data,
                                   const train::Evaluation& e) {
  std::ostringstream s;
  s << page_start("cpudl eval: " + title);
  const std::int64_t n = data.labels.size(0);
  s << "<h1>cpudl eval: " << escape(title) << "</h1><p class='summary'>accuracy <b>"
    << num(100 * e.accuracy, 2) << "%</b> of " << n << " samples · mean loss " << num(e.loss, 4) << "</p>";
  s << "<h2>Confusion matrix</h2>" << confusion_heatmap(e.confusion);
  s << "<h2>The worst-classified samples</h2>";
  if (e.worst.empty()) {
    s << "<p>Every sample was classified correctly.</p>";
  } else {
    s << "<p class='legend'>The misclassified samples of highest loss, highest first: the model was most "
         "sure "
         "of these wrong answers.</p><div class='worst'>";
    for (const train::Mistake& m : e.worst)
      s << "<figure>" << sample_svg(data, m.index, 3) << "<figcaption>#" << m.index << ": true " << m.label
        << ", predicted " << m.predicted << " (" << num(100 * m.probability, 1) << "%)</figcaption></figure>";
    s << "</div>";
  }
  s << "<h2>Machine</h2>" << machine_table() << page_end();
  return s.str();
}

}  // namespace cpudl::cli
