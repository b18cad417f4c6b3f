#pragma once
// Read-only view of a whole file: mmap'd when it comes from disk, or an owned
// buffer when a model was built in memory (llama2.c import on the fly).
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kestrel {

class MappedFile {
 public:
  enum class Mode {
    Map,            // mmap the file: instant start, pages shared with the page cache
    LoadHugePages,  // read into anonymous memory backed by transparent huge pages:
                    // fewer TLB misses and prefetch stalls when weights stream at full bandwidth
  };
  static MappedFile open(const std::string& path, Mode mode = Mode::Map);  // throws Error naming the path
  static MappedFile from_buffer(std::vector<uint8_t> bytes, std::string name);

  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& name() const { return name_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
  std::vector<uint8_t> owned_;
  std::string name_;
};

}  // namespace kestrel
