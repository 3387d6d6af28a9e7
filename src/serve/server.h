// `cpudl serve`: ONNX, cpudl and GGUF models behind one HTTP server (cpp-httplib, Debian's
// libcpp-httplib-dev, as llama.cpp's llama-server uses): the KServe v2 / Open Inference Protocol
// for tensors, image classification for cpudl's models, the OpenAI completions and chat API for
// LLMs, and Prometheus metrics. docs/SERVING.md describes every endpoint.
#pragma once

#include <string>
#include <vector>

namespace cpudl::serve {

struct ServeOptions {
  std::vector<std::string> models;  // NAME=PATH
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port (printed)
  int threads = 0;       // compute threads per run (0: the process default); the governor's ceiling
  bool governor = true;  // runtime/governor.h: fewer threads under contention, 503 when too hot
  bool repack = true;    // GGUF models: llm::ModelLoadOptions::repack
  int max_batch = 16;
  double batch_timeout_ms = 2;
  int queue = 64;
  int parallel = 1;
  int ctx = 0;
  std::string api_key;
  double max_body_mb = 16;
  double request_timeout_s = 60;
  double drain_timeout_s = 30;
};

// Loads every model (an error naming the one that fails, before the port is bound), binds,
// prints `listening on http://HOST:PORT`, serves until SIGTERM or SIGINT, then refuses new work
// (readiness 503), lets what is in flight finish within drain_timeout_s and returns 0.
int serve(const ServeOptions& options);

}  // namespace cpudl::serve
