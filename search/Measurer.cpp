#include "search/Measurer.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <optional>
#include <thread>

#include "db/Workload.h"
#include "ir/Reference.h"
#include "ir/Stats.h"
#include "runtime/BoundKernel.h"

namespace autotune {

const char *status_name(MeasureStatus s) {
  switch (s) {
    case MeasureStatus::kOk: return "ok";
    case MeasureStatus::kInvalid: return "invalid";
    case MeasureStatus::kCompileError: return "compile_error";
    case MeasureStatus::kTimeout: return "timeout";
    case MeasureStatus::kCrash: return "crash";
    case MeasureStatus::kWrongResult: return "wrong_result";
    case MeasureStatus::kHostError: return "host_error";
  }
  return "?";
}

Status MeasureOptions::validate() const {
  auto bad = [](const std::string &what) { return Status(make_error(what)); };
  // Every limit below is far past any real use; each keeps a later conversion (poll's int
  // milliseconds, a vector of run times) well defined.
  if (!(min_time_s >= 0 && min_time_s <= 3600)) return bad("min_time_s must be between 0 and 3600 seconds, got " + std::to_string(min_time_s));
  if (max_runs < 1 || max_runs > 100'000'000) return bad("max_runs must be between 1 and 100000000, got " + std::to_string(max_runs));
  if (warmup < 0 || warmup > 1000) return bad("warmup must be between 0 and 1000, got " + std::to_string(warmup));
  if (!(timeout_s >= 0.001 && timeout_s <= 86400))
    return bad("the timeout must be between 0.001 and 86400 seconds, got " + std::to_string(timeout_s));
  if (threads < 0 || threads > 4096) return bad("threads must be between 0 (all) and 4096, got " + std::to_string(threads));
  if (!(tolerance >= 0 && tolerance < 1)) return bad("tolerance must be in [0, 1), got " + std::to_string(tolerance));
  if (host_retries < 0 || host_retries > 20) return bad("host_retries must be between 0 and 20");
  if (timeout_retries < 0 || timeout_retries > 5) return bad("timeout_retries must be between 0 and 5");
  if (!(compile_timeout_s >= 0 && compile_timeout_s <= 86400))
    return bad("the compile timeout must be between 0 (none) and 86400 seconds, got " + std::to_string(compile_timeout_s));
  return Status::ok();
}

namespace {
/** Reads exactly `n` bytes unless the other end closes first (then false). */
bool read_full(int fd, void *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, static_cast<char *>(buf) + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    got += static_cast<size_t>(r);
  }
  return true;
}
}  // namespace

std::vector<std::string> Measurer::compile_guarded(const std::vector<const LoweredKernel *> &kernels, std::vector<double> &seconds) {
  // A few long-lived children, each compiling the kernel the parent hands it over a socket pair
  // and sending its index back when done: a fork per kernel cost 8-10% of a tuning run
  // (ResNet-18, 100 trials), most of it copy-on-write faults of a fresh child. They take the
  // kernels from one queue, the next to whichever child is free: a batch's kernels take from a few
  // ms (every stage in the cache) to 300 ms (a new Winograd F(4x4) transform), and fixed shares
  // left a core idle for a quarter of the compile phase (perf, ResNet-50, 500 trials). A child past
  // the limit on one kernel is killed, that kernel refused, and a new child takes the queue on.
  using Clock = std::chrono::steady_clock;
  constexpr uint64_t kNone = UINT64_MAX;  // no kernel; sent to a child, the end of its work
  size_t n = kernels.size();
  std::vector<std::string> refused(n);
  int slots = options_.threads > 0 ? options_.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::deque<size_t> queue;
  for (size_t i = 0; i < n; ++i)
    if (kernels[i]) queue.push_back(i);
  struct Compiler {
    Child proc;                 // its process and the parent's end of their socket pair
    uint64_t current = kNone;   // the kernel it is compiling
    Clock::time_point since;    // when it began that one
  };
  // A child that cannot be started (no process or descriptor to spare) leaves the rest of the queue
  // to the in-process compile that follows, unguarded; so does one that went away between kernels.
  bool can_start = true;
  auto start = [&]() -> Compiler {
    Compiler c;
    int fds[2];
    if (!can_start || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) return can_start = false, c;
    pid_t pid = fork();
    if (pid < 0) {
      close(fds[0]), close(fds[1]);
      return can_start = false, c;
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the tuner
      close(fds[0]);
      for (uint64_t i = 0; read_full(fds[1], &i, sizeof i) && i != kNone;) {
        if (i >= n) _exit(1);
        (void)jit_.compile(*kernels[i]);  // into the cache; a failure is reported by the parent's own compile
        if (send(fds[1], &i, sizeof i, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof i)) _exit(1);
      }
      _exit(0);
    }
    close(fds[1]);
    c.proc.pid = pid, c.proc.fd = fds[0];
    return c;
  };
  // Hands a free child the next kernel of the queue; false if it went away (the kernel goes back).
  auto give = [&](Compiler &c) {
    if (queue.empty()) return true;
    uint64_t i = queue.front();
    if (send(c.proc.fd, &i, sizeof i, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof i)) return can_start = false;
    queue.pop_front();
    c.current = i, c.since = Clock::now();
    return true;
  };
  std::vector<Compiler> children;
  while (static_cast<int>(children.size()) < slots && !queue.empty())
    if (Compiler c = start(); c.proc.pid > 0) {
      children.push_back(c);
      give(children.back());
    } else {
      break;
    }
  std::vector<pollfd> fds;
  while (!children.empty()) {
    fds.clear();
    for (const Compiler &c : children) fds.push_back({c.proc.fd, POLLIN, 0});
    poll(fds.data(), fds.size(), 5);
    for (size_t k = 0; k < children.size();) {
      Compiler &c = children[k];
      bool gone = fds[k].revents & (POLLHUP | POLLERR);  // at the end of its input, or dead
      if (fds[k].revents & POLLIN) {
        uint64_t done = 0;
        gone = !read_full(c.proc.fd, &done, sizeof done);
        if (!gone && done == c.current) {
          seconds[done] += std::chrono::duration<double>(Clock::now() - c.since).count();
          c.current = kNone;
          gone = !give(c);
        }
      }
      double s = std::chrono::duration<double>(Clock::now() - c.since).count();
      bool over = c.current != kNone && s > options_.compile_timeout_s;
      bool ended = gone || c.current == kNone;
      if (!over && !ended) {
        ++k;
        continue;
      }
      if (over) {
        kill(c.proc.pid, SIGKILL);
        seconds[c.current] += s;
        char why[160];
        std::snprintf(why, sizeof why, "compiling took longer than %g s (killed; LLVM stalled on this schedule); not measured", options_.compile_timeout_s);
        refused[c.current] = why;
      }
      if (!over && c.current == kNone) {
        // Told to leave, not left to read the end of its input: a child forked later holds a copy
        // of this socket's end, so closing the parent's would not end it.
        uint64_t leave = kNone;
        (void)send(c.proc.fd, &leave, sizeof leave, MSG_NOSIGNAL);
      }
      int status = c.proc.close_and_wait();
      if (!over && c.current != kNone) {
        // It died inside a compile (LLVM crashed on this kernel): refused, the rest to a new child.
        seconds[c.current] += s;
        refused[c.current] = WIFSIGNALED(status) ? "the compiler crashed on this schedule (signal " + std::to_string(WTERMSIG(status)) + "); not measured"
                                                 : "the compiler's process ended on this schedule (exit status " + std::to_string(WEXITSTATUS(status)) + "); not measured";
      }
      children.erase(children.begin() + static_cast<std::ptrdiff_t>(k));
      fds.erase(fds.begin() + static_cast<std::ptrdiff_t>(k));
      if (queue.empty()) continue;
      if (Compiler next = start(); next.proc.pid > 0) {
        children.push_back(next);
        fds.push_back({next.proc.fd, 0, 0});
        give(children.back());
      }
    }
  }
  return refused;
}

Expected<TaskData> TaskData::make(const Graph &body, uint64_t seed) {
  TaskData d;
  d.args = random_inputs(body, seed);
  AT_ASSIGN(outs, run_reference(body, d.args));
  d.expected = outs[0];
  return d;
}

void TaskData::add_producers(const std::vector<GroupProducer> &from, uint64_t seed) {
  for (const GroupProducer &p : from) {
    std::vector<Tensor> args = random_inputs(p.body, seed);
    for (size_t i = 0; i < args.size() && i < p.args.size(); ++i)
      if (p.args[i].raw()) args[i] = p.args[i];  // the model's weight
    producers.push_back({p.body, p.writes, std::move(args)});
  }
}

namespace {

/** What the child sends back: plain data through a pipe. */
struct ChildReport {
  int status;
  double median_s, min_s, stddev_s, baseline_s, handoff_ns;
  int64_t runs;
  int producers;
  char error[240];
};

ChildReport child_measure(const LoweredKernel &k, const CompiledKernel &ck, const TaskData &data, const MeasureOptions &o,
                          const std::pair<const LoweredKernel *, const CompiledKernel *> &baseline,
                          const std::vector<Measurer::Writer> &producers, PackCache &packed, ThreadPool &pool) {
  ChildReport rep{};
  rep.status = static_cast<int>(MeasureStatus::kOk);
  // One output for both: their buffers differ only where the schedules make them differ.
  Tensor shared_out(data.expected.type());
  BoundKernel cand(k, ck, data.args, shared_out, &packed);
  std::optional<BoundKernel> base;
  if (baseline.first) base.emplace(*baseline.first, *baseline.second, data.args, shared_out, &packed);
  auto run_once = [&] { cand.run(pool); };
  const Tensor &out = cand.output();
  run_once();  // the first run is checked before any timing
  auto d = compare(out, data.expected);
  if (!d || d->nan_mismatch || d->relative() > o.tolerance) {
    rep.status = static_cast<int>(MeasureStatus::kWrongResult);
    std::snprintf(rep.error, sizeof rep.error, "output differs from the reference: relative error %.3g at element %lld",
                  d ? d->relative() : -1.0, d ? static_cast<long long>(d->first_index) : -1LL);
    return rep;
  }
  for (int i = 1; i < o.warmup; ++i) run_once();
  if (base) base->run(pool);  // warm the baseline too
  std::vector<float> flush(o.flush_cache ? (64u << 20) / sizeof(float) : 0);
  // Measured with its weights in cache, a kernel that rereads its weights for every few pixels
  // looks fast; in the model they come from memory (ResNet-50's 1x1 conv 1024->256 at 14x14: 0.285 ms
  // alone against 0.42-0.53 ms inside the model), and a search that exploits the difference picks
  // schedules that lose end to end. So the weights are flushed from cache before each run.
  // The producers write their outputs into the task's inputs (after the check above: the values
  // change, not the time); the inputs are copied back after the timed runs.
  std::vector<std::unique_ptr<BoundKernel>> writers;
  for (const Measurer::Writer &w : producers) {
    const GroupProducer &p = data.producers[w.producer];
    writers.push_back(std::make_unique<BoundKernel>(*w.kernel.first, *w.kernel.second, p.args, data.args[p.writes], &packed));
  }
  auto timed = [&](BoundKernel &b) {
    if (!flush.empty())
      for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.0f;
    if (o.cold_weights) b.evict(data.cold);
    for (auto &w : writers) w->run(pool);
    auto t0 = std::chrono::steady_clock::now();
    b.run(pool);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  std::vector<double> times, base_times;
  // Alternating, so both see the same machine, and swapping which goes first in each pair, so
  // neither always finds the input the other just read in cache. Measured on ResNet-18's tasks,
  // the default schedule timed against itself (49 records): mean ratio 1.012 with the candidate
  // always first, 1.006 swapped, and 0.997 (rms 0.018) once both also share the output buffer;
  // before that the 7x7-pixel convs came out 1.03-1.07 against themselves, every time.
  // The budget is the loop's wall time: the baseline's runs and the evictions between runs count.
  // Counting only the candidate's runs made a fast candidate cost more (twice as fast took 50 ms of
  // its own runs plus 100 ms of the baseline's), so a search that finds fast schedules spent longer
  // measuring them (ResNet-18, 2000 trials: 203 s of timed runs for the model-guided search against
  // 145 s for random search); the evictions, outside the timed runs, did the same again.
  // Where the cores were while this candidate was timed (ThreadPool::handoff_ns): before and after
  // the timed runs, the larger, so a record whose runs straddled a move says so.
  double handoff_before = pool.handoff_ns();
  auto loop_start = std::chrono::steady_clock::now();
  auto spent = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - loop_start).count(); };
  double cand_spent = 0;
  while ((spent() < o.min_time_s || times.size() < 3) && static_cast<int64_t>(times.size()) < o.max_runs) {
    bool base_first = base && times.size() % 2 == 1;
    if (base_first) base_times.push_back(timed(*base));
    double s = timed(cand);
    times.push_back(s);
    cand_spent += s;
    if (base && !base_first) base_times.push_back(timed(*base));
  }
  AT_CHECK(!times.empty(), "no timed run (max_runs is validated to be at least 1)");
  std::vector<double> sorted = times;
  std::sort(sorted.begin(), sorted.end());
  size_t n = sorted.size();
  rep.median_s = median(times);
  rep.baseline_s = median(base_times);
  rep.handoff_ns = std::max(handoff_before, pool.handoff_ns());
  rep.min_s = sorted.front();
  double mean = cand_spent / static_cast<double>(n), var = 0;
  for (double t : times) var += (t - mean) * (t - mean);
  rep.stddev_s = std::sqrt(var / static_cast<double>(n));
  rep.runs = static_cast<int64_t>(n);
  rep.producers = static_cast<int>(writers.size());
  // The inputs as they were, for the next candidate's check in this child.
  for (const Measurer::Writer &w : producers) {
    Tensor in = data.args[data.producers[w.producer].writes];
    std::memcpy(in.raw(), w.pristine.raw(), in.nbytes());
  }
  return rep;
}

}  // namespace

int Measurer::Child::close_and_wait() {
  if (pid <= 0) return 0;
  close(fd);  // the child reads the end of its queue and leaves
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  pid = -1, fd = -1, measured = 0;
  return status;
}

std::string Measurer::start_child(Child &child, const std::vector<Candidate> &candidates, const TaskData &data, const Candidate &baseline) {
  // A socket pair, not pipes: the parent's send to a child that died says so (MSG_NOSIGNAL)
  // instead of raising SIGPIPE in the tuner.
  // A socket pair or a fork can fail for want of the parent's own resources (processes,
  // descriptors, memory): that says nothing about the candidate, so wait and try again, and in the
  // end report a host error, which callers never record.
  int fds[2] = {-1, -1};
  pid_t pid = -1;
  const pid_t parent = getpid();
  for (int attempt = 0;; ++attempt) {
    std::string why;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      why = std::string("socketpair: ") + std::strerror(errno);
    } else if ((pid = fork()) < 0) {
      why = std::string("fork: ") + std::strerror(errno);
      close(fds[0]), close(fds[1]);
    } else {
      break;
    }
    if (attempt >= options_.host_retries) return why + " (after " + std::to_string(attempt + 1) + " attempts)";
    std::this_thread::sleep_for(std::chrono::milliseconds(100 << std::min(attempt, 4)));
  }
  if (pid == 0) {  // the child: measure each candidate the parent names, then leave without running any destructors or atexit
    // Die with the tuner: a parent killed by a second Ctrl-C, SIGTERM or a crash takes its
    // candidate along (and if it died before this line, leave at once).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    close(fds[0]);
    signal(SIGINT, SIG_IGN);  // Ctrl-C is for the tuner, which finishes this measurement first
    signal(SIGTERM, SIG_DFL);
    ThreadPool pool(options_.threads);
    for (uint64_t i = 0; read_full(fds[1], &i, sizeof i);) {
      if (i >= candidates.size()) _exit(1);
      ChildReport rep = child_measure(*candidates[i].first, *candidates[i].second, data, options_, baseline, writers_, packed_, pool);
      if (send(fds[1], &rep, sizeof rep, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof rep)) _exit(1);
    }
    _exit(0);
  }
  close(fds[1]);
  child.pid = pid, child.fd = fds[0], child.measured = 0;
  return "";
}

MeasureResult Measurer::measure_in(Child &child, const std::vector<Candidate> &candidates, size_t i, const TaskData &data,
                                   const Candidate &baseline, double timeout_scale) {
  MeasureResult r;
  auto fail = [&](MeasureStatus status, std::string error) {
    r.status = status;
    r.error = std::move(error);
    return r;
  };
  if (child.pid <= 0)
    if (std::string why = start_child(child, candidates, data, baseline); !why.empty()) return fail(MeasureStatus::kHostError, why);
  uint64_t index = i;
  if (send(child.fd, &index, sizeof index, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof index)) {
    // It died between two candidates (nothing of this one ran): a host matter, not the candidate's.
    std::string why = std::string("the measuring process went away: ") + std::strerror(errno);  // before kill and wait reset errno
    kill(child.pid, SIGKILL);
    child.close_and_wait();
    return fail(MeasureStatus::kHostError, why);
  }
  ChildReport rep{};
  size_t got = 0;
  double timeout_s = options_.timeout_s * timeout_scale;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  bool timed_out = false;
  while (got < sizeof rep) {
    double left_ms = std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count();
    int left = static_cast<int>(std::min(left_ms, 3'600'000.0));  // poll again after an hour at most
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{child.fd, POLLIN, 0};
    int pr = poll(&p, 1, left);
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) continue;
    ssize_t n = read(child.fd, reinterpret_cast<char *>(&rep) + got, sizeof rep - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the child died before reporting
    got += static_cast<size_t>(n);
  }
  if (timed_out || got < sizeof rep) {
    if (timed_out) kill(child.pid, SIGKILL);
    int status = child.close_and_wait();
    if (timed_out) {
      char buf[80];
      std::snprintf(buf, sizeof buf, "no result within %.3g s (killed)", timeout_s);
      return fail(MeasureStatus::kTimeout, buf);
    }
    return fail(MeasureStatus::kCrash, WIFSIGNALED(status) ? std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
                                                                 strsignal(WTERMSIG(status)) + ")"
                                                           : "exited with status " + std::to_string(WEXITSTATUS(status)) + " before reporting");
  }
  ++child.measured;
  r.status = static_cast<MeasureStatus>(rep.status);
  r.error = rep.error;
  r.median_s = rep.median_s;
  r.min_s = rep.min_s;
  r.stddev_s = rep.stddev_s;
  r.runs = rep.runs;
  r.baseline_s = rep.baseline_s;
  r.handoff_ns = rep.handoff_ns;
  r.producers = rep.producers;
  return r;
}

size_t Measurer::run_batch(const std::vector<Candidate> &candidates, const TaskData &data, const Candidate &baseline,
                           const std::function<bool(size_t, const MeasureResult *)> &on_measured, const std::atomic<bool> *stop) {
  // One child measures the batch's candidates in turn; a crash or a timeout ends it, and the next
  // candidate starts a new one. A fork, exit and wait of the tuner (600-750 MiB) took 8.4 ms of
  // every 109 ms measurement when each candidate had a child of its own (ResNet-18, Zen 4).
  // A candidate that fails in a child that measured others first is measured again in a fresh
  // child: a kernel that wrote out of its bounds may have broken what the next one reads.
  Child child;
  auto measure_one = [&](size_t i, double scale) {
    bool reused = child.pid > 0 && child.measured > 0;
    MeasureResult r = measure_in(child, candidates, i, data, baseline, scale);
    if (r.status != MeasureStatus::kOk && reused) {
      child.close_and_wait();  // after a wrong result it is still alive
      r = measure_in(child, candidates, i, data, baseline, scale);
    }
    return r;
  };
  size_t i = 0;
  for (; i < candidates.size(); ++i) {
    if (stop && stop->load()) break;
    std::optional<MeasureResult> r;
    if (candidates[i].first && candidates[i].second) {
      r = measure_one(i, 1);
      for (int retry = 1; retry <= options_.timeout_retries && r->status == MeasureStatus::kTimeout && !(stop && stop->load()); ++retry)
        r = measure_one(i, static_cast<double>(1 << retry));
    }
    if (!on_measured(i, r ? &*r : nullptr)) {
      ++i;
      break;
    }
  }
  child.close_and_wait();
  return i;
}

MeasureResult Measurer::run(const LoweredKernel &k, const CompiledKernel &ck, const TaskData &data, const Candidate &baseline,
                            double timeout_scale) {
  Child child;
  MeasureResult r = measure_in(child, {{&k, &ck}}, 0, data, baseline, timeout_scale);
  child.close_and_wait();
  return r;
}

std::vector<MeasureResult> Measurer::measure(const Graph &body, const TaskData &data, const std::vector<KernelSchedule> &schedules,
                                             const std::function<bool(size_t, const MeasureResult &)> &on_result,
                                             const std::atomic<bool> *stop) {
  size_t n = schedules.size();
  std::vector<MeasureResult> results(n);
  std::vector<std::optional<LoweredKernel>> lowered(n);
  std::vector<std::optional<CompiledKernel>> compiled(n);
  std::vector<double> seconds(n, 0);
  using Clock = std::chrono::steady_clock;
  auto phase_start = Clock::now();
  auto end_phase = [&](double &into) {
    auto now = Clock::now();
    into += std::chrono::duration<double>(now - phase_start).count();
    phase_start = now;
  };
  // Lower in parallel.
  for_each_index(n, options_.threads, [&](size_t i) {
    auto t0 = std::chrono::steady_clock::now();
    if (auto st = validate_schedule(body, schedules[i]); !st) {
      results[i].status = MeasureStatus::kInvalid;
      results[i].error = st.error().message;
      return;
    }
    // Named as the runtime names it, so a deploy after tuning finds the cached object.
    auto k = lower_group(body, kernel_name(body), schedules[i]);
    seconds[i] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!k) {
      results[i].status = MeasureStatus::kCompileError;
      results[i].error = k.error().message;
      return;
    }
    lowered[i] = k.take();
  });
  end_phase(times_.lower_s);
  // Compile into the cache in children, each within the time limit (the lowering threads are
  // joined: no other thread is inside LLVM when they fork).
  if (options_.compile_timeout_s > 0 && jit_.caches()) {
    std::vector<const LoweredKernel *> todo(n, nullptr);
    for (size_t i = 0; i < n; ++i)
      if (lowered[i]) todo[i] = &*lowered[i];
    std::vector<std::string> refused = compile_guarded(todo, seconds);
    for (size_t i = 0; i < n; ++i)
      if (!refused[i].empty()) {
        results[i].status = MeasureStatus::kCompileError;
        results[i].error = refused[i];
        results[i].compile_s = seconds[i];
        lowered[i].reset();
      }
  }
  // Compile (from the cache, where the children wrote it) and link in parallel; every thread is
  // joined before the first measuring fork.
  for_each_index(n, options_.threads, [&](size_t i) {
    if (!lowered[i]) return;
    auto t0 = std::chrono::steady_clock::now();
    auto ck = jit_.compile(*lowered[i]);
    results[i].compile_s = seconds[i] + std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!ck) {
      results[i].status = MeasureStatus::kCompileError;
      results[i].error = ck.error().message;
      lowered[i].reset();
      return;
    }
    compiled[i] = ck.take();
  });
  end_phase(times_.compile_s);
  // The baseline every candidate is timed against: the task's default schedule.
  std::optional<LoweredKernel> base_k;
  std::optional<CompiledKernel> base_ck;
  if (auto bk = lower_group(body, kernel_name(body), default_schedule(body, jit_.target()))) {
    if (auto bc = jit_.compile(*bk)) base_k = bk.take(), base_ck = bc.take();
  }
  Candidate baseline{base_k ? &*base_k : nullptr, base_ck ? &*base_ck : nullptr};
  // Every weight packing the batch needs, done here once: each child inherits them.
  if (base_k)
    for (const WeightPacking &p : base_k->packings) packed_.get(data.args[p.param], p);
  for (size_t i = 0; i < n; ++i)
    if (lowered[i])
      for (const WeightPacking &p : lowered[i]->packings) packed_.get(data.args[p.param], p);
  // The producers' default kernels, run before each timed run (MeasureOptions::producers), each
  // with a copy of the input it overwrites; one that does not lower or compile is left out. Each
  // is lowered and compiled once per Measurer (a task is measured in many batches).
  size_t np = options_.producers ? data.producers.size() : 0;
  writers_.clear();
  for (size_t i = 0; i < np; ++i) {
    const GroupProducer &p = data.producers[i];
    if (p.writes < 0 || static_cast<size_t>(p.writes) >= data.args.size()) continue;
    std::string key = workload_hash(p.body);
    auto it = producer_kernels_.find(key);
    if (it == producer_kernels_.end()) {
      std::optional<std::pair<LoweredKernel, CompiledKernel>> made;
      if (auto pk = lower_group(p.body, kernel_name(p.body), default_schedule(p.body, jit_.target())))
        if (auto pc = jit_.compile(*pk)) made.emplace(pk.take(), pc.take());
      it = producer_kernels_.emplace(key, std::move(made)).first;
    }
    if (!it->second) continue;
    writers_.push_back({{&it->second->first, &it->second->second}, i, data.args[p.writes].clone()});
    for (const WeightPacking &w : it->second->first.packings) packed_.get(p.args[w.param], w);
  }
  end_phase(times_.prepare_s);
  std::vector<Candidate> candidates(n, Candidate{nullptr, nullptr});
  for (size_t i = 0; i < n; ++i)
    if (compiled[i]) candidates[i] = {&*lowered[i], &*compiled[i]};
  size_t done = run_batch(candidates, data, baseline, [&](size_t i, const MeasureResult *r) {
    if (r) {
      double compile_s = results[i].compile_s;
      results[i] = *r;
      results[i].compile_s = compile_s;
    }
    end_phase(times_.run_s);  // the caller's on_result (saving the record) is not the measurer's
    bool go_on = !on_result || on_result(i, results[i]);
    phase_start = Clock::now();
    return go_on;
  }, stop);
  writers_.clear();
  results.resize(done);
  end_phase(times_.run_s);
  return results;
}

}  // namespace autotune
