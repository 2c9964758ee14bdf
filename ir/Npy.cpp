#include "ir/Npy.h"

#include <cstdio>
#include <cstring>
#include <sstream>

#include "ir/Files.h"

namespace autotune {
namespace {

/** The value text of `'key': value` in the header dict, up to the next ',' or '}' outside brackets. */
std::string dict_value(const std::string &h, const std::string &key) {
  size_t k = h.find("'" + key + "'");
  if (k == std::string::npos) return "";
  size_t colon = h.find(':', k);
  if (colon == std::string::npos) return "";
  size_t i = colon + 1, depth = 0, start = i;
  for (; i < h.size(); ++i) {
    char c = h[i];
    if (c == '(' || c == '[') ++depth;
    else if (c == ')' || c == ']') --depth;
    else if ((c == ',' || c == '}') && depth == 0) break;
  }
  std::string v = h.substr(start, i - start);
  size_t a = v.find_first_not_of(" \t"), b = v.find_last_not_of(" \t");
  return a == std::string::npos ? "" : v.substr(a, b - a + 1);
}

}  // namespace

namespace {

Expected<Tensor> parse_npy(const std::string &bytes, const std::string &path) {
  auto bad = [&](const std::string &why) { return make_error(path + ": " + why); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("not a .npy file (bad magic)");
  int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len, offset;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    header_len = 0;
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    offset = 12;
  } else {
    return bad("unsupported .npy version " + std::to_string(major));
  }
  if (offset + header_len > bytes.size()) return bad("truncated header");
  std::string h = bytes.substr(offset, header_len);
  std::string descr = dict_value(h, "descr"), order = dict_value(h, "fortran_order"), shape_s = dict_value(h, "shape");
  DType dtype;
  bool bools = descr == "'|b1'";  // numpy's bool: one byte each, held as int64 0/1 (autotune's booleans)
  if (descr == "'<f4'" || descr == "'=f4'") dtype = DType::kFloat32;
  else if (descr == "'<i8'" || descr == "'=i8'" || bools) dtype = DType::kInt64;
  else return bad("dtype " + descr + " is not supported (float32 '<f4', int64 '<i8' or bool '|b1')");
  if (order != "False") return bad("Fortran-order arrays are not supported (save with np.ascontiguousarray)");
  if (shape_s.size() < 2 || shape_s.front() != '(' || shape_s.back() != ')') return bad("bad shape in header");
  Shape shape;
  std::stringstream ss(shape_s.substr(1, shape_s.size() - 2));
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t a = item.find_first_not_of(" "), b = item.find_last_not_of(" ");
    if (a == std::string::npos) continue;
    item = item.substr(a, b - a + 1);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 12)
      return bad("bad dimension '" + item + "' in header");
    shape.push_back(std::stoll(item));
  }
  auto type = make_type(dtype, shape);
  if (!type) return bad(type.error().message);
  size_t data_at = offset + header_len;
  size_t want = bools ? static_cast<size_t>(type->numel()) : type->nbytes();
  if (bytes.size() - data_at != want)  // checked before allocating what the header claims
    return bad("expected " + std::to_string(want) + " bytes of data for " + (bools ? "bool" + shape_str(shape) : type_str(*type)) + ", found " +
               std::to_string(bytes.size() - data_at));
  AT_ASSIGN(t, Tensor::allocate(*type, path));
  if (bools)
    for (int64_t i = 0; i < t.numel(); ++i) t.i64()[i] = bytes[data_at + i] != 0;
  else if (t.nbytes())
    std::memcpy(t.raw(), bytes.data() + data_at, t.nbytes());
  return t;
}

}  // namespace

Expected<Tensor> read_npy(const std::string &path) {
  AT_ASSIGN(bytes, read_file(path));
  return parse_npy_bytes(bytes, path);
}

Expected<Tensor> parse_npy_bytes(const std::string &bytes, const std::string &label) {
  auto t = parse_npy(bytes, label);
  if (!t) return make_error(printable(t.error().message));  // the header is quoted: one line, always
  return t;
}

Status write_npy(const std::string &path, const Tensor &t) {
  std::string shape = "(";
  for (size_t i = 0; i < t.shape().size(); ++i) shape += std::to_string(t.shape()[i]) + (t.shape().size() == 1 || i + 1 < t.shape().size() ? "," : "");
  shape += ")";
  std::string header = std::string("{'descr': '") + (t.dtype() == DType::kFloat32 ? "<f4" : "<i8") +
                       "', 'fortran_order': False, 'shape': " + shape + ", }";
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string bytes("\x93NUMPY\x01\x00", 8);
  bytes += static_cast<char>(header.size() & 0xff);
  bytes += static_cast<char>(header.size() >> 8);
  bytes += header;
  bytes.append(static_cast<const char *>(t.raw()), t.nbytes());
  return write_file_atomic(path, bytes);
}

}  // namespace autotune
