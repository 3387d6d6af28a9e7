// Graph helpers: attributes and host tensors.
#include <cstring>

#include "cpudl/error.h"
#include "infer/graph.h"

namespace cpudl::infer {

HostTensor HostTensor::zeros(DType dtype, const Shape& shape) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.bytes.assign(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype), std::byte{0});
  return t;
}

std::vector<std::int64_t> HostTensor::as_int64() const {
  std::vector<std::int64_t> out(static_cast<std::size_t>(numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (dtype) {
      case DType::i64:
        out[i] = data<std::int64_t>()[i];
        break;
      case DType::i32:
        out[i] = data<std::int32_t>()[i];
        break;
      case DType::i8:
        out[i] = data<std::int8_t>()[i];
        break;
      case DType::u8:
        out[i] = data<std::uint8_t>()[i];
        break;
      case DType::f32:
        out[i] = static_cast<std::int64_t>(data<float>()[i]);
        break;
      default:
        throw Error("internal: integer view of a " + std::string(dtype_name(dtype)) + " tensor");
    }
  }
  return out;
}

std::vector<float> HostTensor::as_float() const {
  if (dtype == DType::f32) return std::vector<float>(data<float>(), data<float>() + numel());
  std::vector<float> out;
  for (std::int64_t v : as_int64()) out.push_back(static_cast<float>(v));
  return out;
}

std::int64_t Node::get_int(const std::string& key, std::int64_t fallback) const {
  const auto it = attributes.find(key);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::i)
    throw Error(label() + ": attribute '" + key + "' must be an int");
  return it->second.i;
}

float Node::get_float(const std::string& key, float fallback) const {
  const auto it = attributes.find(key);
  if (it == attributes.end()) return fallback;
  if (it->second.kind == Attribute::Kind::i) return static_cast<float>(it->second.i);
  if (it->second.kind != Attribute::Kind::f)
    throw Error(label() + ": attribute '" + key + "' must be a float");
  return it->second.f;
}

std::string Node::get_string(const std::string& key, const std::string& fallback) const {
  const auto it = attributes.find(key);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::s)
    throw Error(label() + ": attribute '" + key + "' must be a string");
  return it->second.s;
}

std::vector<std::int64_t> Node::get_ints(const std::string& key, std::vector<std::int64_t> fallback) const {
  const auto it = attributes.find(key);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::ints)
    throw Error(label() + ": attribute '" + key + "' must be a list of ints");
  return it->second.ints;
}

std::string Node::label() const { return op + " node '" + name + "'"; }

}  // namespace cpudl::infer
