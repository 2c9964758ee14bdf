#include "costmodel/Model.h"

#include <xgboost/c_api.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "costmodel/Features.h"

namespace autotune {

namespace {

Status xgb(int rc, const char *what) {
  if (rc == 0) return Status::ok();
  // XGBoost's message goes on with candidate lists and a stack trace: its first line says it.
  std::string msg = XGBGetLastError();
  return make_error(std::string("XGBoost: ") + what + ": " + msg.substr(0, msg.find('\n')));
}

/** A dense matrix of rows, freed with it. */
struct Matrix {
  DMatrixHandle h = nullptr;
  ~Matrix() {
    if (h) XGDMatrixFree(h);
  }
  static Expected<std::unique_ptr<Matrix>> of(const std::vector<std::vector<float>> &x, size_t cols) {
    std::vector<float> flat;
    flat.reserve(x.size() * cols);
    for (const auto &row : x) {
      if (row.size() != cols)
        return make_error("a feature row has " + std::to_string(row.size()) + " values, the model takes " + std::to_string(cols));
      flat.insert(flat.end(), row.begin(), row.end());
    }
    auto m = std::make_unique<Matrix>();
    AT_TRY(xgb(XGDMatrixCreateFromMat(flat.data(), x.size(), cols, std::nanf(""), &m->h), "creating a matrix"));
    return m;
  }
};

const std::string kMagic = "autotune-costmodel features v";

}  // namespace

CostModel::~CostModel() {
  if (booster_) XGBoosterFree(booster_);
}

Expected<std::unique_ptr<CostModel>> CostModel::train(const std::vector<std::vector<float>> &x, const std::vector<float> &y,
                                                      const CostModelOptions &o, const std::vector<unsigned> &groups) {
  if (x.empty() || x.size() != y.size()) return make_error("training needs as many targets as rows, and at least one");
  size_t columns = o.columns ? o.columns : model_feature_names().size();
  AT_ASSIGN(m, Matrix::of(x, columns));
  AT_TRY(xgb(XGDMatrixSetFloatInfo(m->h, "label", y.data(), y.size()), "setting labels"));
  if (!groups.empty()) AT_TRY(xgb(XGDMatrixSetUIntInfo(m->h, "group", groups.data(), groups.size()), "setting groups"));
  std::unique_ptr<CostModel> model(new CostModel());
  AT_TRY(xgb(XGBoosterCreate(&m->h, 1, &model->booster_), "creating a booster"));
  auto set = [&](const char *k, const std::string &v) { return xgb(XGBoosterSetParam(model->booster_, k, v.c_str()), k); };
  AT_TRY(set("objective", o.objective));
  AT_TRY(set("max_depth", std::to_string(o.max_depth)));
  AT_TRY(set("eta", std::to_string(o.eta)));
  AT_TRY(set("nthread", std::to_string(o.threads)));
  AT_TRY(set("seed", std::to_string(o.seed)));
  AT_TRY(set("verbosity", "0"));
  for (int i = 0; i < o.rounds; ++i) AT_TRY(xgb(XGBoosterUpdateOneIter(model->booster_, i, m->h), "training"));
  // Predictions are a few hundred rows at a time, between the search's lowering on every thread:
  // OpenMP's team for them cost more than it saved, its idle threads spinning against the
  // lowering (8% of the search's samples in libgomp).
  AT_TRY(set("nthread", "1"));
  model->rows_ = static_cast<int64_t>(x.size());
  model->columns_ = columns;
  return model;
}

Expected<std::vector<float>> CostModel::predict(const std::vector<std::vector<float>> &x) const {
  if (x.empty()) return std::vector<float>{};
  AT_ASSIGN(m, Matrix::of(x, columns_));
  bst_ulong n = 0;
  const float *out = nullptr;
  AT_TRY(xgb(XGBoosterPredict(booster_, m->h, 0, 0, 0, &n, &out), "predicting"));
  if (n != x.size()) return make_error("XGBoost predicted " + std::to_string(n) + " values for " + std::to_string(x.size()) + " rows");
  return std::vector<float>(out, out + n);
}

Expected<std::string> CostModel::save() const {
  bst_ulong n = 0;
  const char *data = nullptr;
  if (columns_ != model_feature_names().size()) return make_error("only a model of the CPU kernels' features is saved");
  AT_TRY(xgb(XGBoosterSaveModelToBuffer(booster_, R"({"format": "ubj"})", &n, &data), "saving"));
  std::string header = kMagic + std::to_string(kFeatureVersion) + " rows " + std::to_string(rows_) + "\n";
  return header + std::string(data, n);
}

Expected<std::unique_ptr<CostModel>> CostModel::load(const std::string &bytes) {
  size_t eol = bytes.find('\n');
  if (bytes.compare(0, kMagic.size(), kMagic) != 0 || eol == std::string::npos) return make_error("not a saved cost model");
  int version = 0;
  long long rows = 0;
  if (std::sscanf(bytes.c_str() + kMagic.size(), "%d rows %lld", &version, &rows) != 2) return make_error("a cost model with a damaged header");
  if (version != kFeatureVersion)
    return make_error("the cost model was trained on features v" + std::to_string(version) + ", this autotune computes v" +
                      std::to_string(kFeatureVersion));
  std::unique_ptr<CostModel> model(new CostModel());
  AT_TRY(xgb(XGBoosterCreate(nullptr, 0, &model->booster_), "creating a booster"));
  AT_TRY(xgb(XGBoosterLoadModelFromBuffer(model->booster_, bytes.data() + eol + 1, bytes.size() - eol - 1), "loading"));
  AT_TRY(xgb(XGBoosterSetParam(model->booster_, "nthread", "1"), "nthread"));  // as after training
  model->rows_ = rows;
  model->columns_ = model_feature_names().size();
  return model;
}

}  // namespace autotune
