// Reads an ONNX model (protobuf, Debian's libonnx-dev schema) into the runtime's Graph, checking
// everything a corrupted or hostile file could get wrong: the protobuf itself, opsets, element
// types, tensor sizes against shapes, external-data paths and ranges, undefined inputs, cycles,
// and operators outside op_list.h (all listed at once).
#pragma once

#include <filesystem>
#include <string>

#include "infer/graph.h"

namespace cpudl::infer {

Graph load_onnx(const std::filesystem::path& path);
// `bytes`: the serialized ModelProto; external data files are looked up in `external_data_dir`.
Graph parse_onnx(const std::string& bytes, const std::string& name_for_errors,
                 const std::filesystem::path& external_data_dir);

}  // namespace cpudl::infer
