// autotune_fuzz: damaged copies of real models and .npy files through the importer, the .npy
// reader, the graph passes and both executors, each case in a child process under a memory
// limit and a time limit. A case passes when it imports and runs, or ends in an error of one
// printable line that names the file; a signal, a timeout, or a message of several lines (or
// one that does not name the file) fails the run, and the case is saved for --replay.
//
//   autotune_fuzz --cases 2000                 what CI runs (ctest: fuzz)
//   autotune_fuzz --cases 10000 --seed 7       a longer local run
//   autotune_fuzz --replay fuzz-failures/case-123.onnx
//
// Mutations are both blind (truncation, bit flips, interesting bytes, copied chunks) and aware
// of the format (dims, attributes, op types, input names, dtypes and opsets of a parsed model;
// the shape and dtype in a .npy header), so most cases get past the protobuf parser and reach
// the code that trusts what the file says.
#include <onnx/onnx_pb.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "ir/Files.h"
#include "ir/Hash.h"
#include "ir/Npy.h"
#include "ir/OnnxImport.h"
#include "ir/Pass.h"
#include "ir/Reference.h"
#include "runtime/Runtime.h"

namespace autotune::fuzz {
namespace {

namespace fs = std::filesystem;

struct Options {
  int64_t cases = 2000;
  uint64_t seed = 1;
  double seconds_per_case = 20;
  int64_t memory_mb = 4096;
  std::string models_dir = AUTOTUNE_MODELS_DIR;
  std::string save_dir = "fuzz-failures";
  std::string replay;
  bool verbose = false;
};

class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() { return splitmix64(state_); }
  size_t below(size_t n) { return n ? static_cast<size_t>(next() % n) : 0; }
  bool chance(int percent) { return below(100) < static_cast<size_t>(percent); }

 private:
  uint64_t state_;
};

int64_t interesting(Rng &r) {
  static const int64_t values[] = {0, 1, -1, 2, 3, 7, 255, 65536, int64_t{1} << 31, (int64_t{1} << 31) - 1, int64_t{1} << 32,
                                   int64_t{1} << 34, int64_t{1} << 40, int64_t{1} << 62, INT64_MAX, INT64_MIN, -(int64_t{1} << 33)};
  return r.chance(80) ? values[r.below(std::size(values))] : static_cast<int64_t>(r.next() >> r.below(64));
}

/** Blind damage: what a truncated download or a flaky disk does. */
std::string mutate_bytes(std::string s, Rng &r) {
  if (s.empty()) return s;
  switch (r.below(5)) {
    case 0: return s.substr(0, r.below(s.size()));
    case 1:
      for (int k = 0, n = 1 + static_cast<int>(r.below(4)); k < n; ++k) s[r.below(s.size())] ^= static_cast<char>(1u << r.below(8));
      return s;
    case 2: {
      static const char bytes[] = {'\0', '\xff', '\x7f', '\x80', '\x01'};
      for (int k = 0, n = 1 + static_cast<int>(r.below(8)); k < n; ++k) s[r.below(s.size())] = bytes[r.below(std::size(bytes))];
      return s;
    }
    case 3: {  // copy a chunk over another place
      size_t len = 1 + r.below(std::min<size_t>(64, s.size())), from = r.below(s.size() - len + 1), to = r.below(s.size() - len + 1);
      std::string chunk = s.substr(from, len);
      s.replace(to, len, chunk);
      return s;
    }
    default: {  // insert random bytes
      std::string junk(1 + r.below(16), '\0');
      for (char &c : junk) c = static_cast<char>(r.next());
      s.insert(r.below(s.size()), junk);
      return s;
    }
  }
}

/** Damage that knows the format: the fields a hostile or buggy exporter gets wrong. */
std::string mutate_model(const std::string &bytes, Rng &r) {
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) return mutate_bytes(bytes, r);
  auto *g = m.mutable_graph();
  static const char *ops[] = {"Conv", "Add", "Mul", "Relu", "Gather", "Reshape", "Concat", "MaxPool", "AveragePool", "Gemm",
                              "MatMul", "Softmax", "Transpose", "Flatten", "Unsqueeze", "Squeeze", "Pad", "Clip", "Shape",
                              "ReduceMean", "BatchNormalization", "GlobalAveragePool", "Constant", "Identity", "Erf", ""};
  for (int k = 0, n = 1 + static_cast<int>(r.below(3)); k < n; ++k) {
    switch (r.below(11)) {
      case 0:  // an initializer's dims
        if (g->initializer_size()) {
          auto *t = g->mutable_initializer(static_cast<int>(r.below(g->initializer_size())));
          if (t->dims_size() && r.chance(80)) t->set_dims(static_cast<int>(r.below(t->dims_size())), interesting(r));
          else t->add_dims(interesting(r));
        }
        break;
      case 1:  // a graph input's dims
        if (g->input_size()) {
          auto *shape = g->mutable_input(static_cast<int>(r.below(g->input_size())))->mutable_type()->mutable_tensor_type()->mutable_shape();
          if (shape->dim_size()) shape->mutable_dim(static_cast<int>(r.below(shape->dim_size())))->set_dim_value(interesting(r));
        }
        break;
      case 2:  // an attribute's value
        if (g->node_size()) {
          auto *n = g->mutable_node(static_cast<int>(r.below(g->node_size())));
          if (n->attribute_size()) {
            auto *a = n->mutable_attribute(static_cast<int>(r.below(n->attribute_size())));
            if (a->ints_size()) a->set_ints(static_cast<int>(r.below(a->ints_size())), interesting(r));
            else if (r.chance(50)) a->set_i(interesting(r));
            else a->set_f(r.chance(50) ? static_cast<float>(interesting(r)) : std::nanf(""));
          }
        }
        break;
      case 3:  // an op type
        if (g->node_size()) g->mutable_node(static_cast<int>(r.below(g->node_size())))->set_op_type(ops[r.below(std::size(ops))]);
        break;
      case 4:  // an input wired to another value (or to nothing)
        if (g->node_size() > 1) {
          auto *n = g->mutable_node(static_cast<int>(r.below(g->node_size())));
          const auto &other = g->node(static_cast<int>(r.below(g->node_size())));
          if (n->input_size()) n->set_input(static_cast<int>(r.below(n->input_size())), other.output_size() && r.chance(80) ? other.output(0) : "");
        }
        break;
      case 5:  // a dtype
        if (g->initializer_size())
          g->mutable_initializer(static_cast<int>(r.below(g->initializer_size())))->set_data_type(static_cast<int>(r.below(17)));
        break;
      case 6:  // data shorter or longer than the dims
        if (g->initializer_size()) {
          auto *t = g->mutable_initializer(static_cast<int>(r.below(g->initializer_size())));
          std::string raw = t->raw_data();
          t->set_raw_data(r.chance(50) ? raw.substr(0, r.below(raw.size() + 1)) : raw + raw);
        }
        break;
      case 7:  // the opset
        if (m.opset_import_size()) m.mutable_opset_import(0)->set_version(static_cast<int64_t>(r.below(25)));
        break;
      case 8:  // a name full of control bytes
        if (g->node_size()) {
          std::string name(1 + r.below(12), '\0');
          for (char &c : name) c = static_cast<char>(r.next());
          g->mutable_node(static_cast<int>(r.below(g->node_size())))->set_name(name);
        }
        break;
      case 9:  // two nodes swapped (order matters: inputs must be defined first)
        if (g->node_size() > 1) g->mutable_node()->SwapElements(static_cast<int>(r.below(g->node_size())), static_cast<int>(r.below(g->node_size())));
        break;
      default:  // a node's attribute removed
        if (g->node_size()) {
          auto *n = g->mutable_node(static_cast<int>(r.below(g->node_size())));
          if (n->attribute_size()) n->mutable_attribute()->DeleteSubrange(static_cast<int>(r.below(n->attribute_size())), 1);
        }
    }
  }
  std::string out = m.SerializeAsString();
  return r.chance(15) ? mutate_bytes(out, r) : out;
}

/** Damage to a .npy file's header: its shape, dtype and lengths. */
std::string mutate_npy(std::string s, Rng &r) {
  size_t open = s.find("'shape': ("), close = s.find(')', open);
  if (open == std::string::npos || close == std::string::npos || r.chance(30)) return mutate_bytes(s, r);
  std::string shape;
  switch (r.below(4)) {
    case 0: shape = std::to_string(interesting(r)) + ", " + std::to_string(interesting(r)); break;
    case 1: shape = std::to_string(interesting(r)) + ","; break;
    case 2: shape = "1, 3, 32768, 32768"; break;
    default: shape = "\x01\n" + std::to_string(r.next()); break;
  }
  s.replace(open + 10, close - open - 10, shape);
  if (r.chance(30)) {
    size_t d = s.find("<f4");
    if (d == std::string::npos) d = s.find("<i8");
    if (d != std::string::npos) s.replace(d, 3, r.chance(50) ? ">f8" : "|b1");
  }
  return s;
}

enum Verdict { kRan = 0, kCleanError = 1, kBadMessage = 2 };

/** One line, naming `label`: what a user would see. */
bool good_message(const std::string &msg, const std::string &label) {
  return msg.rfind(label + ": ", 0) == 0 && msg.find('\n') == std::string::npos && msg.find('\r') == std::string::npos;
}

/** The work of one case, in the child process. Returns a Verdict. */
int run_case(const std::string &bytes, const std::string &label, bool is_npy, uint64_t seed, bool compile, const std::string &cache_dir) {
  auto report = [&](const std::string &msg) {
    if (!good_message(msg, label)) {
      std::fprintf(stderr, "%s: bad message: [%s]\n", label.c_str(), msg.c_str());
      return kBadMessage;
    }
    return kCleanError;
  };
  if (is_npy) {
    auto t = parse_npy_bytes(bytes, label);
    return t ? kRan : report(t.error().message);
  }
  auto g = import_onnx_bytes(bytes, label);
  if (!g) return report(g.error().message);
  if (auto ok = verify_graph(*g); !ok) return report(label + ": imported an invalid graph: " + ok.error().message);
  auto fused = lower_to_stage(*g, Stage::kFused, PassContext{});
  if (!fused) return report(label + ": " + fused.error().message);
  // Run only what is cheap to run: the damage may have made a valid but enormous model, which
  // the CLI would refuse or run slowly; import and passes are what the fuzzing is for.
  double flops = 0, bytes_out = 0;
  for (const Node &n : fused->nodes) flops += group_flops(*n.body), bytes_out += static_cast<double>(n.type.nbytes());
  if (flops > 2e8 || bytes_out > 256e6) return kRan;
  auto out = run_reference(*fused, random_inputs(*fused, seed));
  if (!out) return report(label + ": " + out.error().message);
  if (compile) {
    CompileOptions o;
    o.threads = 1;
    o.cache_dir = cache_dir;
    auto m = CompiledModel::compile(*fused, o);
    if (!m) return report(label + ": " + m.error().message);
    auto r = (*m)->run(random_inputs(*fused, seed));
    if (!r) return report(label + ": " + r.error().message);
  }
  return kRan;
}

struct Seed {
  std::string name, bytes;
  bool npy = false;
};

std::vector<Seed> load_seeds(const Options &o) {
  std::vector<Seed> seeds;
  std::vector<fs::path> files;
  for (const auto &e : fs::directory_iterator(o.models_dir))
    if (e.path().extension() == ".onnx") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const fs::path &p : files)
    if (auto b = read_file(p.string())) seeds.push_back({p.filename().string(), b.take(), false});
  // .npy seeds: written by the project's own writer, float32 and int64, a few ranks.
  std::string tmp = (fs::temp_directory_path() / ("autotune_fuzz_" + std::to_string(::getpid()) + ".npy")).string();
  for (const Tensor &t : {random_tensor({DType::kFloat32, {1, 3, 8, 8}}, 1), tensor_i64({4}, {0, 1, 2, 3}), scalar_f32(1.5f)}) {
    if (write_npy(tmp, t))
      if (auto b = read_file(tmp)) seeds.push_back({"input" + std::to_string(seeds.size()) + ".npy", b.take(), true});
  }
  fs::remove(tmp);
  return seeds;
}

int usage(const char *why) {
  std::fprintf(stderr,
               "autotune_fuzz: %s\nUsage: autotune_fuzz [--cases N] [--seed S] [--seconds-per-case T] [--memory-mb M]\n"
               "                     [--models DIR] [--save-dir DIR] [--verbose] | --replay FILE\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    try {
      if (a == "--cases") o.cases = std::stoll(value());
      else if (a == "--seed") o.seed = std::stoull(value());
      else if (a == "--seconds-per-case") o.seconds_per_case = std::stod(value());
      else if (a == "--memory-mb") o.memory_mb = std::stoll(value());
      else if (a == "--models") o.models_dir = value();
      else if (a == "--save-dir") o.save_dir = value();
      else if (a == "--replay") o.replay = value();
      else if (a == "--verbose") o.verbose = true;
      else if (a == "--help") return usage("fuzz the importer, the .npy reader and both executors"), 0;
      else return usage(("unknown flag " + a).c_str());
    } catch (const std::exception &) {
      return usage(("bad value for " + a).c_str());
    }
  }
  if (o.cases < 1 || o.seconds_per_case <= 0 || o.memory_mb < 256) return usage("--cases, --seconds-per-case or --memory-mb out of range");
  std::string cache_dir = (fs::temp_directory_path() / ("autotune_fuzz_cache_" + std::to_string(::getpid()))).string();

  std::vector<Seed> seeds;
  if (!o.replay.empty()) {
    auto b = read_file(o.replay);
    if (!b) return usage(b.error().message.c_str());
    seeds.push_back({fs::path(o.replay).filename().string(), b.take(), o.replay.size() > 4 && o.replay.substr(o.replay.size() - 4) == ".npy"});
    o.cases = 1;
  } else {
    seeds = load_seeds(o);
  }
  if (seeds.empty()) return usage(("no seed models in " + o.models_dir).c_str());

  Rng rng(o.seed);
  int64_t counts[3] = {0, 0, 0}, crashes = 0, timeouts = 0, npy_cases = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < o.cases; ++c) {
    // Models most of the time (.npy files are simpler), small ones mostly; a ResNet (tens of MB)
    // now and then, for real layer shapes.
    const Seed *seed = nullptr;
    bool want_npy = rng.chance(15);
    while (!seed) {
      const Seed &s = seeds[rng.below(seeds.size())];
      if (!o.replay.empty() || (s.npy == want_npy && (s.bytes.size() < (size_t{1} << 20) || rng.chance(3)))) seed = &s;
    }
    std::string label = "case-" + std::to_string(c) + (seed->npy ? ".npy" : ".onnx");
    std::string bytes = !o.replay.empty() ? seed->bytes
                        : seed->npy       ? mutate_npy(seed->bytes, rng)
                        : rng.chance(70)  ? mutate_model(seed->bytes, rng)
                                          : mutate_bytes(seed->bytes, rng);
    bool compile = !o.replay.empty() || rng.chance(10);  // a replay runs everything
    uint64_t case_seed = rng.next();
    npy_cases += seed->npy;
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("autotune_fuzz: fork");
      return 2;
    }
    if (pid == 0) {
      rlimit lim{static_cast<rlim_t>(o.memory_mb) << 20, static_cast<rlim_t>(o.memory_mb) << 20};
      setrlimit(RLIMIT_AS, &lim);
      rlimit no_core{0, 0};
      setrlimit(RLIMIT_CORE, &no_core);
      _exit(run_case(bytes, label, seed->npy, case_seed, compile, cache_dir));
    }
    int status = 0;
    bool timed_out = false;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(o.seconds_per_case);
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    std::string problem;
    if (timed_out) ++timeouts, problem = "timeout";
    else if (WIFSIGNALED(status)) ++crashes, problem = std::string("signal ") + strsignal(WTERMSIG(status));
    else if (WEXITSTATUS(status) <= kBadMessage) ++counts[WEXITSTATUS(status)], problem = WEXITSTATUS(status) == kBadMessage ? "bad message" : "";
    else ++crashes, problem = "exit code " + std::to_string(WEXITSTATUS(status));
    if (!problem.empty()) {
      std::error_code ec;
      fs::create_directories(o.save_dir, ec);
      std::string saved = (fs::path(o.save_dir) / label).string();
      (void)write_file_atomic(saved, bytes);
      std::fprintf(stderr, "autotune_fuzz: %s (from %s): %s; saved as %s\n", label.c_str(), seed->name.c_str(), problem.c_str(), saved.c_str());
    } else if (o.verbose) {
      std::fprintf(stderr, "%s (from %s): %s\n", label.c_str(), seed->name.c_str(), WEXITSTATUS(status) == kRan ? "ran" : "clean error");
    }
  }
  fs::remove_all(cache_dir);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t failed = crashes + timeouts + counts[kBadMessage];
  std::printf("fuzz: %lld cases (%lld .onnx, %lld .npy) in %.0f s, seed %llu, %lld MiB limit: %lld imported and ran, %lld clean one-line "
              "errors, %lld crashes, %lld timeouts, %lld bad messages\n",
              static_cast<long long>(o.cases), static_cast<long long>(o.cases - npy_cases), static_cast<long long>(npy_cases), seconds,
              static_cast<unsigned long long>(o.seed), static_cast<long long>(o.memory_mb), static_cast<long long>(counts[kRan]),
              static_cast<long long>(counts[kCleanError]), static_cast<long long>(crashes), static_cast<long long>(timeouts),
              static_cast<long long>(counts[kBadMessage]));
  std::printf("%lld passed, %lld failed\n", static_cast<long long>(o.cases - failed), static_cast<long long>(failed));
  return failed ? 1 : 0;
}

}  // namespace autotune::fuzz

int main(int argc, char **argv) { return autotune::fuzz::main(argc, argv); }
