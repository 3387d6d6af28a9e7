// The sweep of wrong invocations (issue 43): misspelt commands and flags, values out of range,
// missing arguments, files of the wrong kind, missing, truncated or corrupt. Each must answer with
// one "cpudl: error:" line that says what is wrong (the expected words below), exit 2 for usage
// and 1 for data, print nothing on stdout, and never let a library's own text through
// (basic_filebuf, protobuf internals, CLI11's "not in range ... 1797693..." or "required ... missing").
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli_sandbox.h"

namespace {

namespace fs = std::filesystem;
using cpudl::testing::slurp;
using WrongInvocations = cpudl::testing::CliSandbox;

const std::string kOnnx = std::string(CPUDL_FIXTURES_DIR) + "/../onnx/";
const std::string kModel = kOnnx + "lenet5_opset17.onnx", kInput = kOnnx + "lenet5_opset17.input.npy";
const std::string kTiny = std::string(CPUDL_FIXTURES_DIR) + "/../golden/mnist_tiny";
const std::string kStateDict = std::string(CPUDL_FIXTURES_DIR) + "/../golden/model_lenet5.safetensors";
const std::string kLlm = std::string(CPUDL_LLM_FIXTURES_DIR) + "/tiny-llama-q8_0.gguf";

struct Case {
  std::string args, expected;
  int code;
};

TEST_F(WrongInvocations, EachGetsOneClearLineTheRightExitCodeAndNoLibraryText) {
  std::ofstream(path("junk.onnx")) << "this is not a model";
  const std::string model_bytes = slurp(kModel);
  std::ofstream(path("truncated.onnx"), std::ios::binary) << model_bytes.substr(0, model_bytes.size() / 3);
  std::ofstream(path("bad.npy"), std::ios::binary) << "x";
  std::ofstream(path("empty.gguf"), std::ios::binary) << "";
  fs::create_directories(path("adir"));
  const std::string m = " " + kModel, in = " --input " + kInput;
  const std::vector<Case> cases = {
      // the command line itself: exit 2
      {"", "no command given", 2},
      {"trian", "unknown command 'trian' (did you mean train?)", 2},
      {"bench gemmm", "bench: unknown command 'gemmm' (did you mean gemm?)", 2},
      {"bench", "bench: give a command: peak gemm conv model llm allreduce", 2},
      {"train --epoch 3 --data " + kTiny, "train: unknown option --epoch (did you mean --epochs?)", 2},
      {"run" + m + " --thread 2", "run: unknown option --thread (did you mean --threads?)", 2},
      {"doctor --jsn", "doctor: unknown option --jsn (did you mean --json?)", 2},
      {"bench gemm --sise 3", "bench gemm: unknown option --sise (did you mean --sizes?)", 2},
      {"serve --modle a=" + kModel, "serve: unknown option --modle (did you mean --model?)", 2},
      {"quantize a b --tpye q4_0", "quantize: unknown option --tpye (did you mean --type?)", 2},
      {"generate -m " + kLlm + " --xyzzy 1", "generate: unknown option --xyzzy", 2},
      {"doctor --measure 3", "doctor: unexpected argument 3", 2},
      {"train extra", "train: unexpected argument extra", 2},
      {"train --epochs 0", "train: --epochs: 0 is outside 1..100000", 2},
      {"train --epochs 2.5", "--epochs: 2.5 is not a whole number (expected one in 1..100000)", 2},
      {"train --lr -1", "--lr: -1 is not positive (expected a number above 0)", 2},
      {"train --lr abc", "--lr: abc is not a number", 2},
      {"train --epochs", "train: --epochs needs a value", 2},
      {"train --batch 0", "--batch: 0 is outside 1..1048576", 2},
      {"train --model vgg", "--model: vgg not in {simplecnn,lenet5,mlp,resnet18}", 2},
      {"train --optimizer rmsprop", "--optimizer: rmsprop not in {adam,adamw,sgd}", 2},
      {"train --data " + kTiny + " --out " + path("adir"), "is a directory: give the file to write", 2},
      {"train --data " + kTiny + " --threads 0 --out " + path("m.safetensors"),
       "--threads: 0 is outside 1..4096", 2},
      {"run", "run: missing MODEL", 2},
      {"run" + m, "give --input FILE.npy", 2},
      {"run" + m + in + " --batch 0", "--batch: 0 is outside", 2},
      {"run" + m + in + " --precision fp8", "--precision: fp8 not in {auto,fp32,bf16}", 2},
      {"run" + m + in + " --max-loop-iterations 0", "--max-loop-iterations: 0 is outside 1..1000000000", 2},
      {"info", "info: missing MODEL", 2},
      {"serve", "serve: --model is required", 2},
      {"serve --model x", "--model x: expected NAME=PATH", 2},
      {"serve --model a=" + kModel + " --port 70000", "--port: 70000 is outside 0..65535", 2},
      {"quantize a", "quantize: missing OUTPUT", 2},
      {"quantize" + m + " " + path("o.onnx") + " --mode turbo",
       "--mode 'turbo': expected dynamic, static or bf16", 2},
      {"quantize" + m + " " + path("o.onnx") + " --mode static",
       "--mode static calibrates the activations: give --calib", 2},
      {"quantize" + m + m + " --mode dynamic", "is the same file as the input", 2},
      {"generate -m", "generate: --model needs a value", 2},
      {"generate -m " + kLlm, "give the prompt as -p TEXT, -f FILE (- for standard input) or --tokens", 2},
      {"generate -m " + kLlm + " -p hi --ctx 0", "--ctx: 0 is outside 1..16777216", 2},
      {"generate -m " + kLlm + " -p hi --cache-type q2", "--cache-type 'q2': expected f16, f32 or q8_0", 2},
      {"generate -m " + kLlm + " -p hi --temp -1", "--temp: -1 is outside 0..100", 2},
      {"chat -m " + kLlm + " --template nope", "--template 'nope': expected chatml, llama2, llama3 or phi3",
       2},
      {"tokenize -m " + kLlm, "give the text as an argument or as -f FILE", 2},
      {"bench gemm --sizes abc", "--sizes abc: expected a comma-separated list of positive integers", 2},
      {"bench peak --threads 0", "--threads 0: expected a comma-separated list of positive integers", 2},
      {"bench model --model vgg", "--model vgg: not a zoo model (simplecnn, lenet5, mlp, resnet18)", 2},
      // files: missing, of the wrong kind, truncated or corrupt: exit 1
      {"run " + path("junk.onnx") + in, "junk.onnx: not a valid ONNX model", 1},
      {"run " + path("truncated.onnx") + in, "truncated.onnx: not a valid ONNX model", 1},
      {"run" + m + " --input " + path("bad.npy"), "bad.npy: not a .npy file", 1},
      {"run" + m + " --input " + path("missing.npy"), "missing.npy: cannot open (No such file or directory)",
       1},
      {"run " + path("adir") + in, "adir: is a directory, expected a file", 1},
      {"run " + kInput + in, "a NumPy .npy array (an input for cpudl run --input), not an ONNX model", 1},
      {"info " + path("missing.onnx"), "missing.onnx: cannot open", 1},
      {"info " + path("adir"), "adir: is a directory, expected a file", 1},
      {"run " + kLlm,
       "a GGUF language model (cpudl generate, chat, bench llm, info, quantize and serve take it), not an "
       "ONNX model",
       1},
      {"eval --model" + m + " --data " + kTiny,  // PyTorch's export: no cpudl metadata_props
       "an ONNX model that does not say how its inputs are normalised", 1},
      {"export" + m + " " + path("o.onnx"),
       "an ONNX model (cpudl run, info, detect, quantize and serve take it), not a safetensors file", 1},
      {"eval --model " + path("missing.safetensors") + " --data " + kTiny, "missing.safetensors: cannot open",
       1},
      {"eval --model " + kStateDict + " --data " + kTiny,
       "(not a cpudl model file; train one with cpudl train)", 1},
      {"predict --model " + kLlm + " x.png", "a GGUF language model", 1},
      {"train --data " + path("nowhere") + " --out " + path("m.safetensors"), "no such data directory", 1},
      {"train --data " + kTiny + " --resume " + path("missing.ckpt") + " --out " + path("m.safetensors"),
       "missing.ckpt: cannot open", 1},
      {"generate -m " + path("missing.gguf") + " -p hi", "missing.gguf: cannot open", 1},
      {"generate -m" + m + " -p hi",
       "an ONNX model (cpudl run, info, detect, quantize and serve take it), not a GGUF "
       "file",
       1},
      {"generate -m " + path("empty.gguf") + " -p hi", "empty.gguf: not a GGUF file", 1},
      {"quantize " + path("missing.gguf") + " " + path("o.gguf") + " --type q4_0",
       "missing.gguf: cannot open", 1},
      {"serve --model a=" + path("missing.onnx") + " --port 0", "missing.onnx: cannot open", 1},
      {"detect" + m + " " + path("missing.png"), "missing.png: cannot open", 1},
      {"bench llm -m " + path("missing.gguf"), "missing.gguf: cannot open", 1},
  };
  ASSERT_GE(cases.size(), 50u);
  for (const Case& c : cases) {
    const auto r = run(c.args);
    EXPECT_EQ(r.exit_code, c.code) << "cpudl " << c.args << "\n" << r.err;
    EXPECT_EQ(r.err.rfind("cpudl: error: ", 0), 0u) << "cpudl " << c.args << "\n" << r.err;
    const std::string first = r.err.substr(0, r.err.find('\n'));
    EXPECT_NE(first.find(c.expected), std::string::npos) << "cpudl " << c.args << "\n" << r.err;
    EXPECT_EQ(r.out, "") << "cpudl " << c.args;
    for (const char* raw :
         {"basic_filebuf", "std::", "protobuf internal", "terminate called", "what():", "1797693",
          "1 required", "The following argument", "Could not convert", "Segmentation"})
      EXPECT_EQ(r.err.find(raw), std::string::npos) << raw << " in the answer to cpudl " << c.args << "\n"
                                                    << r.err;
  }
}

}  // namespace
