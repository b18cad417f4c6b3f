// An LD_PRELOAD shim for the tests of a slow start: open() of a path that contains
// $KESTREL_TEST_SLOW_OPEN sleeps $KESTREL_TEST_SLOW_OPEN_MS (default 3000) first, so that a server's
// model load takes as long as a large model's would, without the large file. Nothing else changes.
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdlib>
#include <cstring>

namespace {

void maybe_wait(const char* path) {
  const char* match = std::getenv("KESTREL_TEST_SLOW_OPEN");
  if (!match || !*match || !path || !std::strstr(path, match)) return;
  const char* ms = std::getenv("KESTREL_TEST_SLOW_OPEN_MS");
  usleep(static_cast<useconds_t>((ms ? std::atoi(ms) : 3000)) * 1000);
}

template <class Fn>
Fn next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

mode_t mode_of(int flags, va_list ap) { return (flags & (O_CREAT | O_TMPFILE)) ? static_cast<mode_t>(va_arg(ap, int)) : 0; }

}  // namespace

extern "C" {

int open(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_of(flags, ap);
  va_end(ap);
  maybe_wait(path);
  static const auto real = next<int (*)(const char*, int, ...)>("open");
  return real(path, flags, mode);
}

int open64(const char* path, int flags, ...) {
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = mode_of(flags, ap);
  va_end(ap);
  maybe_wait(path);
  static const auto real = next<int (*)(const char*, int, ...)>("open64");
  return real(path, flags, mode);
}

}  // extern "C"
