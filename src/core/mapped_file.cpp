#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/huge_page_buffer.h"

namespace kestrel {

MappedFile MappedFile::open(const std::string& path, Mode mode) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  MappedFile f;
  f.name_ = path;
  f.size_ = static_cast<size_t>(st.st_size);
  if (f.size_ > 0 && mode == Mode::LoadHugePages) {
    void* p;
    try {
      p = map_huge_pages(f.size_, path + ": loading it");
    } catch (...) {
      ::close(fd);
      throw;
    }
    size_t got = 0;
    while (got < f.size_) {
      const ssize_t r = pread(fd, static_cast<char*>(p) + got, f.size_ - got, static_cast<off_t>(got));
      if (r <= 0) {
        const int err = r < 0 ? errno : EIO;
        munmap(p, f.size_);
        ::close(fd);
        throw Error(path + ": read failed after " + std::to_string(got) + " bytes: " + std::strerror(err));
      }
      got += static_cast<size_t>(r);
    }
    mprotect(p, f.size_, PROT_READ);
    f.data_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
  } else if (f.size_ > 0) {
    void* p = mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(path + ": cannot map: " + std::strerror(err));
    }
    f.data_ = static_cast<const uint8_t*>(p);
    f.mapped_ = true;
  }
  ::close(fd);
  return f;
}

MappedFile MappedFile::from_buffer(std::vector<uint8_t> bytes, std::string name) {
  MappedFile f;
  f.owned_ = std::move(bytes);
  f.data_ = f.owned_.data();
  f.size_ = f.owned_.size();
  f.name_ = std::move(name);
  return f;
}

MappedFile::MappedFile(MappedFile&& o) noexcept { *this = std::move(o); }

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this == &o) return *this;
  if (mapped_) munmap(const_cast<uint8_t*>(data_), size_);
  owned_ = std::move(o.owned_);
  mapped_ = std::exchange(o.mapped_, false);
  size_ = std::exchange(o.size_, 0);
  data_ = mapped_ ? o.data_ : owned_.data();
  o.data_ = nullptr;
  name_ = std::move(o.name_);
  return *this;
}

MappedFile::~MappedFile() {
  if (mapped_) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kestrel
