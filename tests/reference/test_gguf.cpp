// GGUF reader/writer: round trip of every value type and tensor type, and
// hostile files that must fail with a message naming the file and the problem.
#include <fmt/format.h>
#include <gmock/gmock.h>

#include "formats/block_formats.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_support.h"

namespace kestrel {
namespace {

using ::testing::HasSubstr;

GgufWriter sample_writer(std::vector<float>& f32, std::vector<uint8_t>& q8) {
  GgufWriter w;
  w.set_str("general.architecture", "llama");
  w.set("u8", {GgufValueType::UINT8, uint64_t{200}});
  w.set("i8", {GgufValueType::INT8, int64_t{-100}});
  w.set("u16", {GgufValueType::UINT16, uint64_t{60000}});
  w.set("i16", {GgufValueType::INT16, int64_t{-30000}});
  w.set_u32("u32", 4000000000u);
  w.set("i32", GgufValue::i32(-2000000000));
  w.set("u64", GgufValue::u64(1ull << 60));
  w.set("i64", {GgufValueType::INT64, int64_t{-(1ll << 60)}});
  w.set_f32("f32", 0.5f);
  w.set("f64", {GgufValueType::FLOAT64, 1e-300});
  w.set_bool("bool", true);
  w.set_str("str", "h\xC3\xA9llo\n");
  w.set("arr.str", GgufValue::strings({"a", "", "c"}));
  w.set("arr.nested", GgufValue::array(GgufValueType::ARRAY, {GgufValue::int32s({1, 2}), GgufValue::int32s({})}));
  f32.resize(64 * 3);
  for (size_t i = 0; i < f32.size(); i++) f32[i] = static_cast<float>(i) * 0.25f - 7.0f;
  q8.resize(row_bytes(GgmlType::Q8_0, 64) * 3);
  quantize_row(GgmlType::Q8_0, f32.data(), q8.data(), 64 * 3);
  w.add_tensor_bytes("t.f32", GgmlType::F32, {64, 3}, f32.data());
  w.add_tensor_bytes("t.q8", GgmlType::Q8_0, {64, 3}, q8.data());
  w.add_tensor("t.f16", GgmlType::F16, {5}, [](uint8_t* d, size_t n) { std::memset(d, 0x3C, n); });
  return w;
}

GgufFile parse_bytes(std::vector<uint8_t> bytes, const std::string& name = "test.gguf") {
  return GgufFile::parse(MappedFile::from_buffer(std::move(bytes), name));
}

TEST(Gguf, RoundTripKeepsEveryValueAndTensor) {
  std::vector<float> f32;
  std::vector<uint8_t> q8;
  const auto bytes = sample_writer(f32, q8).write_buffer();
  const GgufFile g = parse_bytes(bytes);
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.get("u8").as_int(), 200);
  EXPECT_EQ(g.get("i8").as_int(), -100);
  EXPECT_EQ(g.get("u16").as_int(), 60000);
  EXPECT_EQ(g.get("i16").as_int(), -30000);
  EXPECT_EQ(g.get("u32").as_int(), 4000000000ll);
  EXPECT_EQ(g.get("i32").as_int(), -2000000000);
  EXPECT_EQ(g.get("u64").as_int(), 1ll << 60);
  EXPECT_EQ(g.get("i64").as_int(), -(1ll << 60));
  EXPECT_EQ(g.get("f32").as_double(), 0.5);
  EXPECT_EQ(g.get("f64").as_double(), 1e-300);
  EXPECT_TRUE(g.get("bool").as_bool());
  EXPECT_EQ(g.get("str").as_string(), "h\xC3\xA9llo\n");
  const auto& strs = g.get("arr.str").as_array();
  ASSERT_EQ(strs.items.size(), 3u);
  EXPECT_EQ(strs.items[2].as_string(), "c");
  const auto& nested = g.get("arr.nested").as_array();
  ASSERT_EQ(nested.items.size(), 2u);
  EXPECT_EQ(nested.items[0].as_array().items[1].as_int(), 2);
  EXPECT_TRUE(nested.items[1].as_array().items.empty());

  ASSERT_EQ(g.tensors().size(), 3u);
  const auto* t = g.find_tensor("t.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape_string(), "64x3");
  EXPECT_EQ(std::memcmp(t->data, f32.data(), f32.size() * 4), 0);
  const auto* tq = g.find_tensor("t.q8");
  ASSERT_NE(tq, nullptr);
  EXPECT_EQ(tq->nbytes, 6u * 34u);  // 3 rows of 2 blocks
  EXPECT_EQ(std::memcmp(tq->data, q8.data(), q8.size()), 0);
  for (const auto& ti : g.tensors()) EXPECT_EQ(ti.offset % 32, 0u) << ti.name;

  // Writing what we read gives the same bytes.
  GgufWriter again;
  for (const auto& [k, v] : g.metadata()) again.set(k, v);
  for (const auto& ti : g.tensors()) again.add_tensor_bytes(ti.name, ti.type, ti.ne, ti.data);
  EXPECT_EQ(again.write_buffer(), bytes);
}

TEST(Gguf, HonoursCustomAlignment) {
  GgufWriter w;
  w.set_u32("general.alignment", 64);
  const float x[3] = {1, 2, 3};
  w.add_tensor_bytes("a", GgmlType::F32, {3}, x);
  w.add_tensor_bytes("b", GgmlType::F32, {3}, x);
  const GgufFile g = parse_bytes(w.write_buffer());
  EXPECT_EQ(g.alignment(), 64u);
  EXPECT_EQ(g.find_tensor("b")->offset, 64u);
  EXPECT_EQ(static_cast<const float*>(static_cast<const void*>(g.find_tensor("b")->data))[2], 3.0f);
}

TEST(Gguf, ReadsFilesWrittenByLlamaCpp) {
  const GgufFile g = GgufFile::open(test::shared("models/stories260K.gguf"));
  EXPECT_EQ(g.get_string("general.architecture"), "llama");
  EXPECT_EQ(g.get_int("llama.context_length"), 128);
  EXPECT_EQ(g.tensors().size(), 48u);
  EXPECT_EQ(g.get("tokenizer.ggml.tokens").as_array().items.size(), 512u);
}

// --- hostile input -------------------------------------------------------

std::string error_of(const std::vector<uint8_t>& bytes) {
  try {
    parse_bytes(bytes, "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void put_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) { std::memcpy(b.data() + at, &v, 8); }
void put_u32(std::vector<uint8_t>& b, size_t at, uint32_t v) { std::memcpy(b.data() + at, &v, 4); }

std::vector<uint8_t> one_tensor_file() {
  GgufWriter w;
  w.set_str("k", "v");
  const float x[4] = {1, 2, 3, 4};
  w.add_tensor_bytes("w", GgmlType::F32, {4}, x);
  return w.write_buffer();
}
// Layout of one_tensor_file(): header 24, key "k" (8+1), type 4, value (8+1) = 46,
// then name (8+1), n_dims 4 @55, dim 8 @59, type 4 @67, offset 8 @71.
constexpr size_t kDimsAt = 55, kDimAt = 59, kTypeAt = 67, kOffsetAt = 71;

TEST(GgufHostile, BadMagicIsNamed) {
  auto b = one_tensor_file();
  b[0] = 'X';
  EXPECT_THAT(error_of(b), HasSubstr("bad.gguf: not a GGUF file (bad magic"));
}

TEST(GgufHostile, EveryTruncationFailsCleanly) {
  const auto full = one_tensor_file();
  const GgufFile whole = parse_bytes(full);
  const auto& t = whole.tensors().back();
  // Every cut before the end of the last tensor's data (the rest is padding).
  const size_t data_end = whole.data_offset() + t.offset + t.nbytes;
  for (size_t n = 0; n < data_end; n++) {
    const std::string msg = error_of(std::vector<uint8_t>(full.begin(), full.begin() + static_cast<long>(n)));
    EXPECT_THAT(msg, HasSubstr("bad.gguf")) << "truncated to " << n << " bytes";
  }
}

TEST(GgufHostile, HugeCountsAreRefusedBeforeAllocating) {
  auto b = one_tensor_file();
  put_u64(b, 8, 1ull << 60);  // tensor count
  EXPECT_THAT(error_of(b), HasSubstr("tensor count"));
  b = one_tensor_file();
  put_u64(b, 16, ~0ull);  // metadata count
  EXPECT_THAT(error_of(b), HasSubstr("metadata count"));
  b = one_tensor_file();
  put_u64(b, 24, 1ull << 62);  // key length
  EXPECT_THAT(error_of(b), HasSubstr("length"));

  GgufWriter w;
  w.set("arr", GgufValue::int32s({1, 2, 3}));
  auto a = w.write_buffer();
  put_u64(a, 24 + 8 + 3 + 4 + 4, 1ull << 61);  // array length
  EXPECT_THAT(error_of(a), HasSubstr("cannot fit"));
}

TEST(GgufHostile, UnknownTypesAreNamed) {
  auto b = one_tensor_file();
  put_u32(b, kTypeAt, 99);
  EXPECT_THAT(error_of(b), HasSubstr("tensor 'w' has unknown type id 99"));
  b = one_tensor_file();
  put_u32(b, 24 + 9, 77);  // value type of key "k"
  EXPECT_THAT(error_of(b), HasSubstr("metadata 'k': unknown value type 77"));
}

TEST(GgufHostile, BadShapesAreNamed) {
  auto b = one_tensor_file();
  put_u32(b, kDimsAt, 9);
  EXPECT_THAT(error_of(b), HasSubstr("has 9 dimensions"));
  b = one_tensor_file();
  put_u64(b, kDimAt, 0);
  EXPECT_THAT(error_of(b), HasSubstr("invalid dimension"));
  b = one_tensor_file();
  put_u32(b, kTypeAt, static_cast<uint32_t>(GgmlType::Q8_0));  // 4 elements, block of 32
  EXPECT_THAT(error_of(b), HasSubstr("not a multiple of the Q8_0 block size 32"));
}

TEST(Gguf, EveryQuantizedTypeRoundTripsWithItsRowSize) {
  // Each type's block size and bytes per block (ggml's), through a written and re-read file;
  // and a row that does not divide into its blocks refused naming them.
  for (GgmlType t : {GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K,
                     GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::MXFP4, GgmlType::IQ2_XXS, GgmlType::IQ2_XS,
                     GgmlType::IQ2_S, GgmlType::IQ3_XXS, GgmlType::IQ3_S, GgmlType::IQ1_S, GgmlType::IQ1_M}) {
    const int64_t bs = traits(t).block_size, cols = 2 * bs;
    std::vector<float> x(static_cast<size_t>(cols * 3), 0.5f);
    std::vector<uint8_t> q(row_bytes(t, cols) * 3);
    quantize_row(t, x.data(), q.data(), cols * 3);
    GgufWriter w;
    w.add_tensor_bytes("w", t, {cols, 3}, q.data());
    test::TempDir dir;
    w.write_file(dir.file("t.gguf"));
    const GgufFile f = GgufFile::open(dir.file("t.gguf"));
    const auto* ti = f.find_tensor("w");
    ASSERT_NE(ti, nullptr);
    EXPECT_EQ(ti->type, t);
    EXPECT_EQ(ti->nbytes, q.size());
    EXPECT_EQ(std::memcmp(ti->data, q.data(), q.size()), 0);
    auto b = one_tensor_file();
    put_u32(b, kTypeAt, static_cast<uint32_t>(t));  // 4 elements
    EXPECT_THAT(error_of(b), HasSubstr(fmt::format("not a multiple of the {} block size {}", type_name(t), bs)));
  }
  EXPECT_EQ(row_bytes(GgmlType::Q2_K, 256), 84u);
  EXPECT_EQ(row_bytes(GgmlType::Q3_K, 256), 110u);
  EXPECT_EQ(row_bytes(GgmlType::IQ4_XS, 256), 136u);
  EXPECT_EQ(row_bytes(GgmlType::MXFP4, 32), 17u);
  EXPECT_EQ(row_bytes(GgmlType::Q5_1, 32), 24u);
  // ggml's sizes of the lattice types (ggml-common.h static_asserts).
  EXPECT_EQ(row_bytes(GgmlType::IQ2_XXS, 256), 66u);
  EXPECT_EQ(row_bytes(GgmlType::IQ2_XS, 256), 74u);
  EXPECT_EQ(row_bytes(GgmlType::IQ2_S, 256), 82u);
  EXPECT_EQ(row_bytes(GgmlType::IQ3_XXS, 256), 98u);
  EXPECT_EQ(row_bytes(GgmlType::IQ3_S, 256), 110u);
  EXPECT_EQ(row_bytes(GgmlType::IQ1_S, 256), 50u);
  EXPECT_EQ(row_bytes(GgmlType::IQ1_M, 256), 56u);
}

TEST(GgufHostile, OffsetsPastTheEndOrMisalignedAreNamed) {
  auto b = one_tensor_file();
  put_u64(b, kOffsetAt, 1 << 20);
  EXPECT_THAT(error_of(b), HasSubstr("extends past the end of the file"));
  b = one_tensor_file();
  put_u64(b, kOffsetAt, 3);
  EXPECT_THAT(error_of(b), HasSubstr("is not aligned"));
}

TEST(GgufHostile, OverlappingTensorsAreNamed) {
  GgufWriter w;
  const float x[16] = {};
  w.add_tensor_bytes("a", GgmlType::F32, {16}, x);
  w.add_tensor_bytes("b", GgmlType::F32, {16}, x);
  auto b = w.write_buffer();
  const GgufFile ok = parse_bytes(b);
  // Point b's offset (second tensor info, last 8 bytes before padding) at a.
  const size_t b_offset_at = 24 + (8 + 1 + 4 + 8 + 4 + 8) + (8 + 1 + 4 + 8 + 4);
  put_u64(b, b_offset_at, 32);
  EXPECT_THAT(error_of(b), HasSubstr("tensors 'a' and 'b' overlap"));
}

TEST(GgufHostile, VersionAndAlignmentAreChecked) {
  auto b = one_tensor_file();
  put_u32(b, 4, 1);
  EXPECT_THAT(error_of(b), HasSubstr("version 1 is not supported"));
  put_u32(b, 4, 0x03000000);
  EXPECT_THAT(error_of(b), HasSubstr("big-endian"));
  GgufWriter w;
  w.set_u32("general.alignment", 48);
  EXPECT_THAT(error_of(w.write_buffer()), HasSubstr("general.alignment 48 is not a power of two"));
}

TEST(GgufHostile, MissingFileIsNamed) {
  try {
    GgufFile::open("/nonexistent/model.gguf");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("/nonexistent/model.gguf: cannot open"));
  }
}

}  // namespace
}  // namespace kestrel

namespace kestrel {
namespace {

TEST(MappedFile, HugePageLoadHoldsTheSameBytesAsTheMapping) {
  const std::string path = test::shared("models/stories260K.gguf");
  const MappedFile mapped = MappedFile::open(path, MappedFile::Mode::Map);
  const MappedFile loaded = MappedFile::open(path, MappedFile::Mode::LoadHugePages);
  ASSERT_EQ(mapped.bytes().size(), loaded.bytes().size());
  EXPECT_EQ(std::memcmp(mapped.bytes().data(), loaded.bytes().data(), mapped.bytes().size()), 0);
  EXPECT_THROW(MappedFile::open("/nonexistent/x.gguf", MappedFile::Mode::LoadHugePages), Error);
}

}  // namespace
}  // namespace kestrel
