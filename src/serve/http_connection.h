// cpudl serve's HTTP server: cpp-httplib parses requests, routes them and writes responses, over a
// connection loop of cpudl's own whose stream lets a handler read a large body straight into its
// buffer. Debian's httplib is a compiled library whose receive buffer is fixed at 4 KiB: it reads a
// body in 4 KiB pieces, each after a poll() -- some 300 system calls and 0.55-0.65 ms for one
// ResNet-18 image of 602 KB (bench/http_body_bench.cpp, docs/BENCHMARKS.md "Serving"). httplib
// lets a subclass own the connection (process_and_close_socket is virtual) and run its request
// parser (process_request) over any httplib::Stream; ConnectionStream is that stream.
#pragma once

#include <httplib.h>

#include <cstddef>
#include <ctime>

namespace cpudl::serve {

// One accepted connection, for all its requests: buffered reads for the request line and headers
// (httplib reads them a byte at a time), large reads straight into the caller's memory for bodies,
// timeouts on every wait, MSG_NOSIGNAL on every write (a client gone is an error, not SIGPIPE).
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int sock, std::time_t read_timeout_s, std::time_t write_timeout_s);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, std::size_t size) override;
  ssize_t write(const char* ptr, std::size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  int socket() const override { return sock_; }

  // Exactly n bytes into dst: what the header reads buffered first, then recv() calls as large as
  // what remains. False (and the connection marked broken) on a timeout, a reset or an early close.
  bool read_exact(char* dst, std::size_t n);
  // Waits up to `timeout_ms` for the next request's first byte; false when the client closed.
  bool wait_for_request(int timeout_ms);
  // A body left half read (or a failed write) leaves the connection out of step: it must close.
  bool broken() const { return broken_; }

 private:
  bool wait(short events, std::time_t timeout_s) const;

  int sock_;
  std::time_t read_timeout_s_, write_timeout_s_;
  static constexpr std::size_t kBuffer = 16384;  // a request's head, and what follows it in its segment
  char buffer_[kBuffer];
  std::size_t begin_ = 0, end_ = 0;
  bool broken_ = false;
};

// httplib::Server, with each connection served over a ConnectionStream.
class HttpServer : public httplib::Server {
 private:
  bool process_and_close_socket(int sock) override;
};

// The stream a content-reader handler may read the request's body from itself (read_exact, with
// the Content-Length): the server is an HttpServer and the body has a length (not chunked) and
// is not compressed (Content-Encoding).
// nullptr otherwise: read it through httplib's ContentReader.
ConnectionStream* body_stream(const httplib::Request& req);

}  // namespace cpudl::serve
