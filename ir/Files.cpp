#include "ir/Files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace autotune {

Expected<std::string> read_file(const std::string &path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return make_error(path + ": is a directory, not a file");
  std::ifstream f(path, std::ios::binary);
  if (!f) return make_error(path + ": cannot open file (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return make_error(path + ": read error");
  return ss.str();
}

namespace {

/** Writes every byte, or says why not ("" on success). */
std::string write_all(int fd, const std::string &bytes) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::string("write failed (") + (n < 0 ? std::strerror(errno) : "no progress") + ")";
    done += static_cast<size_t>(n);
  }
  return "";
}

std::string temp_name(const std::string &path) {
  static std::atomic<unsigned> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

Status write_file_atomic(const std::string &path, const std::string &bytes) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string tmp = temp_name(path);
  int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  bool named = fd < 0;  // whether `tmp` exists on disk (and must go if anything fails)
  if (named) fd = ::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return make_error(path + ": cannot write (" + std::strerror(errno) + ")");
  auto fail = [&](const std::string &why) {
    if (fd >= 0) ::close(fd);
    if (named) ::unlink(tmp.c_str());
    return Status(make_error(path + ": " + why));
  };
  if (std::string why = write_all(fd, bytes); !why.empty()) return fail(why);
  if (!named) {
    // Give the finished file a name beside the target (linkat cannot replace), then rename over it.
    std::string proc = "/proc/self/fd/" + std::to_string(fd);
    if (::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) != 0)
      return fail(std::string("cannot link the written file (") + std::strerror(errno) + ")");
    named = true;
  }
  int rc = ::close(fd);
  fd = -1;
  if (rc != 0) return fail(std::string("write failed on close (") + std::strerror(errno) + ")");
  if (std::rename(tmp.c_str(), path.c_str()) != 0) return fail(std::string("cannot rename into place (") + std::strerror(errno) + ")");
  return Status::ok();
}

}  // namespace autotune
