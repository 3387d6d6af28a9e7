// A /metrics endpoint beside work that is not a server (`cpudl train --metrics-port`): its own
// small HTTP server (cpp-httplib, as `cpudl serve`) on a thread, rendering a Metrics registry at
// each scrape.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "serve/metrics.h"

namespace httplib {
class Server;
}

namespace cpudl::serve {

class MetricsEndpoint {
 public:
  // Binds host:port (0: any free port) before returning: a port in use is an Error naming it,
  // raised before the caller starts its work. `flag` names the option in that message.
  MetricsEndpoint(const Metrics& metrics, const std::string& host, int port, const std::string& flag);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  int port() const { return port_; }

 private:
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace cpudl::serve
