#include "codegen/Steps.h"

#include <algorithm>
#include <functional>

#include <nlohmann/json.hpp>

#include "codegen/Transform.h"
#include "ir/JsonText.h"

namespace autotune {

namespace {

constexpr int kStepsVersion = 1;

/** Whether `op` takes a loop and nothing else. */
bool loop_only(const std::string &op) {
  return op == "unroll" || op == "vectorize" || op == "parallel" || op == "distribute" || op == "partition" || op == "fission" || op == "trim" || op == "sink";
}

/** The fields each op takes besides op and stage. */
std::vector<std::string> fields_of(const std::string &op) {
  if (op == "split") return {"loop", "factor", "outer", "inner", "tail"};
  if (op == "reorder") return {"order"};
  if (op == "fuse") return {"loop", "inner", "fused"};
  if (loop_only(op)) return {"loop"};
  if (op == "pack") return {"buffer", "dims", "factor"};
  if (op == "prefetch") return {"buffer", "loop", "factor"};
  if (op == "compute_at") return {"producer", "loop"};
  if (op == "compute_inline") return {"producer"};
  if (op == "cache_write" || op == "cache_read") return {"buffer", "loop"};
  if (op == "rfactor") return {"loop", "inner"};
  return {};
}

std::string joined(const std::vector<std::string> &v) {
  std::string out;
  for (const std::string &s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::string steps_to_json(const std::vector<Step> &steps) {
  std::vector<std::string> list;
  list.reserve(steps.size());
  for (const Step &s : steps) {
    json::Object j;
    j.str("op", s.op).str("stage", s.stage);
    for (const std::string &f : fields_of(s.op)) {
      if (f == "loop") j.str(f, s.loop);
      else if (f == "factor") j.num(f, s.factor);
      else if (f == "outer") j.str(f, s.names.at(0));
      else if (f == "inner") j.str(f, s.names.at(s.op == "split" ? 1 : 0));
      else if (f == "tail") {
        if (s.names.size() > 2) j.str(f, s.names[2]);  // optional: the default suffix _tail is not written
      }
      else if (f == "fused") j.str(f, s.names.at(1));
      else if (f == "order") j.raw(f, json::array_of_strings(s.names));
      else if (f == "producer") j.str(f, s.producer);
      else if (f == "buffer") j.str(f, s.buffer);
      else if (f == "dims") j.raw(f, json::array_of_ints(s.dims));
    }
    list.push_back(j.text());
  }
  return json::Object().num("version", kStepsVersion).raw("steps", json::array_of(list)).text();
}

Expected<std::vector<Step>> steps_from_json(const std::string &text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error("the step list is not a JSON object");
  if (!j.contains("version") || !j["version"].is_number_integer()) return make_error("the step list has no version");
  if (j["version"] != kStepsVersion)
    return make_error("step list version " + j["version"].dump() + " is not supported (this autotune reads version " + std::to_string(kStepsVersion) + ")");
  if (!j.contains("steps") || !j["steps"].is_array()) return make_error("the step list has no \"steps\" array");
  std::vector<Step> out;
  for (size_t i = 0; i < j["steps"].size(); ++i) {
    const nlohmann::json &x = j["steps"][i];
    std::string where = "step " + std::to_string(i + 1);
    if (!x.is_object()) return make_error(where + " is not an object");
    auto str = [&](const char *f) -> Expected<std::string> {
      if (!x.contains(f) || !x[f].is_string() || x[f].get<std::string>().empty()) return make_error(where + " needs a non-empty string \"" + f + "\"");
      return x[f].get<std::string>();
    };
    Step s;
    AT_ASSIGN(op, str("op"));
    AT_ASSIGN(stage, str("stage"));
    s.op = op, s.stage = stage;
    std::vector<std::string> fields = fields_of(op);
    if (fields.empty()) return make_error(where + " has an unknown op \"" + op + "\"");
    for (auto &[key, _] : x.items())
      if (key != "op" && key != "stage" && std::find(fields.begin(), fields.end(), key) == fields.end())
        return make_error(where + " (" + op + ") has an unknown field \"" + key + "\"");
    for (const std::string &f : fields) {
      if (f == "factor") {
        if (!x.contains(f) || !x[f].is_number_integer()) return make_error(where + " needs an integer \"factor\"");
        s.factor = x[f].get<int64_t>();
      } else if (f == "dims") {
        if (!x.contains(f) || !x[f].is_array()) return make_error(where + " needs an array \"dims\"");
        for (const auto &n : x[f]) {
          if (!n.is_number_integer()) return make_error(where + ": \"dims\" holds a non-integer");
          s.dims.push_back(n.get<int64_t>());
        }
      } else if (f == "order") {
        if (!x.contains(f) || !x[f].is_array()) return make_error(where + " needs an array \"order\"");
        for (const auto &n : x[f]) {
          if (!n.is_string()) return make_error(where + ": \"order\" holds a non-string");
          s.names.push_back(n.get<std::string>());
        }
      } else if (f == "tail") {
        if (x.contains(f)) {
          AT_ASSIGN(v, str("tail"));
          s.names.push_back(v);
        }
      } else {
        AT_ASSIGN(v, str(f.c_str()));
        if (f == "loop") s.loop = v;
        else if (f == "producer") s.producer = v;
        else if (f == "buffer") s.buffer = v;
        else s.names.push_back(v);  // outer, inner, fused: in the order fields_of lists them
      }
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string to_string(const Step &s) {
  std::string in = " of stage " + s.stage;
  if (s.op == "split") return "split loop " + s.loop + in + " by " + std::to_string(s.factor) + " into " + joined(s.names);
  if (s.op == "reorder") return "reorder" + in + " to " + joined(s.names);
  if (s.op == "fuse") return "fuse loops " + s.loop + ", " + (s.names.empty() ? "" : s.names[0]) + in + " into " + (s.names.size() > 1 ? s.names[1] : "");
  if (loop_only(s.op)) return s.op + " loop " + s.loop + in;
  if (s.op == "pack") return "pack " + s.buffer + " by " + std::to_string(s.factor);
  if (s.op == "prefetch") return "prefetch " + s.buffer + " " + std::to_string(s.factor) + " ahead in loop " + s.loop + in;
  if (s.op == "compute_at") return "compute " + s.producer + " at loop " + s.loop + in;
  if (s.op == "compute_inline") return "inline " + s.producer + " into stage " + s.stage;
  if (s.op == "cache_write" || s.op == "cache_read") return s.op + " " + s.buffer + " at loop " + s.loop + in;
  if (s.op == "rfactor") return "rfactor loop " + s.loop + " over " + (s.names.empty() ? "" : s.names[0]) + in;
  return s.op + in;
}

Expected<LoweredKernel> apply_step(const LoweredKernel &k, const Step &s) {
  if (fields_of(s.op).empty()) return make_error("unknown op " + s.op);
  if (s.op == "compute_at") return compute_at(k, s.producer, s.stage, s.loop);
  if (s.op == "compute_inline") return compute_inline(k, s.producer, s.stage);
  if (s.op == "pack") return pack(k, s.buffer, s.dims, s.factor);
  if (s.op == "fission") return fission(k, s.stage, s.loop);
  AT_ASSIGN(i, stage_index(k, s.stage));
  LoweredKernel out = k;
  KernelStage &st = out.stages[i];
  auto need = [&](size_t n) -> Status {
    if (s.names.size() != n) return make_error(s.op + " takes " + std::to_string(n) + " new loop names");
    return Status::ok();
  };
  if (s.op == "parallel" || s.op == "cache_write" || s.op == "cache_read") {
    AT_ASSIGN(ns, s.op == "parallel" ? parallelize(st, s.loop) : s.op == "cache_write" ? cache_write(st, s.buffer, s.loop) : cache_read(st, s.buffer, s.loop));
    st = ns;
    return out;
  }
  Expected<loop::Stmt> body = make_error("");
  if (s.op == "split") {
    if (s.names.size() != 3) AT_TRY(need(2));  // outer, inner and an optional tail suffix
    body = split(st.body, s.loop, s.factor, s.names[0], s.names[1], s.names.size() > 2 ? s.names[2] : "_tail");
  } else if (s.op == "reorder") {
    body = reorder(st.body, s.names);
  } else if (s.op == "fuse") {
    AT_TRY(need(2));
    body = fuse(st.body, s.loop, s.names[0], s.names[1]);
  } else if (s.op == "unroll") {
    body = unroll(st.body, s.loop);
  } else if (s.op == "distribute") {
    body = distribute(st.body, s.loop);
  } else if (s.op == "partition") {
    body = partition(st.body, s.loop);
  } else if (s.op == "trim") {
    body = trim(st.body, s.loop);
  } else if (s.op == "sink") {
    body = sink(st.body, s.loop);
  } else if (s.op == "rfactor") {
    AT_TRY(need(1));
    body = rfactor(st.body, s.loop, s.names[0]);
  } else if (s.op == "prefetch") {
    auto b = std::find_if(k.buffers.begin(), k.buffers.end(), [&](const loop::Buffer &x) { return x->name == s.buffer; });
    if (b == k.buffers.end()) return make_error("prefetch: there is no buffer " + s.buffer);
    body = prefetch_stream(st.body, s.loop, *b, s.factor);
  } else {
    body = vectorize(st.body, s.loop);
  }
  if (!body) return body.error();
  st.body = *body;
  return out;
}

namespace {
/** `cur` with steps[from..] applied in order, `after(i, kernel)` called after each; errors as replay's. */
Expected<LoweredKernel> replay_from(LoweredKernel cur, const std::vector<Step> &steps, size_t from,
                                    const std::function<void(size_t, const LoweredKernel &)> &after) {
  for (size_t i = from; i < steps.size(); ++i) {
    auto next = apply_step(cur, steps[i]);
    if (!next) return make_error("step " + std::to_string(i + 1) + ", " + to_string(steps[i]) + ": " + next.error().message);
    cur = next.take();
    if (after) after(i, cur);
  }
  return cur;
}
}  // namespace

Expected<LoweredKernel> replay(const LoweredKernel &k, const std::vector<Step> &steps) { return replay_from(k, steps, 0, nullptr); }

namespace {
/** Every field of a step, separated by bytes no name holds: an exact key. */
void append_key(std::string &key, const Step &s) {
  auto field = [&](const std::string &f) { key += f, key += '\x1f'; };
  field(s.op), field(s.stage), field(s.loop), field(std::to_string(s.factor));
  for (const std::string &n : s.names) key += n, key += '\x1e';
  field(""), field(s.producer), field(s.buffer);
  for (int64_t d : s.dims) key += std::to_string(d), key += '\x1e';
  key += '\x1d';
}
}  // namespace

Expected<LoweredKernel> ReplayCache::replay(const LoweredKernel &k, const std::vector<Step> &steps) {
  std::string base = k.name + '\x1f' + k.identity() + '\x1f';
  for (const IndexCheck &c : k.index_checks) base += std::to_string(c.param) + ',' + std::to_string(c.extent) + ',' + c.node + '\x1e';
  // keys[i], at a boundary (the next step is another stage's): the key of the prefix steps[0..i].
  auto boundary = [&](size_t i) { return i + 1 < steps.size() && steps[i + 1].stage != steps[i].stage; };
  std::vector<std::string> keys(steps.size());
  std::string key = base + '\x1d';
  for (size_t i = 0; i < steps.size(); ++i) {
    append_key(key, steps[i]);
    if (boundary(i)) keys[i] = key;
  }
  LoweredKernel cur = k;
  size_t from = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = steps.size(); i-- > 0;) {
      if (!boundary(i)) continue;
      if (auto it = kernels_.find(keys[i]); it != kernels_.end()) {
        cur = it->second, from = i + 1;
        ++hits_;
        break;
      }
    }
  }
  return replay_from(std::move(cur), steps, from, [&](size_t i, const LoweredKernel &made) {
    if (boundary(i)) keep(kernels_, keys[i], made);
  });
}

void ReplayCache::keep(std::unordered_map<std::string, LoweredKernel> &kept, const std::string &key, const LoweredKernel &k) {
  std::lock_guard<std::mutex> lock(mu_);
  if (kept.size() >= max_) kept.clear();
  kept.emplace(key, k);
}

Expected<LoweredKernel> ReplayCache::made(const std::string &key, const std::function<Expected<LoweredKernel>()> &make) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = made_.find(key); it != made_.end()) return it->second;
  }
  AT_ASSIGN(k, make());  // unlocked: two threads may make one kernel at once, and keep the same
  keep(made_, key, k);
  return k;
}

}  // namespace autotune
