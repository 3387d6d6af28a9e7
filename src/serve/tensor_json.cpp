// KServe v2 JSON tensors (tensor_json.h).
#include "serve/tensor_json.h"

#include <cmath>
#include <nlohmann/json.hpp>

namespace cpudl::serve {

namespace {

using nlohmann::json;

std::string shape_string(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + (s[i] < 0 ? std::string("?") : std::to_string(s[i]));
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
  if (!data.is_number()) throw RequestError(400, field + ": expected numbers, found " + std::string(data.type_name()));
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

std::vector<Tensor> parse_infer_request(const std::string& body, const std::vector<TensorSpec>& inputs) {
  json request;
  try {
    request = json::parse(body);
  } catch (const json::exception& e) {
    throw RequestError(400, std::string("the body is not valid JSON: ") + e.what());
  }
  if (!request.is_object() || !request.contains("inputs") || !request["inputs"].is_array())
    throw RequestError(400, "inputs: expected an array of tensors");
  const json& given = request["inputs"];
  std::vector<Tensor> out(inputs.size());
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
      throw RequestError(400, at + ".name: the model has no input '" + name + "' (its inputs: " + names + ")");
    }
    const TensorSpec& spec = inputs[index];
    const std::string field = "input '" + name + "'";
    if (out[index].defined()) throw RequestError(400, field + " is given twice");
    if (!t.contains("datatype") || !t["datatype"].is_string() || t["datatype"].get<std::string>() != datatype_name(spec.dtype))
      throw RequestError(400, field + ".datatype: expected \"" + std::string(datatype_name(spec.dtype)) + "\"");
    if (!t.contains("shape") || !t["shape"].is_array())
      throw RequestError(400, field + ".shape: expected an array of integers");
    Shape shape;
    for (const json& d : t["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 1 || d.get<std::int64_t>() > (std::int64_t{1} << 31))
        throw RequestError(400, field + ".shape: dimensions must be integers from 1");
      shape.push_back(d.get<std::int64_t>());
    }
    bool fits = shape.size() == spec.shape.size();
    for (std::size_t d = 0; fits && d < shape.size(); ++d) fits = spec.shape[d] < 0 || spec.shape[d] == shape[d];
    if (!fits) throw RequestError(400, field + ".shape: " + shape_string(shape) + ", the model takes " + shape_string(spec.shape));
    if (!shape.empty()) {
      if (batch >= 0 && shape[0] != batch) throw RequestError(400, field + ".shape: every input must have the same batch");
      batch = shape[0];
    }
    std::int64_t count = 1;
    for (std::int64_t d : shape) {
      count *= d;
      if (count > (std::int64_t{1} << 28)) throw RequestError(413, field + ": too many elements");
    }
    if (!t.contains("data")) throw RequestError(400, field + ".data: missing");
    const auto limit = static_cast<std::size_t>(count);
    Tensor tensor = Tensor::empty(shape, spec.dtype);
    if (spec.dtype == DType::f32) {
      std::vector<float> values;
      values.reserve(limit);
      flatten(t["data"], values, field + ".data", limit);
      if (values.size() != limit)
        throw RequestError(400, field + ".data: " + std::to_string(values.size()) + " values, the shape holds " + std::to_string(limit));
      std::copy(values.begin(), values.end(), tensor.data());
    } else if (spec.dtype == DType::i64) {
      std::vector<std::int64_t> values;
      values.reserve(limit);
      flatten(t["data"], values, field + ".data", limit);
      if (values.size() != limit)
        throw RequestError(400, field + ".data: " + std::to_string(values.size()) + " values, the shape holds " + std::to_string(limit));
      std::copy(values.begin(), values.end(), tensor.data_as<std::int64_t>());
    } else {
      throw RequestError(400, field + ": inputs of type " + std::string(datatype_name(spec.dtype)) + " are not served");
    }
    out[index] = tensor;
  }
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (!out[i].defined()) throw RequestError(400, "inputs: the model's input '" + inputs[i].name + "' is missing");
  return out;
}

std::string infer_response(const std::string& model, const std::vector<TensorSpec>& specs,
                           const std::vector<Tensor>& outputs) {
  json outs = json::array();
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& t = outputs[i];
    json data = json::array();
    const Tensor c = t.contiguous();
    if (t.dtype() == DType::f32) {
      for (std::int64_t k = 0; k < c.numel(); ++k) {
        const float v = c.data()[k];
        data.push_back(std::isfinite(v) ? json(v) : json(nullptr));
      }
    } else if (t.dtype() == DType::i64) {
      for (std::int64_t k = 0; k < c.numel(); ++k) data.push_back(c.data_as<std::int64_t>()[k]);
    }
    outs.push_back({{"name", i < specs.size() ? specs[i].name : "output" + std::to_string(i)},
                    {"datatype", datatype_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data", std::move(data)}});
  }
  return json{{"model_name", model}, {"outputs", std::move(outs)}}.dump();
}

}  // namespace cpudl::serve
