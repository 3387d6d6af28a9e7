// cpudl serve's connection loop and stream under cpp-httplib (http_connection.h says why).
#include "serve/http_connection.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>

namespace cpudl::serve {

namespace {

// The stream of the connection this thread serves (httplib runs a connection's requests, and their
// handlers, on the thread that owns it).
thread_local ConnectionStream* t_stream = nullptr;

void address_of(int sock, bool peer, std::string& ip, int& port) {
  sockaddr_storage address{};
  socklen_t length = sizeof address;
  auto* a = reinterpret_cast<sockaddr*>(&address);
  if ((peer ? getpeername(sock, a, &length) : getsockname(sock, a, &length)) != 0) return;
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(a, length, host, sizeof host, service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) !=
      0)
    return;
  ip = host;
  port = std::atoi(service);
}

}  // namespace

ConnectionStream::ConnectionStream(int sock, std::time_t read_timeout_s, std::time_t write_timeout_s)
    : sock_(sock), read_timeout_s_(read_timeout_s), write_timeout_s_(write_timeout_s) {}

bool ConnectionStream::wait(short events, std::time_t timeout_s) const {
  pollfd p{sock_, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
    if (r >= 0) return r > 0;  // readiness, or an error or hang-up that the next call reports
    if (errno != EINTR) return false;
  }
}

bool ConnectionStream::is_readable() const { return begin_ < end_ || wait(POLLIN, read_timeout_s_); }

bool ConnectionStream::is_writable() const {
  // Writable, and the client still there: a streamed generation stops when it has gone. A client
  // that closed shows as readable with nothing to read.
  if (broken_ || !wait(POLLOUT, write_timeout_s_)) return false;
  pollfd p{sock_, POLLIN, 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  char byte;
  const ssize_t n = ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR));
}

ssize_t ConnectionStream::read(char* ptr, std::size_t size) {
  if (size == 0) return 0;
  if (begin_ < end_) {
    const std::size_t n = std::min(size, end_ - begin_);
    std::memcpy(ptr, buffer_ + begin_, n);
    begin_ += n;
    return static_cast<ssize_t>(n);
  }
  // Nonblocking first: a request that has arrived is read without a poll() before it.
  char* into = size >= kBuffer ? ptr : buffer_;
  const std::size_t room = size >= kBuffer ? size : kBuffer;
  for (;;) {
    const ssize_t n = ::recv(sock_, into, room, MSG_DONTWAIT);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait(POLLIN, read_timeout_s_)) return -1;
      continue;
    }
    if (n <= 0 || into == ptr) return n;
    begin_ = 0;
    end_ = static_cast<std::size_t>(n);
    return read(ptr, size);
  }
}

bool ConnectionStream::read_exact(char* dst, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    // read() copies what its buffer holds, then reads straight into dst when what remains is at
    // least the buffer's size (a body's bulk), else through the buffer (whose excess, the next
    // request of a pipelining client, stays for it).
    const ssize_t r = read(dst + got, n - got);
    if (r <= 0) {
      broken_ = true;
      return false;
    }
    got += static_cast<std::size_t>(r);
  }
  return true;
}

ssize_t ConnectionStream::write(const char* ptr, std::size_t size) {
  std::size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(sock_, ptr + sent, size - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
    } else if (errno == EINTR) {
      continue;
    } else if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait(POLLOUT, write_timeout_s_)) {
      continue;
    } else {
      broken_ = true;
      return -1;
    }
  }
  return static_cast<ssize_t>(size);
}

bool ConnectionStream::wait_for_request(int timeout_ms) {
  if (begin_ < end_) return true;
  pollfd p{sock_, POLLIN, 0};
  for (;;) {
    const int r = ::poll(&p, 1, timeout_ms);
    if (r >= 0) return r > 0;
    if (errno != EINTR) return false;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  address_of(sock_, true, ip, port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  address_of(sock_, false, ip, port);
}

bool HttpServer::process_and_close_socket(int sock) {
  bool ok = true;
  {
    ConnectionStream stream(sock, read_timeout_sec_, write_timeout_sec_);
    t_stream = &stream;
    // The wait for each request is sliced so that a stopping server (svr_sock_ closed) ends its
    // idle connections within a slice; a request that arrives ends the wait at once.
    constexpr int kSliceMs = 100;
    auto next_request = [&] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
      while (svr_sock_ != INVALID_SOCKET) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now())
                .count();
        if (left <= 0) return false;
        if (stream.wait_for_request(static_cast<int>(std::min<long long>(left, kSliceMs)))) return true;
      }
      return false;
    };
    for (std::size_t left = keep_alive_max_count_; left > 0 && next_request(); --left) {
      bool closed = false;
      ok = process_request(stream, left == 1, closed, nullptr);
      if (!ok || closed || stream.broken()) break;
    }
    t_stream = nullptr;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ok;
}

ConnectionStream* body_stream(const httplib::Request& req) {
  // Chunked bodies, and compressed ones (httplib inflates gzip, deflate and brotli, as Triton's
  // and KServe's clients may send), are httplib's to read.
  if (t_stream == nullptr || req.has_header("Transfer-Encoding")) return nullptr;
  if (const std::string coding = req.get_header_value("Content-Encoding");
      !coding.empty() && coding != "identity")
    return nullptr;
  const std::string length = req.get_header_value("Content-Length");
  std::size_t n = 0;
  const auto [end, ec] = std::from_chars(length.data(), length.data() + length.size(), n);
  return length.empty() || ec != std::errc() || end != length.data() + length.size() ? nullptr : t_stream;
}

}  // namespace cpudl::serve
