// `GET /metrics` on a thread of its own (metrics_endpoint.h).
#include "serve/metrics_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "cpudl/error.h"

namespace cpudl::serve {

MetricsEndpoint::MetricsEndpoint(const Metrics& metrics, const std::string& host, int port,
                                 const std::string& flag)
    : server_(std::make_unique<httplib::Server>()) {
  server_->new_task_queue = [] { return new httplib::ThreadPool(2); };  // scrapers are few
  server_->Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  // SO_REUSEADDR only, as `cpudl serve`: SO_REUSEPORT would let two processes share the port.
  server_->set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
    if (port_ < 0) throw Error(flag + ": cannot listen on " + host + ": " + std::strerror(errno));
  } else if (!server_->bind_to_port(host, port)) {
    throw Error(flag + " " + std::to_string(port) + ": cannot listen on " + host + ":" +
                std::to_string(port) + ": " +
                (errno == EADDRINUSE ? std::string("the port is in use") : std::strerror(errno)));
  } else {
    port_ = port;
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  server_->stop();
  thread_.join();
}

}  // namespace cpudl::serve
