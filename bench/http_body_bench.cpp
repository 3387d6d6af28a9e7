// What reading a request body costs `cpudl serve` in its HTTP library. One image of ResNet-18 as
// a binary KServe body is 602 KB. Debian's cpp-httplib (0.11, a compiled library, so its
// CPPHTTPLIB_RECV_BUFSIZ of 4 KiB is fixed) reads a body in 4 KiB pieces, each after a poll(): some
// 150 recv and 150 poll calls per image. Two round trips over loopback keep-alive, one client:
//   BM_HttplibBody  an httplib::Server whose handler reads the body as cpudl serve's does
//                   (ContentReader into a reserved string), answering 2 bytes;
//   BM_CpudlBody    cpudl serve's server (serve/http_connection.h: httplib's parser over cpudl's
//                   connection loop), the handler reading the body straight from the socket;
//   BM_RecvBody     the same request read by plain recv() calls as large as what remains,
//                   answering the same 2 bytes: the floor of the kernel's copy.
// The difference per request is what the library's reading adds to every inference request
// (compare with `cpudl run --batch 1`'s latency and with the serving throughput in BENCHMARKS.md).
#include <arpa/inet.h>
#include <benchmark/benchmark.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "serve/http_connection.h"

namespace {

constexpr std::size_t kBody = 3 * 224 * 224 * 4 + 160;  // one image as f32, and its JSON header

int connect_to(int port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect");
  return s;
}

std::string request() {
  return "POST /infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
         "application/octet-stream\r\nContent-Length: " +
         std::to_string(kBody) + "\r\n\r\n" + std::string(kBody, 'x');
}

// Sends the request and reads the answer up to its 2-byte body ("ok").
void round_trip(int s, const std::string& req, std::string& scratch) {
  for (std::size_t sent = 0; sent < req.size();) {
    const auto n = send(s, req.data() + sent, req.size() - sent, 0);
    if (n <= 0) throw std::runtime_error("send");
    sent += static_cast<std::size_t>(n);
  }
  scratch.clear();
  char buf[4096];
  while (scratch.size() < 4 || scratch.compare(scratch.size() - 2, 2, "ok") != 0) {
    const auto n = recv(s, buf, sizeof buf, 0);
    if (n <= 0) throw std::runtime_error("recv");
    scratch.append(buf, static_cast<std::size_t>(n));
  }
}

// One server, one keep-alive connection, the request sent and answered once per iteration.
void run_server(benchmark::State& state, httplib::Server& server) {
  // As cpudl serve sets it (server.cpp): one connection for the whole run, no Nagle delay.
  server.set_keep_alive_max_count(1 << 30);
  server.set_tcp_nodelay(true);
  const int port = server.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { server.listen_after_bind(); });
  while (!server.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const int s = connect_to(port);
  const std::string req = request();
  std::string scratch;
  for (auto _ : state) round_trip(s, req, scratch);
  close(s);
  server.stop();
  serving.join();
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBody));
}

void BM_HttplibBody(benchmark::State& state) {
  httplib::Server server;
  std::string body;
  server.Post("/infer",
              [&](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& read) {
                body.clear();
                body.reserve(kBody);
                read([&](const char* data, std::size_t n) {
                  body.append(data, n);
                  return true;
                });
                res.set_content("ok", "text/plain");
              });
  run_server(state, server);
}
BENCHMARK(BM_HttplibBody)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_CpudlBody(benchmark::State& state) {
  cpudl::serve::HttpServer server;
  std::string body;
  server.Post("/infer",
              [&](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader&) {
                cpudl::serve::ConnectionStream* stream = cpudl::serve::body_stream(req);
                body.resize(kBody);
                if (stream == nullptr || !stream->read_exact(body.data(), kBody))
                  throw std::runtime_error("the body could not be read");
                res.set_content("ok", "text/plain");
              });
  run_server(state, server);
}
BENCHMARK(BM_CpudlBody)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_RecvBody(benchmark::State& state) {
  const int listening = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof a;
  if (bind(listening, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listening, 1) != 0 ||
      getsockname(listening, reinterpret_cast<sockaddr*>(&a), &length) != 0)
    throw std::runtime_error("listen");
  const std::string req = request(), head = req.substr(0, req.size() - kBody);
  std::thread serving([&] {
    const int c = accept(listening, nullptr, nullptr);
    std::string got(req.size(), '\0');
    const std::string answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    for (;;) {
      std::size_t have = 0;
      while (have < req.size()) {  // the head, then the body in reads as large as what remains
        const auto n = recv(c, got.data() + have, req.size() - have, 0);
        if (n <= 0) {
          close(c);
          return;
        }
        have += static_cast<std::size_t>(n);
      }
      if (got.compare(0, head.size(), head) != 0) throw std::runtime_error("request");
      send(c, answer.data(), answer.size(), 0);
    }
  });
  const int s = connect_to(ntohs(a.sin_port));
  std::string scratch;
  for (auto _ : state) round_trip(s, req, scratch);
  close(s);
  serving.join();
  close(listening);
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * kBody));
}
BENCHMARK(BM_RecvBody)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
