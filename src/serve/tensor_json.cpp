// KServe v2 JSON tensors (tensor_json.h).
#include "serve/tensor_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace cpudl::serve {

namespace {

using nlohmann::json;

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i)
    out += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
  return out + "]";
}

// Flattens `data` (numbers, or nested arrays of them) into out, failing on anything else.
template <class T>
void flatten(const json& data, std::vector<T>& out, const std::string& field, std::size_t limit) {
  if (data.is_array()) {
    for (const json& item : data) {
      flatten(item, out, field, limit);
      if (out.size() > limit) throw RequestError(400, field + ": more values than the shape holds");
    }
    return;
  }
  if (!data.is_number())
    throw RequestError(400, field + ": expected numbers, found " + std::string(data.type_name()));
  if constexpr (std::is_same_v<T, float>) {
    out.push_back(data.get<float>());
  } else {
    if (!data.is_number_integer()) throw RequestError(400, field + ": expected integers for INT64");
    out.push_back(data.get<std::int64_t>());
  }
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

std::vector<TensorValues> parse_infer_request(const std::string& body,
                                              const std::vector<TensorSpec>& inputs) {
  json request;
  try {
    request = json::parse(body);
  } catch (const json::exception& e) {
    throw RequestError(400, std::string("the body is not valid JSON: ") + e.what());
  }
  if (!request.is_object() || !request.contains("inputs") || !request["inputs"].is_array())
    throw RequestError(400, "inputs: expected an array of tensors");
  const json& given = request["inputs"];
  std::vector<TensorValues> out(inputs.size());
  std::vector<bool> given_once(inputs.size(), false);
  std::int64_t batch = -1;
  for (std::size_t k = 0; k < given.size(); ++k) {
    const std::string at = "inputs[" + std::to_string(k) + "]";
    const json& t = given[k];
    if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
      throw RequestError(400, at + ".name: expected a string");
    const std::string name = t["name"].get<std::string>();
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
    const std::string field = "input '" + name + "'";
    if (given_once[index]) throw RequestError(400, field + " is given twice");
    given_once[index] = true;
    if (!t.contains("datatype") || !t["datatype"].is_string() ||
        t["datatype"].get<std::string>() != datatype_name(spec.dtype))
      throw RequestError(400,
                         field + ".datatype: expected \"" + std::string(datatype_name(spec.dtype)) + "\"");
    if (!t.contains("shape") || !t["shape"].is_array())
      throw RequestError(400, field + ".shape: expected an array of integers");
    Shape shape;
    for (const json& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 1 ||
          d.get<std::int64_t>() > (std::int64_t{1} << 31))
        throw RequestError(400, field + ".shape: dimensions must be integers from 1");
      shape.push_back(d.get<std::int64_t>());
    }
    bool fits = shape.size() == spec.shape.size();
    for (std::size_t d = 0; fits && d < shape.size(); ++d)
      fits = spec.shape[d] < 0 || spec.shape[d] == shape[d];
    if (!fits)
      throw RequestError(
          400, field + ".shape: " + shape_string(shape) + ", the model takes " + shape_string(spec.shape));
    if (!shape.empty()) {
      if (batch >= 0 && shape[0] != batch)
        throw RequestError(400, field + ".shape: every input must have the same batch");
      batch = shape[0];
    }
    std::int64_t count = 1;
    for (std::int64_t d : shape) {
      count *= d;
      if (count > (std::int64_t{1} << 28)) throw RequestError(413, field + ": too many elements");
    }
    if (!t.contains("data")) throw RequestError(400, field + ".data: missing");
    const auto limit = static_cast<std::size_t>(count);
    TensorValues& values = out[index];
    values.dtype = spec.dtype;
    values.shape = shape;
    if (spec.dtype == DType::f32) {
      values.f32.reserve(limit);
      flatten(t["data"], values.f32, field + ".data", limit);
    } else if (spec.dtype == DType::i64) {
      values.i64.reserve(limit);
      flatten(t["data"], values.i64, field + ".data", limit);
    } else {
      throw RequestError(
          400, field + ": inputs of type " + std::string(datatype_name(spec.dtype)) + " are not served");
    }
    const std::size_t got = spec.dtype == DType::f32 ? values.f32.size() : values.i64.size();
    if (got != limit)
      throw RequestError(
          400, field + ".data: " + std::to_string(got) + " values, the shape holds " + std::to_string(limit));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!given_once[i])
      throw RequestError(400, "inputs: the model's input '" + inputs[i].name + "' is missing");
  return out;
}

std::string infer_response(const std::string& model, const std::vector<std::string>& names,
                           const std::vector<TensorValues>& outputs) {
  json outs = json::array();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const TensorValues& t = outputs[i];
    json data = json::array();
    for (const float v : t.f32) data.push_back(std::isfinite(v) ? json(v) : json(nullptr));
    for (const std::int64_t v : t.i64) data.push_back(v);
    outs.push_back({{"name", i < names.size() ? names[i] : "output" + std::to_string(i)},
                    {"datatype", datatype_name(t.dtype)},
                    {"shape", t.shape},
                    {"data", std::move(data)}});
  }
  return json{{"model_name", model}, {"outputs", std::move(outs)}}.dump();
}

}  // namespace cpudl::serve
