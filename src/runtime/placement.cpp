// Where the compute threads run under --bind cores (runtime.h: plan_placement, bind_compute_threads).
//
// One physical core per thread, the cores of one NUMA node before the next's: threads that share
// a step's tensors then share the node's memory and last-level cache, and the pages they first
// touch are local to all of them. Hardware threads (SMT siblings) only after every core has one.
// The calling thread (the pool's thread 0) is held to its node rather than to one CPU, because the
// threads it starts later (data loading, the governor, servers) inherit its mask.
#include <omp.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "cpudl/error.h"
#include "cpudl/runtime.h"

namespace cpudl {

namespace {

int node_of(const SystemInfo& s, int cpu) {
  for (const NumaNode& n : s.numa_nodes)
    if (std::find(n.cpus.begin(), n.cpus.end(), cpu) != n.cpus.end()) return n.id;
  return s.numa_nodes.empty() ? 0 : -1;
}

std::string cpu_list_text(std::vector<int> cpus) {
  std::sort(cpus.begin(), cpus.end());
  std::ostringstream text;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (i > 0) text << ',';
    text << cpus[i];
    if (j > i) text << '-' << cpus[j];
    i = j + 1;
  }
  return text.str();
}

}  // namespace

Placement plan_placement(const SystemInfo& s, int threads) {
  const std::set<int> allowed(s.affinity.begin(), s.affinity.end());
  const auto usable = [&](int cpu) { return allowed.empty() || allowed.count(cpu) > 0; };
  // Each core's usable CPUs, cores ordered by node; rank 0 is a core's first CPU, rank 1 its sibling.
  std::map<int, std::vector<std::vector<int>>> cores_by_node;
  for (const std::vector<int>& core : s.core_cpus) {
    std::vector<int> cpus;
    for (int cpu : core)
      if (usable(cpu)) cpus.push_back(cpu);
    if (!cpus.empty()) cores_by_node[node_of(s, cpus.front())].push_back(cpus);
  }
  if (cores_by_node.empty())  // no topology: the allowed (or online) CPUs as they come
    for (int cpu : allowed.empty() ? s.online_cpus : s.affinity)
      cores_by_node[node_of(s, cpu)].push_back({cpu});
  std::vector<int> order;
  for (std::size_t rank = 0;; ++rank) {
    bool any = false;
    for (const auto& [node, cores] : cores_by_node)
      for (const std::vector<int>& core : cores)
        if (rank < core.size()) order.push_back(core[rank]), any = true;
    if (!any) break;
  }
  Placement p;
  if (order.empty()) return p;
  for (int t = 0; t < threads; ++t) {
    const int cpu = order[static_cast<std::size_t>(t) % order.size()];  // more threads than CPUs: wrap
    p.cpus.push_back(cpu);
    p.nodes.push_back(node_of(s, cpu));
  }
  // "node 0: threads 0-1 on CPUs 0,1; node 1: threads 2-3 on CPUs 4,5"
  std::map<int, std::vector<int>> threads_of_node, cpus_of_node;
  for (int t = 0; t < threads; ++t) {
    threads_of_node[p.nodes[static_cast<std::size_t>(t)]].push_back(t);
    cpus_of_node[p.nodes[static_cast<std::size_t>(t)]].push_back(p.cpus[static_cast<std::size_t>(t)]);
  }
  std::ostringstream text;
  for (const auto& [node, list] : threads_of_node) {
    if (text.tellp() > 0) text << "; ";
    text << "node " << node << ": thread" << (list.size() == 1 ? " " : "s ") << cpu_list_text(list)
         << " on CPU" << (list.size() == 1 ? " " : "s ") << cpu_list_text(cpus_of_node[node]);
  }
  p.text = text.str();
  return p;
}

std::vector<int> bind_compute_threads(const Placement& p, const SystemInfo& s) {
  const int n = static_cast<int>(p.cpus.size());
  if (n == 0) throw Error("--bind cores: no CPU to bind to (the topology could not be read)");
  std::vector<int> where(static_cast<std::size_t>(n), -1);
  std::vector<int> errors(static_cast<std::size_t>(n), 0);
  // The calling thread keeps its node's allowed CPUs (what it starts later inherits them).
  std::vector<int> home;
  for (const NumaNode& node : s.numa_nodes)
    if (node.id == p.nodes.front())
      for (int cpu : node.cpus)
        if (s.affinity.empty() || std::find(s.affinity.begin(), s.affinity.end(), cpu) != s.affinity.end())
          home.push_back(cpu);
  if (home.empty()) home = s.affinity;
  const ThreadScope scope(n);
#pragma omp parallel num_threads(n)
  {
    const int t = omp_get_thread_num();
    cpu_set_t set;
    CPU_ZERO(&set);
    if (t == 0 && !home.empty()) {
      for (int cpu : home) CPU_SET(cpu, &set);
    } else {
      CPU_SET(p.cpus[static_cast<std::size_t>(t)], &set);
    }
    if (sched_setaffinity(0, sizeof set, &set) != 0) errors[static_cast<std::size_t>(t)] = errno;
#pragma omp barrier
    where[static_cast<std::size_t>(t)] = sched_getcpu();
  }
  for (int t = 0; t < n; ++t)
    if (errors[static_cast<std::size_t>(t)] != 0)
      throw Error("--bind cores: cannot pin thread " + std::to_string(t) + " to CPU " +
                  std::to_string(p.cpus[static_cast<std::size_t>(t)]) + ": " +
                  std::strerror(errors[static_cast<std::size_t>(t)]));
  return where;
}

}  // namespace cpudl
