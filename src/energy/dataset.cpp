#include "energy/dataset.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

namespace meganeura::energy {
namespace {

std::string lower_trim(std::string s) {
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Accepted spellings of each field, reference study's first.
struct Field {
  const char* id;
  std::vector<const char*> names;
  bool required;
};

const std::vector<Field>& fields() {
  static const std::vector<Field> f = {
      {"gpu", {"gpu model", "gpu", "device"}, true},
      {"strategy", {"strategy"}, true},
      {"gpus", {"gpus", "num_gpus"}, true},
      {"layers", {"num_layers", "layers"}, true},
      {"hidden", {"hidden_size", "hidden"}, true},
      {"heads", {"heads", "num_heads"}, false},
      {"ff", {"ff", "intermediate_size", "ffn"}, false},
      {"vocab", {"vocab", "vocab_size"}, false},
      {"arch", {"arch", "family"}, false},
      {"batch", {"batch_size", "batch"}, true},
      {"seq", {"seq_len_batch", "seq", "seq_len"}, false},
      {"max_length", {"max_length"}, false},
      {"grad_accum", {"grad_accum"}, false},
      {"fp16", {"fp16"}, false},
      {"dtype", {"dtype"}, false},
      {"tokens", {"tokens_seen", "tokens"}, true},
      {"duration", {"duration_s"}, false},
      {"energy", {"energy_consumed_kwh", "energy_kwh"}, true},
      {"efficiency", {"efficiency", "eta"}, false},
      {"group", {"group"}, false},
      {"tp_scheme", {"tp_scheme"}, false},
      {"power_limit", {"power_limit", "power_limit_w"}, false},
  };
  return f;
}

class RowReader {
 public:
  RowReader(const std::string& origin, int row, const std::vector<std::string>& cells,
            const std::map<std::string, std::pair<int, std::string>>& columns)
      : origin_(origin), row_(row), cells_(cells), columns_(columns) {}

  bool has(const std::string& id) const {
    auto it = columns_.find(id);
    return it != columns_.end() && !cell(it->second.first).empty();
  }
  std::string text(const std::string& id) const {
    auto it = columns_.find(id);
    return it == columns_.end() ? "" : cell(it->second.first);
  }
  double number(const std::string& id) const {
    const std::string s = text(id);
    double v = 0;
    const char* end = s.data() + s.size();
    auto [ptr, ec] = std::from_chars(s.data(), end, v);
    if (s.empty()) fail(id, "empty cell");
    if (ec != std::errc() || ptr != end || !std::isfinite(v)) {
      fail(id, "'" + s + "' is not a number");
    }
    return v;
  }
  double positive(const std::string& id, const char* what) const {
    const double v = number(id);
    if (!(v > 0)) fail(id, std::string(what) + " must be positive, got " + text(id));
    return v;
  }
  int count(const std::string& id, const char* what) const {
    const double v = positive(id, what);
    if (v != std::floor(v) || v > 1e9) fail(id, std::string(what) + " must be a whole number, got " + text(id));
    return static_cast<int>(v);
  }
  bool flag(const std::string& id) const {
    const std::string s = lower_trim(text(id));
    if (s == "true" || s == "1" || s == "yes") return true;
    if (s == "false" || s == "0" || s == "no" || s.empty()) return false;
    // Built by appending: GCC 12 misreports "'" + std::string&& as an overlapping copy here.
    std::string what = "'";
    what += text(id);
    fail(id, what + "' is not true/false");
  }
  [[noreturn]] void fail(const std::string& id, const std::string& what) const {
    throw std::runtime_error("[energy] " + origin_ + " row " + std::to_string(row_) + ", column '" +
                             columns_.at(id).second + "': " + what);
  }

 private:
  std::string cell(int i) const { return i < int(cells_.size()) ? trim(cells_[i]) : ""; }
  static std::string trim(const std::string& s) {
    const size_t a = s.find_first_not_of(" \t\r");
    const size_t b = s.find_last_not_of(" \t\r");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
  }
  const std::string& origin_;
  int row_;
  const std::vector<std::string>& cells_;
  const std::map<std::string, std::pair<int, std::string>>& columns_;
};

}  // namespace

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

TransformerConfig RunRecord::transformer() const {
  TransformerConfig c;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.ff = ff;
  c.vocab = vocab;
  c.batch = batch;
  c.seq = seq;
  c.tokens = tokens;
  c.grad_accum = grad_accum;
  c.dtype = dtype;
  c.lm_head = lm_head;
  return c;
}

ParallelConfig RunRecord::parallel() const { return {gpus, strategy, false, false, tp_scheme, power_limit_w}; }

ReferenceInputs RunRecord::reference_inputs() const {
  // M is the activation size of one micro-batch: gradient accumulation does not grow it.
  return {layers, hidden, batch, seq, tokens, efficiency.value_or(1.0), strategy};
}

namespace {

using Columns = std::map<std::string, std::pair<int, std::string>>;  // id -> (index, header text)

Columns map_columns(const std::vector<std::string>& header, const std::string& origin) {
  Columns columns;
  for (const Field& f : fields()) {
    for (size_t i = 0; i < header.size() && !columns.count(f.id); ++i) {
      const std::string h = lower_trim(header[i]);
      for (const char* name : f.names) {
        if (h == name) columns[f.id] = {int(i), header[i]};
      }
    }
    if (f.required && !columns.count(f.id)) {
      std::string names;
      for (const char* n : f.names) names += (names.empty() ? "'" : " or '") + std::string(n) + "'";
      throw std::runtime_error("[energy] " + origin + ": missing column " + names);
    }
  }
  if (!columns.count("seq") && !columns.count("max_length")) {
    throw std::runtime_error("[energy] " + origin + ": missing column 'seq_len_batch' or 'max_length'");
  }
  return columns;
}

// The model and its batch: sizes, family, sequence length, precision.
void read_shape(RunRecord& rec, const RowReader& r, const Columns& columns, int default_vocab) {
  rec.layers = r.count("layers", "layers");
  rec.hidden = r.count("hidden", "hidden size");
  if (r.has("heads")) rec.heads = r.count("heads", "heads");
  if (r.has("ff")) rec.ff = r.count("ff", "ff");
  // GPT-family rows train a language-model head and, without a vocab column, get the GPT-2
  // BPE vocabulary.
  rec.lm_head = lower_trim(r.text("arch")) == "gpt";
  rec.vocab = r.has("vocab") ? r.count("vocab", "vocab") : rec.lm_head ? 50257 : default_vocab;
  rec.batch = r.positive("batch", "batch size");
  // An empty seq cell falls back to max_length only where that column exists.
  rec.seq = r.has("seq") || !columns.count("max_length") ? r.positive("seq", "sequence length")
                                                         : r.positive("max_length", "max_length");
  if (r.has("grad_accum")) rec.grad_accum = r.count("grad_accum", "grad_accum");
  if (r.has("dtype")) {
    rec.dtype = lower_trim(r.text("dtype"));
    try {
      dtype_bytes(rec.dtype);
    } catch (const std::invalid_argument& e) {
      r.fail("dtype", e.what());
    }
  } else if (r.has("fp16")) {
    rec.dtype = r.flag("fp16") ? "fp16" : "fp32";
  }
}

// What was measured: tokens, duration, energy and parallel efficiency.
void read_outcome(RunRecord& rec, const RowReader& r) {
  rec.tokens = r.positive("tokens", "tokens");
  if (r.has("duration")) rec.duration_s = r.positive("duration", "duration");
  rec.energy_kwh = r.positive("energy", "energy");
  // An empty power_limit cell is the default limit.
  if (r.has("power_limit")) rec.power_limit_w = r.positive("power_limit", "power limit");
  if (r.has("efficiency")) {
    const double e = r.positive("efficiency", "efficiency");
    if (e > 1.5) r.fail("efficiency", "efficiency must be at most 1.5, got " + r.text("efficiency"));
    rec.efficiency = e;
  } else if (rec.gpus == 1) {
    rec.efficiency = 1.0;
  }
}

// Whether the GPU column is the reference study's 'GPU model'.
bool study_columns(const Columns& columns) {
  const std::string& h = columns.at("gpu").second;
  const std::string want = "gpu model";
  return h.size() == want.size() && std::equal(h.begin(), h.end(), want.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == y;
         });
}

// The reference study's files (named by their 'GPU model' column) come from its released
// trainer, whose TP splits only the FFN with eager DTensor weights; a tp_scheme column says
// which scheme a run used, Megatron TP otherwise.
TpScheme read_tp_scheme(const RowReader& r, const Columns& columns) {
  if (!r.has("tp_scheme")) return study_columns(columns) ? TpScheme::kFfnEager : TpScheme::kMegatron;
  try {
    return parse_tp_scheme(r.text("tp_scheme"));
  } catch (const std::invalid_argument& e) {
    r.fail("tp_scheme", e.what());
  }
}

RunRecord read_record(const RowReader& r, int row, const Columns& columns, int default_vocab) {
  RunRecord rec;
  rec.row = row;
  rec.gpu = r.text("gpu");
  if (rec.gpu.empty()) r.fail("gpu", "empty GPU name");
  try {
    rec.strategy = parse_strategy(r.text("strategy"));
  } catch (const std::invalid_argument& e) {
    r.fail("strategy", e.what());
  }
  rec.gpus = r.count("gpus", "gpus");
  read_shape(rec, r, columns, default_vocab);
  rec.tp_scheme = read_tp_scheme(r, columns);
  read_outcome(rec, r);
  if (rec.gpus > 1 && rec.strategy == Strategy::kBaseline) {
    r.fail("strategy", "baseline with " + std::to_string(rec.gpus) + " GPUs");
  }
  // Configuration family: every parallel variant and GPU of one workload lands together.
  rec.group = r.has("group") ? r.text("group")
                             : std::to_string(rec.layers) + "x" + std::to_string(rec.hidden) + "/b" + r.text("batch") +
                                   "/s" + (r.has("seq") ? r.text("seq") : r.text("max_length"));
  return rec;
}

}  // namespace

Dataset parse_runs_csv(const std::string& text, const std::string& origin, int default_vocab) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) throw std::runtime_error("[energy] " + origin + ": empty file");
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);  // spreadsheet exports start with a BOM
  const std::vector<std::string> header = split_csv_line(line);
  const Columns columns = map_columns(header, origin);
  Dataset data;
  int row = 0;
  while (std::getline(in, line)) {
    ++row;
    if (line.find_first_not_of(" \t\r,") == std::string::npos) continue;
    const std::vector<std::string> cells = split_csv_line(line);
    if (cells.size() > header.size()) {
      throw std::runtime_error("[energy] " + origin + " row " + std::to_string(row) + ": " +
                               std::to_string(cells.size()) + " cells but the header has " +
                               std::to_string(header.size()));
    }
    data.records.push_back(read_record(RowReader(origin, row, cells, columns), row, columns, default_vocab));
  }
  if (data.records.empty()) throw std::runtime_error("[energy] " + origin + ": no data rows");
  return data;
}

Dataset load_runs_csv(const std::string& path, int default_vocab) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("[energy] cannot read " + path);
  // At most one byte past the limit is read, so an endless input (a device, a pipe) stops too.
  std::string text;
  char chunk[1 << 16];
  while (text.size() <= kMaxCsvBytes && in.read(chunk, sizeof chunk).gcount() > 0)
    text.append(chunk, static_cast<size_t>(in.gcount()));
  if (in.bad()) throw std::runtime_error("[energy] cannot read " + path);
  if (text.size() > kMaxCsvBytes) {
    throw std::runtime_error("[energy] " + path + ": larger than the limit of " + std::to_string(kMaxCsvBytes) +
                             " bytes (kMaxCsvBytes)");
  }
  return parse_runs_csv(text, path, default_vocab);
}

void derive_efficiency(Dataset& data) {
  auto key = [](const RunRecord& r) {
    return r.gpu + "|" + std::to_string(r.layers) + "|" + std::to_string(r.hidden) + "|" + std::to_string(r.heads) +
           "|" + std::to_string(r.ff) + "|" + std::to_string(r.batch) + "|" + std::to_string(r.seq) + "|" + r.dtype;
  };
  std::map<std::string, double> single;  // seconds per token on one GPU
  for (const RunRecord& r : data.records) {
    if (r.gpus == 1 && r.duration_s) single.emplace(key(r), *r.duration_s / r.tokens);
  }
  for (RunRecord& r : data.records) {
    if (r.efficiency || !r.duration_s) continue;
    auto it = single.find(key(r));
    if (it == single.end()) continue;
    r.efficiency = (it->second / (*r.duration_s / r.tokens)) / r.gpus;
  }
}

}  // namespace meganeura::energy
