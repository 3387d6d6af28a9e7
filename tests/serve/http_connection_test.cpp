// cpudl serve's connection loop under httplib (serve/http_connection.h), spoken to over loopback
// with raw sockets: bodies read straight from the socket arrive whole and in order, pipelined
// requests keep their bytes, chunked and compressed bodies go through httplib's reader, a client that stops
// half way through its body costs only its own connection, and stop() ends idle connections.
#include "serve/http_connection.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

namespace cpudl::serve {
namespace {

// A server whose /echo answers the FNV-1a hash and length of the body it read, and whether it read
// it itself (body_stream) or through httplib's reader.
class EchoServer {
 public:
  EchoServer() {
    server_.set_keep_alive_max_count(1000);
    server_.set_tcp_nodelay(true);  // as cpudl serve: no 40 ms wait for the ACK of a response's head
    server_.Post("/echo",
                 [](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
                   std::string body;
                   const char* how = "httplib";
                   if (ConnectionStream* stream = body_stream(req)) {
                     how = "socket";
                     body.resize(std::stoull(req.get_header_value("Content-Length")));
                     if (!stream->read_exact(body.data(), body.size())) {
                       res.status = 400;
                       res.set_content("short body", "text/plain");
                       return;
                     }
                   } else {
                     read([&](const char* data, std::size_t n) {
                       body.append(data, n);
                       return true;
                     });
                   }
                   res.set_content(std::to_string(hash(body)) + " " + std::to_string(body.size()) + " " +
                                       how + " " + req.remote_addr,
                                   "text/plain");
                 });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~EchoServer() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }
  HttpServer& server() { return server_; }

  static std::uint64_t hash(const std::string& s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
  }

 private:
  HttpServer server_;
  int port_ = 0;
  std::thread thread_;
};

int connect_to(int port) {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("connect");
  timeval timeout{10, 0};
  setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return s;
}

void send_all(int s, const std::string& data) {
  for (std::size_t sent = 0; sent < data.size();) {
    const auto n = send(s, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) throw std::runtime_error("send");
    sent += static_cast<std::size_t>(n);
  }
}

// One response's body (Content-Length framed); "" when the connection closed first.
std::string read_response(int s, std::string& pending) {
  char buf[4096];
  for (;;) {
    const auto head_end = pending.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      const auto at = pending.find("Content-Length: ");
      const std::size_t length = std::stoull(pending.substr(at + 16));
      if (pending.size() >= head_end + 4 + length) {
        std::string status = pending.substr(9, 3), body = pending.substr(head_end + 4, length);
        pending.erase(0, head_end + 4 + length);
        return status + " " + body;
      }
    }
    const auto n = recv(s, buf, sizeof buf, 0);
    if (n <= 0) return "";
    pending.append(buf, static_cast<std::size_t>(n));
  }
}

std::string post(const std::string& body) {
  return "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

std::string pattern(std::size_t n, unsigned seed) {
  std::string s(n, '\0');
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 2654435761u + seed) >> 13);
  return s;
}

std::string expected(const std::string& body, const char* how) {
  return "200 " + std::to_string(EchoServer::hash(body)) + " " + std::to_string(body.size()) + " " + how +
         " 127.0.0.1";
}

TEST(HttpConnection, BodiesOfEverySizeArriveWholeOnOneKeepAliveConnection) {
  EchoServer server;
  const int s = connect_to(server.port());
  std::string pending;
  // Around the stream's 16 KiB buffer, where a read switches from it to the destination, and a
  // ResNet-18 image.
  for (std::size_t n : {0, 1, 100, 16383, 16384, 16385, 70000, 602272}) {
    const std::string body = pattern(n, static_cast<unsigned>(n));
    send_all(s, post(body));
    EXPECT_EQ(read_response(s, pending), expected(body, "socket")) << n << " bytes";
  }
  close(s);
}

TEST(HttpConnection, PipelinedRequestsKeepTheirBytes) {
  EchoServer server;
  const int s = connect_to(server.port());
  // Three requests in one write: the first read takes the head and whatever follows it.
  const std::string a = pattern(300, 1), b = pattern(5000, 2), c = pattern(40000, 3);
  send_all(s, post(a) + post(b) + post(c));
  std::string pending;
  EXPECT_EQ(read_response(s, pending), expected(a, "socket"));
  EXPECT_EQ(read_response(s, pending), expected(b, "socket"));
  EXPECT_EQ(read_response(s, pending), expected(c, "socket"));
  close(s);
}

TEST(HttpConnection, ChunkedBodiesGoThroughHttplib) {
  EchoServer server;
  const int s = connect_to(server.port());
  send_all(s,
           "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
           "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  std::string pending;
  EXPECT_EQ(read_response(s, pending), expected("hello world", "httplib"));
  close(s);
}

TEST(HttpConnection, CompressedBodiesGoThroughHttplibAndArriveInflated) {
  EchoServer server;
  const std::string body = pattern(50000, 6);
  uLongf size = compressBound(static_cast<uLong>(body.size()));
  std::string packed(size, '\0');
  // zlib's compress() writes the zlib format, which HTTP calls deflate.
  ASSERT_EQ(compress(reinterpret_cast<Bytef*>(packed.data()), &size,
                     reinterpret_cast<const Bytef*>(body.data()), static_cast<uLong>(body.size())),
            Z_OK);
  packed.resize(size);
  const int s = connect_to(server.port());
  send_all(s, "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Encoding: deflate\r\nContent-Length: " +
                  std::to_string(packed.size()) + "\r\n\r\n" + packed);
  std::string pending;
  EXPECT_EQ(read_response(s, pending), expected(body, "httplib"));
  // The connection stays in step for the next, plain request.
  const std::string plain = pattern(30000, 7);
  send_all(s, post(plain));
  EXPECT_EQ(read_response(s, pending), expected(plain, "socket"));
  close(s);
}

TEST(HttpConnection, AClientThatStopsHalfWayCostsOnlyItsConnection) {
  EchoServer server;
  const int quitter = connect_to(server.port());
  send_all(quitter, post(pattern(100000, 4)).substr(0, 50000));
  shutdown(quitter, SHUT_WR);  // the rest never comes
  std::string pending;
  const std::string answer = read_response(quitter, pending);
  EXPECT_TRUE(answer.empty() || answer.rfind("400", 0) == 0) << answer;
  close(quitter);
  const int s = connect_to(server.port());
  const std::string body = pattern(100000, 5);
  send_all(s, post(body));
  EXPECT_EQ(read_response(s, pending), expected(body, "socket"));
  close(s);
}

TEST(HttpConnection, StopEndsIdleKeepAliveConnections) {
  auto server = std::make_unique<EchoServer>();
  const int s = connect_to(server->port());
  std::string pending;
  send_all(s, post("x"));
  EXPECT_EQ(read_response(s, pending), expected("x", "socket"));
  const auto start = std::chrono::steady_clock::now();
  server.reset();  // stop() and join, with the connection idle between requests
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  char byte;
  EXPECT_EQ(recv(s, &byte, 1, 0), 0) << "the server closes the idle connection";
  close(s);
}

}  // namespace
}  // namespace cpudl::serve
