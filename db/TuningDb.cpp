#include "db/TuningDb.h"

#include <sqlite3.h>

#include "ir/Hash.h"
#include "ir/Stats.h"
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <ctime>
#include <mutex>
#include <random>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace autotune {
namespace {

/** A prepared statement that finalizes itself. */
class Stmt {
 public:
  Stmt(sqlite3 *db, const char *sql) { rc_ = sqlite3_prepare_v2(db, sql, -1, &s_, nullptr); }
  ~Stmt() { sqlite3_finalize(s_); }
  bool ok() const { return rc_ == SQLITE_OK; }
  Stmt &bind(int i, const std::string &v) { sqlite3_bind_text(s_, i, v.c_str(), -1, SQLITE_TRANSIENT); return *this; }
  Stmt &bind(int i, int64_t v) { sqlite3_bind_int64(s_, i, v); return *this; }
  Stmt &bind(int i, double v) { sqlite3_bind_double(s_, i, v); return *this; }
  Stmt &bind_blob(int i, const std::string &v) {
    sqlite3_bind_blob(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    return *this;
  }
  std::string blob(int c) const {
    const void *p = sqlite3_column_blob(s_, c);
    return p ? std::string(static_cast<const char *>(p), static_cast<size_t>(sqlite3_column_bytes(s_, c))) : std::string();
  }
  int step() { return sqlite3_step(s_); }
  std::string text(int c) const {
    const unsigned char *t = sqlite3_column_text(s_, c);
    return t ? reinterpret_cast<const char *>(t) : "";
  }
  int64_t i64(int c) const { return sqlite3_column_int64(s_, c); }
  double f64(int c) const { return sqlite3_column_double(s_, c); }
  bool null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }

 private:
  sqlite3_stmt *s_ = nullptr;
  int rc_;
};

/**
 * 128 random bits as hex: a record's identity across database files. The generator reseeds
 * whenever the process id changes: processes forked from one parent would otherwise share its
 * state and produce the same uids.
 */
std::string new_uid() {
  static std::mutex mu;
  static std::mt19937_64 rng;
  static pid_t seeded_for = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (seeded_for != ::getpid()) {
    std::random_device rd;
    rng.seed((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid()) ^
             static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    seeded_for = ::getpid();
  }
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(rng()), static_cast<unsigned long long>(rng()));
  return buf;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

const char *kSchemaV1 = R"(
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS workloads(
  id INTEGER PRIMARY KEY, hash TEXT NOT NULL, target TEXT NOT NULL, ir TEXT NOT NULL, flops REAL NOT NULL,
  UNIQUE(hash, target));
CREATE TABLE IF NOT EXISTS records(
  id INTEGER PRIMARY KEY, uid TEXT NOT NULL UNIQUE, workload_id INTEGER NOT NULL REFERENCES workloads(id),
  schedule TEXT NOT NULL, status TEXT NOT NULL, error TEXT NOT NULL DEFAULT '',
  median_s REAL, min_s REAL, stddev_s REAL, runs INTEGER NOT NULL DEFAULT 0, compile_s REAL,
  baseline_s REAL NOT NULL DEFAULT 0, phase TEXT NOT NULL DEFAULT 'trial', tool_version TEXT NOT NULL,
  created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS records_workload ON records(workload_id, status);
CREATE TABLE IF NOT EXISTS plans(
  model_hash TEXT NOT NULL, target TEXT NOT NULL, grp INTEGER NOT NULL,
  workload_id INTEGER NOT NULL REFERENCES workloads(id), record_id INTEGER REFERENCES records(id),
  PRIMARY KEY(model_hash, target, grp));
)";

const char *kSchemaV2 = R"(
ALTER TABLE records ADD COLUMN features TEXT NOT NULL DEFAULT '';
ALTER TABLE records ADD COLUMN feature_version INTEGER NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS cost_models(
  id INTEGER PRIMARY KEY, target TEXT NOT NULL, feature_version INTEGER NOT NULL, records INTEGER NOT NULL,
  created_at TEXT NOT NULL, model BLOB NOT NULL);
)";

// v3: the fusion partition chosen per model and target (ir/Partition's moves from FuseOps's
// partition, as JSON, with what each tried move measured).
const char *kSchemaV3 = R"(
CREATE TABLE IF NOT EXISTS partitions(
  model_hash TEXT NOT NULL, target TEXT NOT NULL, moves TEXT NOT NULL, report TEXT NOT NULL DEFAULT '',
  created_at TEXT NOT NULL, PRIMARY KEY(model_hash, target));
)";

// v4: where the cores were while a record was measured (MeasureResult::handoff_ns; 0: unknown or
// one thread), so ratios taken with the cores near and far apart are not compared as alike.
const char *kSchemaV4 = R"(
ALTER TABLE records ADD COLUMN handoff_ns REAL NOT NULL DEFAULT 0;
)";

TuningRecord read_record(Stmt &q) {
  // Columns: r.id, w.hash, w.target, schedule, status, error, median_s, min_s, stddev_s, runs, compile_s, tool_version,
  // created_at, baseline_s
  TuningRecord r;
  r.id = q.i64(0);
  r.workload_hash = q.text(1);
  r.target = q.text(2);
  r.schedule = q.text(3);
  r.status = q.text(4);
  r.error = q.text(5);
  r.median_s = q.f64(6);
  r.min_s = q.f64(7);
  r.stddev_s = q.f64(8);
  r.runs = q.i64(9);
  r.compile_s = q.f64(10);
  r.tool_version = q.text(11);
  r.created_at = q.text(12);
  r.baseline_s = q.f64(13);
  r.phase = q.text(14);
  r.uid = q.text(15);
  r.features = q.text(16);
  r.feature_version = static_cast<int>(q.i64(17));
  r.handoff_ns = q.f64(18);
  return r;
}

const char *kRecordColumns =
    "r.id, w.hash, w.target, r.schedule, r.status, r.error, r.median_s, r.min_s, r.stddev_s, r.runs, r.compile_s, "
    "r.tool_version, r.created_at, r.baseline_s, r.phase, r.uid, r.features, r.feature_version, r.handoff_ns FROM records r JOIN "
    "workloads w ON r.workload_id = w.id";

}  // namespace

double near_handoff_ns(std::vector<double> handoffs) {
  handoffs.erase(std::remove_if(handoffs.begin(), handoffs.end(), [](double h) { return !(h > 0); }), handoffs.end());
  if (handoffs.empty()) return 0;
  auto at = handoffs.begin() + static_cast<std::ptrdiff_t>(handoffs.size() / 10);
  std::nth_element(handoffs.begin(), at, handoffs.end());
  return *at;
}

double apart_slowdown(const std::vector<double> &near_baselines, const std::vector<double> &apart_baselines) {
  if (near_baselines.empty() || apart_baselines.empty()) return 1;
  return median(apart_baselines) / median(near_baselines);
}

TuningDb::~TuningDb() {
  if (db_) sqlite3_close_v2(db_);
}

Status TuningDb::exec(const std::string &sql) {
  char *err = nullptr;
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    return make_error(path_ + ": " + msg);
  }
  return Status::ok();
}

Expected<std::unique_ptr<TuningDb>> TuningDb::open(const std::string &path, DbAccess access) {
  std::unique_ptr<TuningDb> d(new TuningDb());
  d->path_ = path;
  bool read_only = access == DbAccess::kReadOnly;
  int flags = (read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) | SQLITE_OPEN_FULLMUTEX;
  if (sqlite3_open_v2(path.c_str(), &d->db_, flags, nullptr) != SQLITE_OK)
    return make_error(path + ": cannot open database: " + std::string(d->db_ ? sqlite3_errmsg(d->db_) : "out of memory"));
  sqlite3_busy_timeout(d->db_, 30000);  // concurrent tuners wait for each other's short transactions
  // Reading the schema fails cleanly on a file that is not SQLite or is corrupt.
  {
    Stmt probe(d->db_, "SELECT count(*) FROM sqlite_master");
    if (!probe.ok() || probe.step() != SQLITE_ROW)
      return make_error(path + ": not a tuning database (" + std::string(sqlite3_errmsg(d->db_)) + ")");
  }  // finalized here: journal_mode cannot change while a statement is open
  if (read_only) {
    AT_ASSIGN(version, d->schema_version());
    if (version != kDbSchemaVersion)
      return make_error(path + ": schema version " + std::to_string(version) + " cannot be read by this autotune (it reads version " +
                        std::to_string(kDbSchemaVersion) + ")" +
                        (version < kDbSchemaVersion ? "; a writing command (autotune tune, db import) migrates it, e.g. 'autotune db import --db " +
                                                         path + " --input /dev/null', which adds nothing"
                                                   : "; upgrade autotune"));
    return d;
  }
  AT_TRY(d->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON;"));
  AT_TRY(d->migrate());
  return d;
}

Expected<int> TuningDb::schema_version() {
  bool has_tables = false;
  {
    Stmt q(db_, "SELECT count(*) FROM sqlite_master WHERE type='table'");
    if (q.ok() && q.step() == SQLITE_ROW) has_tables = q.i64(0) > 0;
  }
  if (!has_tables) return 0;
  Stmt q(db_, "SELECT value FROM meta WHERE key='schema_version'");
  if (!q.ok() || q.step() != SQLITE_ROW) return make_error(path_ + ": not a tuning database (no schema version)");
  return std::atoi(q.text(0).c_str());
}

Status TuningDb::migrate() {
  auto done = in_write_transaction<bool>([&]() -> Expected<bool> {
    AT_ASSIGN(version, schema_version());
    if (version > kDbSchemaVersion)
      return make_error(path_ + ": database schema version " + std::to_string(version) + " is newer than this autotune's (" +
                        std::to_string(kDbSchemaVersion) + "); upgrade autotune to use it");
    // Migrations, in order: each takes the schema from version i to i + 1.
    static const std::vector<const char *> migrations = {kSchemaV1, kSchemaV2, kSchemaV3, kSchemaV4};
    for (int v = version; v < kDbSchemaVersion; ++v) AT_TRY(exec(migrations[v]));
    if (version != kDbSchemaVersion)
      AT_TRY(exec("INSERT OR REPLACE INTO meta(key, value) VALUES('schema_version', '" + std::to_string(kDbSchemaVersion) + "')"));
    return true;
  });
  if (!done) return done.error();
  return Status::ok();
}

/**
 * The write lock is taken first (BEGIN IMMEDIATE, waited for under the busy timeout): a read
 * inside an autocommit write would hold a snapshot that another writer can invalidate, and SQLite
 * then fails at once instead of waiting. A failed COMMIT (a full disk, say) leaves the transaction
 * open, so it is rolled back too: the handle is never left inside a transaction.
 */
template <typename T, typename F>
Expected<T> TuningDb::in_write_transaction(F body) {
  auto exec_ok = [&](const char *sql) { return sqlite3_exec(db_, sql, nullptr, nullptr, nullptr) == SQLITE_OK; };
  if (!exec_ok("BEGIN IMMEDIATE")) return make_error(path_ + ": cannot start a write: " + sqlite3_errmsg(db_));
  Expected<T> r = body();
  if (!r) {
    exec_ok("ROLLBACK");
    return r;
  }
  if (!exec_ok("COMMIT")) {
    std::string msg = sqlite3_errmsg(db_);
    if (!sqlite3_get_autocommit(db_)) exec_ok("ROLLBACK");
    return make_error(path_ + ": cannot commit: " + msg);
  }
  return r;
}

Expected<int64_t> TuningDb::upsert_workload(const std::string &hash, const std::string &target, const std::string &ir, double flops) {
  return in_write_transaction<int64_t>([&] { return upsert_workload_unlocked(hash, target, ir, flops); });
}

Expected<int64_t> TuningDb::add_record(const TuningRecord &r) {
  return in_write_transaction<int64_t>([&] { return add_record_unlocked(r); });
}

Expected<int64_t> TuningDb::upsert_workload_unlocked(const std::string &hash, const std::string &target, const std::string &ir,
                                                   double flops) {
  {
    Stmt ins(db_, "INSERT OR IGNORE INTO workloads(hash, target, ir, flops) VALUES(?, ?, ?, ?)");
    ins.bind(1, hash).bind(2, target).bind(3, ir).bind(4, flops);
    if (ins.step() != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  }
  Stmt q(db_, "SELECT id, ir FROM workloads WHERE hash = ? AND target = ?");
  q.bind(1, hash).bind(2, target);
  if (q.step() != SQLITE_ROW) return make_error(path_ + ": workload " + hash + " vanished");
  if (q.text(1) != ir)
    return make_error(path_ + ": workload " + hash + " on " + target +
                      " already has a different IR (a hash collision or a damaged record); its records would be mixed up");
  return q.i64(0);
}

Expected<int64_t> TuningDb::add_record_unlocked(const TuningRecord &r) {
  int64_t wid;
  {
    Stmt w(db_, "SELECT id FROM workloads WHERE hash = ? AND target = ?");
    w.bind(1, r.workload_hash).bind(2, r.target);
    if (w.step() != SQLITE_ROW) return make_error(path_ + ": record for unknown workload " + r.workload_hash);
    wid = w.i64(0);
  }
  Stmt ins(db_,
           "INSERT INTO records(workload_id, schedule, status, error, median_s, min_s, stddev_s, runs, compile_s, tool_version, "
           "created_at, baseline_s, phase, uid, features, feature_version, handoff_ns) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  ins.bind(1, wid).bind(2, r.schedule).bind(3, r.status).bind(4, r.error).bind(5, r.median_s).bind(6, r.min_s)
      .bind(7, r.stddev_s).bind(8, r.runs).bind(9, r.compile_s).bind(10, r.tool_version)
      .bind(11, r.created_at.empty() ? now_utc() : r.created_at).bind(12, r.baseline_s).bind(13, r.phase).bind(14, r.uid.empty() ? new_uid() : r.uid)
      .bind(15, r.features).bind(16, static_cast<int64_t>(r.feature_version)).bind(17, r.handoff_ns);
  if (ins.step() != SQLITE_DONE) return make_error(path_ + ": cannot add a record: " + sqlite3_errmsg(db_));
  return static_cast<int64_t>(sqlite3_last_insert_rowid(db_));
}

Expected<std::optional<TuningRecord>> TuningDb::best(const std::string &hash, const std::string &target) {
  AT_ASSIGN(scored, best_scored(hash, target));
  if (!scored) return std::optional<TuningRecord>();
  return std::optional<TuningRecord>(scored->record);
}

Expected<std::optional<TuningDb::Scored>> TuningDb::best_scored(const std::string &hash, const std::string &target) {
  AT_ASSIGN(all, ranked(hash, target));
  if (all.empty()) return std::optional<Scored>();
  return std::optional<Scored>(std::move(all.front()));
}

Expected<std::vector<TuningDb::Scored>> TuningDb::ranked(const std::string &hash, const std::string &target) {
  AT_ASSIGN(recs, records(hash, target));
  struct Score {
    std::vector<double> ratios, near, apart;
    const TuningRecord *latest = nullptr;
  };
  std::vector<double> handoffs;
  for (const TuningRecord &r : recs) handoffs.push_back(r.handoff_ns);
  double near_ns = near_handoff_ns(std::move(handoffs));
  std::map<std::string, Score> by_schedule;
  for (const TuningRecord &r : recs) {
    if (r.status != "ok" || !(r.median_s > 0)) continue;  // a time of 0 would rank as infinitely fast
    Score &s = by_schedule[r.schedule];
    s.ratios.push_back(r.relative());
    (cores_apart(r.handoff_ns, near_ns) ? s.apart : s.near).push_back(r.relative());
    s.latest = &r;
  }
  struct Ranked {
    int tier;
    double score;
    const Score *s;
  };
  std::vector<Ranked> order;
  for (auto &[schedule, s] : by_schedule) {
    double score = s.near.empty() || s.apart.empty() ? median(s.ratios) : std::max(median(s.near), median(s.apart));
    order.push_back({static_cast<int>(std::min<size_t>(s.ratios.size(), kConfirmations)), score, &s});
  }
  // Confirmed first, then by score; ties keep the schedules' JSON order (the map's), as before.
  std::stable_sort(order.begin(), order.end(), [](const Ranked &a, const Ranked &b) { return a.tier != b.tier ? a.tier > b.tier : a.score < b.score; });
  std::vector<Scored> out;
  for (const Ranked &r : order) out.push_back(Scored{*r.s->latest, r.score, static_cast<int64_t>(r.s->ratios.size())});
  return out;
}

Expected<std::vector<TuningRecord>> TuningDb::records(const std::string &hash, const std::string &target) {
  std::string sql = std::string("SELECT ") + kRecordColumns + " WHERE w.hash = ? AND w.target = ? ORDER BY r.id";
  Stmt q(db_, sql.c_str());
  q.bind(1, hash).bind(2, target);
  std::vector<TuningRecord> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) out.push_back(read_record(q));
  if (rc != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  return out;
}

Expected<std::optional<std::vector<std::optional<TuningRecord>>>> TuningDb::plan(const std::string &model_hash, const std::string &target) {
  Stmt q(db_, "SELECT grp, record_id FROM plans WHERE model_hash = ? AND target = ? ORDER BY grp");
  q.bind(1, model_hash).bind(2, target);
  std::vector<std::pair<int64_t, int64_t>> rows;  // group, record (0: the default)
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) rows.emplace_back(q.i64(0), q.null(1) ? 0 : q.i64(1));
  if (rc != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  if (rows.empty()) return std::optional<std::vector<std::optional<TuningRecord>>>();
  std::vector<std::optional<TuningRecord>> out(rows.size());
  for (const auto &[g, id] : rows) {
    if (g < 0 || g >= static_cast<int64_t>(rows.size())) return make_error(path_ + ": the plan of model " + model_hash + " has a gap at group " + std::to_string(g));
    if (id == 0) continue;
    std::string sql = std::string("SELECT ") + kRecordColumns + " WHERE r.id = ?";
    Stmt r(db_, sql.c_str());
    r.bind(1, id);
    if (r.step() != SQLITE_ROW) return make_error(path_ + ": the plan of model " + model_hash + " names record " + std::to_string(id) + ", which is not there");
    out[static_cast<size_t>(g)] = read_record(r);
  }
  return std::optional<std::vector<std::optional<TuningRecord>>>(std::move(out));
}

Status TuningDb::save_partition(const std::string &model_hash, const std::string &target, const std::string &moves,
                                const std::string &report) {
  auto saved = in_write_transaction<bool>([&]() -> Expected<bool> {
    Stmt ins(db_, "INSERT OR REPLACE INTO partitions(model_hash, target, moves, report, created_at) VALUES(?, ?, ?, ?, datetime('now'))");
    ins.bind(1, model_hash).bind(2, target).bind(3, moves).bind(4, report);
    if (ins.step() != SQLITE_DONE) return make_error(path_ + ": cannot save the partition: " + sqlite3_errmsg(db_));
    return true;
  });
  if (!saved) return saved.error();
  return Status::ok();
}

Expected<std::optional<std::string>> TuningDb::partition(const std::string &model_hash, const std::string &target) {
  Stmt q(db_, "SELECT moves FROM partitions WHERE model_hash = ? AND target = ?");
  q.bind(1, model_hash).bind(2, target);
  int rc = q.step();
  if (rc == SQLITE_ROW) return std::optional<std::string>(q.text(0));
  if (rc != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  return std::optional<std::string>();
}

Expected<std::vector<TuningDb::SavedPartition>> TuningDb::partitions() {
  Stmt q(db_, "SELECT model_hash, target, moves, report, created_at FROM partitions ORDER BY created_at, model_hash, target");
  std::vector<SavedPartition> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) out.push_back({q.text(0), q.text(1), q.text(2), q.text(3), q.text(4)});
  if (rc != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  return out;
}

Expected<std::vector<WorkloadInfo>> TuningDb::workloads() {
  Stmt q(db_,
         "SELECT w.id, w.hash, w.target, w.ir, w.flops, count(r.id), sum(r.status = 'ok'), min(CASE WHEN r.status = 'ok' THEN "
         "r.median_s END) FROM workloads w LEFT JOIN records r ON r.workload_id = w.id GROUP BY w.id ORDER BY w.id");
  std::vector<WorkloadInfo> out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    WorkloadInfo w{q.i64(0), q.text(1), q.text(2), q.text(3), q.f64(4), q.i64(5), q.i64(6), std::nullopt};
    if (!q.null(7)) w.best_s = q.f64(7);
    out.push_back(std::move(w));
  }
  if (rc != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  return out;
}

Status TuningDb::save_plan(const std::string &model_hash, const std::string &target,
                           const std::vector<std::pair<std::string, int64_t>> &plan) {
  auto saved = in_write_transaction<bool>([&]() -> Expected<bool> {
    Stmt del(db_, "DELETE FROM plans WHERE model_hash = ? AND target = ?");
    del.bind(1, model_hash).bind(2, target);
    if (del.step() != SQLITE_DONE) return make_error(path_ + ": cannot replace the plan: " + sqlite3_errmsg(db_));
    for (size_t g = 0; g < plan.size(); ++g) {
      Stmt ins(db_,
               "INSERT INTO plans(model_hash, target, grp, workload_id, record_id) SELECT ?, ?, ?, id, NULLIF(?, 0) FROM workloads "
               "WHERE hash = ? AND target = ?");
      ins.bind(1, model_hash).bind(2, target).bind(3, static_cast<int64_t>(g)).bind(4, plan[g].second).bind(5, plan[g].first).bind(6, target);
      if (ins.step() != SQLITE_DONE) return make_error(path_ + ": cannot save the plan: " + sqlite3_errmsg(db_));
    }
    return true;
  });
  if (!saved) return saved.error();
  return Status::ok();
}

Expected<std::string> TuningDb::export_jsonl() {
  Stmt q(db_,
         "SELECT w.hash, w.target, w.ir, w.flops, r.schedule, r.status, r.error, r.median_s, r.min_s, r.stddev_s, r.runs, "
         "r.compile_s, r.tool_version, r.created_at, r.baseline_s, r.phase, r.uid, r.features, r.feature_version, r.handoff_ns FROM records r "
         "JOIN workloads w ON r.workload_id = w.id ORDER BY r.id");
  std::string out;
  int rc;
  while ((rc = q.step()) == SQLITE_ROW) {
    nlohmann::json j{{"workload", q.text(0)}, {"target", q.text(1)}, {"ir", q.text(2)}, {"flops", q.f64(3)},
                     {"schedule", q.text(4)}, {"status", q.text(5)}, {"error", q.text(6)}, {"median_s", q.f64(7)},
                     {"min_s", q.f64(8)}, {"stddev_s", q.f64(9)}, {"runs", q.i64(10)}, {"compile_s", q.f64(11)},
                     {"tool_version", q.text(12)}, {"created_at", q.text(13)}, {"baseline_s", q.f64(14)}, {"phase", q.text(15)}, {"uid", q.text(16)}};
    if (!q.text(17).empty()) j["features"] = q.text(17), j["feature_version"] = q.i64(18);
    if (q.f64(19) > 0) j["handoff_ns"] = q.f64(19);
    out += j.dump() + "\n";
  }
  if (rc != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  return out;
}

namespace {

bool known_status(const std::string &s) {
  for (const char *k : {"ok", "invalid", "compile_error", "timeout", "crash", "wrong_result"})
    if (s == k) return true;
  return false;
}

/** A record read from one line of an export, checked on its own; the error says what is wrong. */
struct ImportLine {
  TuningRecord record;
  std::string ir;
  double flops = 0;
};

Expected<ImportLine> parse_import_line(const std::string &line) {
  nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return make_error("not a JSON object");
  ImportLine l;
  TuningRecord &r = l.record;
  try {
    r.workload_hash = j.at("workload").get<std::string>();
    r.target = j.at("target").get<std::string>();
    r.schedule = j.at("schedule").get<std::string>();
    r.status = j.at("status").get<std::string>();
    r.error = j.value("error", "");
    r.median_s = j.value("median_s", 0.0);
    r.min_s = j.value("min_s", 0.0);
    r.stddev_s = j.value("stddev_s", 0.0);
    r.runs = j.value("runs", int64_t{0});
    r.compile_s = j.value("compile_s", 0.0);
    r.baseline_s = j.value("baseline_s", 0.0);
    r.phase = j.value("phase", std::string("trial"));
    r.uid = j.value("uid", std::string());
    r.tool_version = j.value("tool_version", std::string(kToolVersion));
    r.created_at = j.value("created_at", now_utc());
    r.features = j.value("features", std::string());
    r.feature_version = j.value("feature_version", 0);
    r.handoff_ns = j.value("handoff_ns", 0.0);
    l.ir = j.at("ir").get<std::string>();
    l.flops = j.value("flops", 0.0);
  } catch (const std::exception &e) {
    return make_error(std::string("bad record: ") + e.what());
  }
  if (fnv1a_hex(l.ir) != r.workload_hash) return make_error("workload " + r.workload_hash + " does not match the hash of its IR");
  if (!known_status(r.status)) return make_error("unknown status '" + r.status + "'");
  if (r.phase != "trial" && r.phase != "confirmation") return make_error("unknown phase '" + r.phase + "'");
  if (nlohmann::json::parse(r.schedule, nullptr, false).is_discarded()) return make_error("schedule is not JSON");
  if (!r.features.empty() && !nlohmann::json::parse(r.features, nullptr, false).is_array()) return make_error("features are not a JSON array");
  auto finite_nonneg = [](double v) { return std::isfinite(v) && v >= 0; };
  for (double v : {r.median_s, r.min_s, r.stddev_s, r.compile_s, r.baseline_s, r.handoff_ns, l.flops})
    if (!finite_nonneg(v)) return make_error("times and flops must be finite and not negative");
  if (r.status == "ok" && !(r.median_s > 0 && r.min_s > 0 && r.min_s <= r.median_s && r.runs > 0))
    return make_error("an ok record needs 0 < min_s <= median_s and runs > 0 (it would rank as infinitely fast)");
  return l;
}

}  // namespace

Expected<int64_t> TuningDb::import_jsonl(const std::string &text, const std::string &label) {
  // Everything is checked before anything is written: a bad line rejects the file whole.
  std::vector<ImportLine> lines;
  {
    std::istringstream in(text);
    std::string line;
    for (int64_t lineno = 1; std::getline(in, line); ++lineno) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto l = parse_import_line(line);
      if (!l) return make_error(label + ":" + std::to_string(lineno) + ": " + l.error().message);
      lines.push_back(l.take());
    }
  }
  // Short transactions: a concurrent tuner waits for one chunk at most, never for the whole file.
  constexpr size_t kChunk = 256;
  int64_t added = 0;
  for (size_t start = 0; start < lines.size(); start += kChunk) {
    auto chunk = in_write_transaction<int64_t>([&]() -> Expected<int64_t> {
      int64_t n = 0;
      for (size_t i = start; i < std::min(lines.size(), start + kChunk); ++i) {
        const ImportLine &l = lines[i];
        AT_TRY(upsert_workload_unlocked(l.record.workload_hash, l.record.target, l.ir, l.flops));
        // A record already present (the same uid) is skipped: merging is idempotent.
        if (!l.record.uid.empty()) {
          Stmt dup(db_, "SELECT 1 FROM records WHERE uid = ?");
          dup.bind(1, l.record.uid);
          if (dup.step() == SQLITE_ROW) continue;
        }
        AT_TRY(add_record_unlocked(l.record));
        ++n;
      }
      return n;
    });
    if (!chunk)
      return make_error(label + ": " + chunk.error().message + " (" + std::to_string(added) +
                        " records were added before this; importing again skips them)");
    added += *chunk;
  }
  return added;
}

Expected<std::string> TuningDb::integrity_check() {
  Stmt q(db_, "PRAGMA integrity_check");
  std::string out;
  while (q.step() == SQLITE_ROW) out += (out.empty() ? "" : "; ") + q.text(0);
  return out;
}

Status TuningDb::save_cost_model(const std::string &target, int feature_version, int64_t records, const std::string &model) {
  auto saved = in_write_transaction<bool>([&]() -> Expected<bool> {
    {
      Stmt del(db_, "DELETE FROM cost_models WHERE target = ?");
      del.bind(1, target);
      if (del.step() != SQLITE_DONE) return make_error(path_ + ": " + sqlite3_errmsg(db_));
    }
    Stmt ins(db_, "INSERT INTO cost_models(target, feature_version, records, created_at, model) VALUES(?, ?, ?, ?, ?)");
    ins.bind(1, target).bind(2, static_cast<int64_t>(feature_version)).bind(3, records).bind(4, now_utc()).bind_blob(5, model);
    if (ins.step() != SQLITE_DONE) return make_error(path_ + ": cannot save the cost model: " + sqlite3_errmsg(db_));
    return true;
  });
  if (!saved) return saved.error();
  return Status::ok();
}

Expected<std::optional<std::string>> TuningDb::cost_model(const std::string &target, int feature_version) {
  Stmt q(db_, "SELECT model FROM cost_models WHERE target = ? AND feature_version = ? ORDER BY id DESC LIMIT 1");
  q.bind(1, target).bind(2, static_cast<int64_t>(feature_version));
  int rc = q.step();
  if (rc == SQLITE_DONE) return std::optional<std::string>();
  if (rc != SQLITE_ROW) return make_error(path_ + ": " + sqlite3_errmsg(db_));
  return std::optional<std::string>(q.blob(0));
}

}  // namespace autotune
