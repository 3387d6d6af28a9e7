// serve/tensor_json.h: a request's values come out where a tensor can borrow them -- JSON values
// in 64-byte aligned vectors, binary data as a view of the body's own bytes -- and equal what was
// sent.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "serve/tensor_json.h"

namespace {

using namespace cpudl::serve;

const std::vector<TensorSpec> kInputs = {{"x", cpudl::DType::f32, {-1, 3}},
                                         {"ids", cpudl::DType::i64, {-1, 2}}};

TEST(TensorJson, JsonValuesAreAlignedForATensorToBorrow) {
  const std::string body =
      R"({"inputs":[{"name":"ids","shape":[2,2],"datatype":"INT64","data":[[1,2],[3,-4]]},)"
      R"({"name":"x","shape":[2,3],"datatype":"FP32","data":[0.5,1,2,3,4,-5.25]}]})";
  const InferRequest r = parse_infer_request(body, kNoBinary, kInputs);
  ASSERT_EQ(r.inputs.size(), 2u);
  EXPECT_EQ(r.inputs[0].f32, (TensorVector<float>{0.5f, 1, 2, 3, 4, -5.25f}));
  EXPECT_EQ(r.inputs[1].i64, (TensorVector<std::int64_t>{1, 2, 3, -4}));
  EXPECT_TRUE(r.inputs[0].raw.empty());
  EXPECT_EQ(r.inputs[0].elements(), 6u);
  EXPECT_EQ(r.inputs[1].elements(), 4u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.inputs[0].f32.data()) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(r.inputs[1].i64.data()) % 64, 0u);
}

TEST(TensorJson, BinaryDataIsAViewOfTheBodyInInputOrder) {
  const std::string header =
      R"({"inputs":[{"name":"x","shape":[1,3],"datatype":"FP32","parameters":{"binary_data_size":12}},)"
      R"({"name":"ids","shape":[1,2],"datatype":"INT64","parameters":{"binary_data_size":16}}]})";
  const float x[3] = {1.5f, -2, 3};
  const std::int64_t ids[2] = {7, -9};
  std::string body = header;
  body.append(reinterpret_cast<const char*>(x), sizeof x);
  body.append(reinterpret_cast<const char*>(ids), sizeof ids);
  const InferRequest r = parse_infer_request(body, header.size(), kInputs);
  ASSERT_EQ(r.inputs.size(), 2u);
  // Views into the body, not copies: x right after the JSON, ids after x.
  EXPECT_EQ(r.inputs[0].raw.data(), body.data() + header.size());
  EXPECT_EQ(r.inputs[0].raw.size(), sizeof x);
  EXPECT_EQ(r.inputs[1].raw.data(), body.data() + header.size() + sizeof x);
  EXPECT_EQ(r.inputs[1].elements(), 2u);
  EXPECT_TRUE(r.inputs[0].f32.empty());
  std::int64_t got[2];
  std::memcpy(got, r.inputs[1].raw.data(), sizeof got);
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[1], -9);
}

}  // namespace
