// Hypervisor steal from /proc/stat. A guest's vCPU that is ready to run while the host runs
// another guest accrues "steal" ticks (KVM reports them through its paravirtual steal clock). On
// shared guests it can reach a third of a busy vCPU's time (docs/ARCHITECTURE.md, steal_pct).
// Benchmarks report it beside each row, so that a row slowed by it can be told from a slow kernel; the host's
// other noise (another guest on the same physical core, or on the L3 and memory) leaves no such trace.
#include <algorithm>
#include <charconv>

#include "cpudl/runtime.h"
#include "runtime/read_text.h"

namespace cpudl {

namespace {

// The ticks of one "cpu..." line: user nice system idle iowait irq softirq steal [guest
// guest_nice]. Guest time is already counted in user and nice, so the total stops at steal.
std::optional<CpuTimes> parse_cpu_line(std::string_view fields) {
  std::uint64_t values[8] = {};
  for (std::uint64_t& v : values) {
    while (!fields.empty() && fields.front() == ' ') fields.remove_prefix(1);
    const auto [end, ec] = std::from_chars(fields.data(), fields.data() + fields.size(), v);
    if (ec != std::errc()) return std::nullopt;
    fields.remove_prefix(static_cast<std::size_t>(end - fields.data()));
  }
  CpuTimes t;
  for (std::uint64_t v : values) t.total += v;
  t.steal = values[7];
  t.idle = values[3] + values[4];
  return t;
}

}  // namespace

std::optional<CpuTimes> parse_proc_stat(std::string_view text) {
  std::optional<CpuTimes> all;
  int cpus = 0;
  while (!text.empty()) {
    const std::size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    if (line.rfind("cpu ", 0) == 0)
      all = parse_cpu_line(line.substr(4));
    else if (line.size() > 3 && line.rfind("cpu", 0) == 0 && line[3] >= '0' && line[3] <= '9')
      ++cpus;
  }
  if (!all || cpus == 0) return std::nullopt;
  all->cpus = cpus;
  return all;
}

std::vector<std::string> process_stat_fields(std::string_view text) {
  const std::size_t open = text.find(" ("), close = text.rfind(')');
  std::vector<std::string> fields{std::string(text.substr(0, std::min(open, text.find_first_of(" \n"))))};
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    fields.emplace_back();
    return fields;
  }
  fields.emplace_back(text.substr(open + 2, close - open - 2));
  std::string_view rest = text.substr(close + 1);
  while (true) {
    const std::size_t begin = rest.find_first_not_of(" \n");
    if (begin == std::string_view::npos) break;
    const std::size_t end = rest.find_first_of(" \n", begin);
    fields.emplace_back(
        rest.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) break;
    rest.remove_prefix(end);
  }
  return fields;
}

std::optional<CpuTimes> read_cpu_times(const std::filesystem::path& root) {
  const auto text = read_text(root / "proc/stat");
  return text ? parse_proc_stat(*text) : std::nullopt;
}

double steal_share(const CpuTimes& before, const CpuTimes& after, int busy) {
  if (after.total <= before.total || after.steal < before.steal || after.cpus <= 0) return 0.0;
  const double busy_ticks =
      static_cast<double>(after.total - before.total) * std::clamp(busy, 1, after.cpus) / after.cpus;
  return std::min(1.0, static_cast<double>(after.steal - before.steal) / busy_ticks);
}

StealMeter::StealMeter(int busy_threads) : busy_(busy_threads), start_(read_cpu_times()) {}

std::optional<double> StealMeter::share() const {
  const auto now = read_cpu_times();
  if (!start_ || !now) return std::nullopt;
  return steal_share(*start_, *now, busy_);
}

}  // namespace cpudl
