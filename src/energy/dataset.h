// Measured training runs read from CSV: the reference study's released columns
// (GPU model, arch, strategy, gpus, num_layers, hidden_size, heads, ff, batch_size,
// seq_len_batch, max_length, grad_accum, fp16, tokens_seen, duration_s, energy_consumed_kWh)
// or our own measurement files (gpu, strategy, gpus, layers, hidden, batch, seq, tokens,
// dtype, duration_s, energy_kwh, ...). Both models are fitted and evaluated on these records.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "energy/physical_model.h"
#include "energy/reference_model.h"

namespace meganeura::energy {

// Largest CSV file read into memory; a larger one is an error naming this limit.
inline constexpr size_t kMaxCsvBytes = size_t(64) << 20;

struct RunRecord {
  int row = 0;  // 1-based data row (the header is row 0)
  std::string gpu;
  Strategy strategy = Strategy::kBaseline;
  int gpus = 1;
  TpScheme tp_scheme = TpScheme::kMegatron;  // how a TP run split its layers
  int layers = 0, hidden = 0, heads = 0, ff = 0, vocab = 0;
  double batch = 0, seq = 0;
  int grad_accum = 1;
  std::string dtype = "fp32";
  bool lm_head = false;  // GPT-family rows (the arch or family column) train a language-model head
  double tokens = 0;
  std::optional<double> duration_s;
  double energy_kwh = 0;
  std::optional<double> efficiency;  // given in the file, or derived from durations
  double power_limit_w = 0;          // board power limit the run was made at; 0: the default (TDP)
  std::string group;                 // configuration family for cross-validation

  TransformerConfig transformer() const;
  ParallelConfig parallel() const;
  ReferenceInputs reference_inputs() const;  // needs efficiency
};

struct Dataset {
  std::vector<RunRecord> records;
  std::vector<std::string> notes;  // rows left out of a model and why
};

// Parses CSV text; `origin` names the file in errors. Throws std::runtime_error
// "[energy] FILE row R, column 'C': ..." for missing columns, non-numeric cells and
// non-positive energies. `default_vocab` applies when the file has no vocab column.
Dataset parse_runs_csv(const std::string& text, const std::string& origin, int default_vocab = 30522);
Dataset load_runs_csv(const std::string& path, int default_vocab = 30522);

// Fills `efficiency` where absent from the duration of the single-GPU run of the same
// configuration on the same GPU: eta = (T_1 / T_N) / N with times per token.
void derive_efficiency(Dataset& data);

// Splits one CSV line into cells, honouring double quotes.
std::vector<std::string> split_csv_line(const std::string& line);

}  // namespace meganeura::energy
