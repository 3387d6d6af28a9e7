// KServe v2 JSON tensors (tensor_json.h).
#include "serve/tensor_json.h"

#include <simdjson.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "serve/reuse_pool.h"

namespace cpudl::serve {

namespace {

using nlohmann::json;
namespace dom = simdjson::dom;

// Pooled parsers are kept while their buffers together serve documents up to this size (a batch
// of 16 ResNet-18 images as JSON is 24 MB; a parser holds about five times its capacity).
constexpr std::size_t kKeptParserBytes = std::size_t{64} << 20;

const char* type_name(dom::element_type t) {
  switch (t) {
    case dom::element_type::ARRAY:
      return "array";
    case dom::element_type::OBJECT:
      return "object";
    case dom::element_type::STRING:
      return "string";
    case dom::element_type::BOOL:
      return "boolean";
    case dom::element_type::NULL_VALUE:
      return "null";
    default:
      return "number";
  }
}

// Flattens `data` (numbers, or nested arrays of them) into out, failing on anything else.
template <class T>
void flatten(dom::element data, TensorVector<T>& out, const std::string& field, std::size_t limit) {
  const dom::element_type type = data.type();
  if (type == dom::element_type::ARRAY) {
    for (dom::element item : dom::array(data)) {
      if (item.type() == dom::element_type::ARRAY) {
        flatten(item, out, field, limit);
      } else {
        if (out.size() == limit) throw RequestError(400, field + ": more values than the shape holds");
        flatten(item, out, field, limit);
      }
    }
    return;
  }
  if constexpr (std::is_same_v<T, float>) {
    switch (type) {
      case dom::element_type::DOUBLE:
        out.push_back(static_cast<float>(double(data)));
        return;
      case dom::element_type::INT64:
        out.push_back(static_cast<float>(std::int64_t(data)));
        return;
      case dom::element_type::UINT64:
        out.push_back(static_cast<float>(std::uint64_t(data)));
        return;
      default:
        throw RequestError(400, field + ": expected numbers, found " + type_name(type));
    }
  } else {
    if (type != dom::element_type::INT64)
      throw RequestError(400, type == dom::element_type::DOUBLE || type == dom::element_type::UINT64
                                  ? field + ": expected integers for INT64"
                                  : field + ": expected numbers, found " + type_name(type));
    out.push_back(std::int64_t(data));
  }
}

// obj[key], or an empty result when absent.
bool field(dom::object obj, std::string_view key, dom::element& out) {
  return obj[key].get(out) == simdjson::SUCCESS;
}

// A tensor's raw little-endian values taken from the binary part of the body (x86-64 is
// little-endian, as the extension): a view of them, not a copy.
std::string_view take_binary(std::string_view& rest, std::size_t bytes, std::size_t value_size,
                             const std::string& field, std::size_t count) {
  if (bytes != count * value_size)
    throw RequestError(400, field + ".parameters.binary_data_size: " + std::to_string(bytes) +
                                " bytes, the shape holds " + std::to_string(count) + " values of " +
                                std::to_string(value_size) + " bytes");
  if (rest.size() < bytes)
    throw RequestError(400, field + ".parameters.binary_data_size: " + std::to_string(bytes) +
                                " bytes, but only " + std::to_string(rest.size()) +
                                " bytes of binary data remain in the body");
  const std::string_view taken = rest.substr(0, bytes);
  rest.remove_prefix(bytes);
  return taken;
}

}  // namespace

const char* datatype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "FP32";
    case DType::i64:
      return "INT64";
    case DType::i32:
      return "INT32";
    case DType::i8:
      return "INT8";
    case DType::u8:
      return "UINT8";
    case DType::bf16:
      return "BF16";
  }
  return "FP32";
}

static_assert(kJsonPadding == simdjson::SIMDJSON_PADDING);

InferRequest parse_infer_request(std::string_view body, std::size_t header_length,
                                 const std::vector<TensorSpec>& inputs, std::size_t readable_past_end) {
  if (header_length != kNoBinary && header_length > body.size())
    throw RequestError(400, "Inference-Header-Content-Length: " + std::to_string(header_length) +
                                " exceeds the body's " + std::to_string(body.size()) + " bytes");
  const std::string_view header = header_length == kNoBinary ? body : body.substr(0, header_length);
  std::string_view binary = header_length == kNoBinary ? std::string_view() : body.substr(header_length);
  // simdjson, not nlohmann::json, for requests: a 224x224 RGB image is 150,528 numbers, which the
  // DOM of nlohmann parsed in 40 ms; simdjson's takes about 6 (its number parser is exact, as
  // strtod). Parsers come from a small pool (reuse_pool.h): kept per connection thread instead,
  // each would hold buffers the size of the largest body it saw (megabytes, times hundreds of
  // threads); made per request, their buffers were page-faulted in every time.
  static ReusePool<dom::parser> parsers(8, kKeptParserBytes,
                                        [](const dom::parser& p) { return p.capacity(); });
  const auto parser = parsers.take();
  const bool in_place = body.size() - header.size() + readable_past_end >= kJsonPadding;
  dom::element request;
  if (const auto error = parser->parse(header.data(), header.size(), !in_place).get(request))
    throw RequestError(400, std::string("the body is not valid JSON: ") + simdjson::error_message(error));
  dom::object top;
  dom::array given;
  dom::element value;
  if (request.get(top) || !field(top, "inputs", value) || value.get(given))
    throw RequestError(400, "inputs: expected an array of tensors");
  InferRequest out;
  out.inputs.resize(inputs.size());
  dom::object parameters;
  if (field(top, "parameters", value) && !value.get(parameters) &&
      field(parameters, "binary_data_output", value))
    out.binary_outputs = value.is_bool() && bool(value);
  dom::array outputs;
  if (field(top, "outputs", value) && !value.get(outputs))
    for (dom::element o : outputs) {
      dom::object output, output_parameters;
      if (!o.get(output) && field(output, "parameters", value) && !value.get(output_parameters) &&
          field(output_parameters, "binary_data", value) && value.is_bool() && bool(value))
        out.binary_outputs = true;
    }
  std::vector<bool> given_once(inputs.size(), false);
  std::int64_t batch = -1;
  std::size_t k = 0;
  for (dom::element item : given) {
    const std::string at = "inputs[" + std::to_string(k++) + "]";
    dom::object t;
    std::string_view name_view;
    if (item.get(t) || !field(t, "name", value) || value.get(name_view))
      throw RequestError(400, at + ".name: expected a string");
    const std::string name(name_view);
    std::size_t index = inputs.size();
    for (std::size_t i = 0; i < inputs.size(); ++i)
      if (inputs[i].name == name) index = i;
    if (index == inputs.size()) {
      std::string names;
      for (const auto& spec : inputs) names += (names.empty() ? "" : ", ") + spec.name;
      throw RequestError(400,
                         at + ".name: the model has no input '" + name + "' (its inputs: " + names + ")");
    }
    const TensorSpec& spec = inputs[index];
    const std::string field_name = "input '" + name + "'";
    if (given_once[index]) throw RequestError(400, field_name + " is given twice");
    given_once[index] = true;
    std::string_view datatype;
    if (!field(t, "datatype", value) || value.get(datatype) || datatype != datatype_name(spec.dtype))
      throw RequestError(
          400, field_name + ".datatype: expected \"" + std::string(datatype_name(spec.dtype)) + "\"");
    dom::array shape_array;
    if (!field(t, "shape", value) || value.get(shape_array))
      throw RequestError(400, field_name + ".shape: expected an array of integers");
    Shape shape;
    for (dom::element d : shape_array) {
      std::int64_t n = 0;
      if (d.get(n) || n < 1 || n > (std::int64_t{1} << 31))
        throw RequestError(400, field_name + ".shape: dimensions must be integers from 1");
      shape.push_back(n);
    }
    bool fits = shape.size() == spec.shape.size();
    for (std::size_t d = 0; fits && d < shape.size(); ++d)
      fits = spec.shape[d] < 0 || spec.shape[d] == shape[d];
    if (!fits)
      throw RequestError(
          400, field_name + ".shape: " + shape_text(shape) + ", the model takes " + shape_text(spec.shape));
    if (!shape.empty()) {
      if (batch >= 0 && shape[0] != batch)
        throw RequestError(400, field_name + ".shape: every input must have the same batch");
      batch = shape[0];
    }
    std::int64_t count = 1;
    for (std::int64_t d : shape) {
      count *= d;
      if (count > (std::int64_t{1} << 28)) throw RequestError(413, field_name + ": too many elements");
    }
    if (spec.dtype != DType::f32 && spec.dtype != DType::i64)
      throw RequestError(
          400, field_name + ": inputs of type " + std::string(datatype_name(spec.dtype)) + " are not served");
    const auto limit = static_cast<std::size_t>(count);
    TensorValues& values = out.inputs[index];
    values.dtype = spec.dtype;
    values.shape = shape;
    // Binary data: parameters.binary_data_size bytes from the binary part, in input order.
    dom::object input_parameters;
    std::uint64_t binary_size = 0;
    if (field(t, "parameters", value) && !value.get(input_parameters) &&
        field(input_parameters, "binary_data_size", value)) {
      if (value.get(binary_size))
        throw RequestError(400, field_name + ".parameters.binary_data_size: expected a byte count");
      if (header_length == kNoBinary)
        throw RequestError(400, field_name +
                                    ".parameters.binary_data_size: binary data needs the "
                                    "Inference-Header-Content-Length header");
      values.raw = take_binary(binary, binary_size, dtype_size(spec.dtype), field_name, limit);
      continue;
    }
    if (!field(t, "data", value)) throw RequestError(400, field_name + ".data: missing");
    if (spec.dtype == DType::f32) {
      values.f32.reserve(limit);
      flatten(value, values.f32, field_name + ".data", limit);
    } else {
      values.i64.reserve(limit);
      flatten(value, values.i64, field_name + ".data", limit);
    }
    const std::size_t got = spec.dtype == DType::f32 ? values.f32.size() : values.i64.size();
    if (got != limit)
      throw RequestError(400, field_name + ".data: " + std::to_string(got) + " values, the shape holds " +
                                  std::to_string(limit));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!given_once[i])
      throw RequestError(400, "inputs: the model's input '" + inputs[i].name + "' is missing");
  if (!binary.empty())
    throw RequestError(400, "the body has " + std::to_string(binary.size()) +
                                " bytes of binary data that no input's parameters.binary_data_size claims");
  return out;
}

InferResponse infer_response(const std::string& model, const std::vector<std::string>& names,
                             const std::vector<TensorValues>& outputs, bool binary) {
  json outs = json::array();
  std::string raw;
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const TensorValues& t = outputs[i];
    json o = {{"name", i < names.size() ? names[i] : "output" + std::to_string(i)},
              {"datatype", datatype_name(t.dtype)},
              {"shape", t.shape}};
    if (binary) {
      const std::size_t bytes = t.f32.size() * sizeof(float) + t.i64.size() * sizeof(std::int64_t);
      o["parameters"] = {{"binary_data_size", bytes}};
      raw.append(reinterpret_cast<const char*>(t.f32.data()), t.f32.size() * sizeof(float));
      raw.append(reinterpret_cast<const char*>(t.i64.data()), t.i64.size() * sizeof(std::int64_t));
    } else {
      json data = json::array();
      for (const float v : t.f32) data.push_back(std::isfinite(v) ? json(v) : json(nullptr));
      for (const std::int64_t v : t.i64) data.push_back(v);
      o["data"] = std::move(data);
    }
    outs.push_back(std::move(o));
  }
  InferResponse r;
  r.body = json{{"model_name", model}, {"outputs", std::move(outs)}}.dump();
  if (binary) {
    r.header_length = r.body.size();
    r.body += raw;
  }
  return r;
}

}  // namespace cpudl::serve
