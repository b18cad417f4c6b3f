// M-RoPE positions of a sequence with images (runtime/request.h's media_rope_position), as llama.cpp's mtmd lays
// them out (mtmd_image_tokens_get_decoder_pos, mtmd_image_tokens_get_n_pos; ../shared/specs/multimodal-lora-router.md
// A.1.3): an image's row i of an nx-wide grid at (t, t + i / nx, t + i % nx) with t its first row's position, and
// the position after the image t + max(nx, ny); spans without a grid take one position per row.
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include "runtime/request.h"

namespace kestrel {
namespace media_positions_test {

std::array<int32_t, 3> at(const std::vector<MediaSpan>& media, int64_t i) {
  std::array<int32_t, 3> p{};
  media_rope_position(media, i, p.data());
  return p;
}

TEST(MediaPositions, ImageRowsTakeTheirGridAndTheTextAfterMovesOnByItsLongerSide) {
  MediaSpan a;  // a 3x2 grid at sequence positions [4, 10)
  a.start = 4, a.n_tokens = 6, a.grid_w = 3, a.grid_h = 2;
  MediaSpan b;  // a 2x4 grid (taller than wide) at [12, 20)
  b.start = 12, b.n_tokens = 8, b.grid_w = 2, b.grid_h = 4;
  const std::vector<MediaSpan> media = {a, b};
  EXPECT_FALSE(has_media_grid({}));
  EXPECT_TRUE(has_media_grid(media));
  using P = std::array<int32_t, 3>;
  EXPECT_EQ(at(media, 0), (P{0, 0, 0}));
  EXPECT_EQ(at(media, 3), (P{3, 3, 3}));
  EXPECT_EQ(at(media, 4), (P{4, 4, 4}));  // row 0, column 0
  EXPECT_EQ(at(media, 6), (P{4, 4, 6}));  // row 0, column 2
  EXPECT_EQ(at(media, 7), (P{4, 5, 4}));  // row 1, column 0
  EXPECT_EQ(at(media, 9), (P{4, 5, 6}));
  // After the first image: 4 + max(3, 2) = 7, where the sequence is at 10 (3 positions saved).
  EXPECT_EQ(at(media, 10), (P{7, 7, 7}));
  EXPECT_EQ(at(media, 11), (P{8, 8, 8}));
  EXPECT_EQ(at(media, 12), (P{9, 9, 9}));    // the second image starts at 12 - 3
  EXPECT_EQ(at(media, 19), (P{9, 12, 10}));  // its last row: row 3, column 1
  // After it: 9 + max(2, 4) = 13 at sequence position 20 (7 saved in all), and on through the decode.
  EXPECT_EQ(at(media, 20), (P{13, 13, 13}));
  EXPECT_EQ(at(media, 100), (P{93, 93, 93}));
}

TEST(MediaPositions, SpansWithoutAGridTakeOnePositionPerRow) {
  MediaSpan g;  // Gemma 3's rows: no grid
  g.start = 2, g.n_tokens = 16;
  MediaSpan q;
  q.start = 20, q.n_tokens = 4, q.grid_w = 2, q.grid_h = 2;
  const std::vector<MediaSpan> media = {g, q};
  using P = std::array<int32_t, 3>;
  EXPECT_EQ(at(media, 5), (P{5, 5, 5}));
  EXPECT_EQ(at(media, 18), (P{18, 18, 18}));
  EXPECT_EQ(at(media, 23), (P{20, 21, 21}));
  EXPECT_EQ(at(media, 24), (P{22, 22, 22}));
  EXPECT_FALSE(has_media_grid({g}));
}

}  // namespace media_positions_test
}  // namespace kestrel
