// Zeroed page mappings: they read as zero when made and after clear(), hold every byte asked
// for, and huge ones start on a 2 MiB boundary where they are mappings (not under ASan).
#include "runtime/zeroed_pages.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>

namespace cpudl {
namespace {

bool all_zero(const std::uint8_t* p, std::size_t n) {
  return std::all_of(p, p + n, [](std::uint8_t b) { return b == 0; });
}

TEST(ZeroedPages, ReadZeroWhenMadeAndAfterClear) {
  for (const std::size_t n : {std::size_t{1}, std::size_t{4097}, std::size_t{5} << 20}) {
    ZeroedPages<std::uint8_t> pages(n);
    ASSERT_EQ(pages.size(), n);
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(pages.data()) % 64, 0u);
    EXPECT_TRUE(all_zero(pages.data(), n)) << n;
    std::fill(pages.data(), pages.data() + n, std::uint8_t{0xA5});  // every byte is ours
    pages.clear();
    EXPECT_TRUE(all_zero(pages.data(), n)) << n;
    pages.data()[n - 1] = 7;
    ZeroedPages<std::uint8_t> moved = std::move(pages);
    EXPECT_EQ(pages.data(), nullptr);
    EXPECT_EQ(moved.data()[n - 1], 7);
  }
}

TEST(ZeroedPages, SharedHugeMappingsStartOnA2MiBBoundary) {
  struct Block {
    std::uint16_t d[16];
    std::uint8_t q[4][64];
  };
  const std::size_t n = (std::size_t{3} << 20) / sizeof(Block) + 5;
  const std::shared_ptr<Block[]> blocks = shared_zeroed_pages<Block>(n);
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(blocks.get());
  EXPECT_TRUE(all_zero(bytes, n * sizeof(Block)));
  blocks[n - 1].q[3][63] = 1;
#if !defined(__SANITIZE_ADDRESS__)
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(blocks.get()) % (std::size_t{2} << 20), 0u);
#endif
}

}  // namespace
}  // namespace cpudl
