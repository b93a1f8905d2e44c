// The `meganeura energy` command tree: predict (reference or physical model, for a transformer
// given by flags or for one of our compiled Programs), fit (both models on measured runs, with
// group-disjoint cross-validation), measure (run a command under the meters) and hardware
// (show the table, or create the user-writable copy that calibration writes to).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "energy/physical_model.h"
#include "energy/work.h"

namespace meganeura::energy {

// What the compiler lends the energy commands. `program_work(model, workload)` returns the
// dispatches of one training step of a compiled Program; `models` lists the names it knows.
struct EnergyCliHooks {
  std::function<std::vector<WorkItem>(const std::string& model, const std::string& workload)> program_work;
  std::vector<std::string> models;
  // Tokens one training step of `model` processes (0: the model has no tokens), for J/token
  // when --tokens-per-step is not given.
  std::function<double(const std::string& model)> tokens_per_step;
};

void add_energy_commands(CLI::App& app, EnergyCliHooks hooks);

// Options of `energy predict`, public so tests and other front ends can drive it directly.
struct PredictOptions {
  std::string family = "bert";  // bert | gpt | none: sets the default vocabulary
  std::string method;           // reference | physical | both; empty: chosen from the flags
  TransformerConfig transformer;
  ParallelConfig parallel;
  std::optional<double> efficiency;  // measured eta, for the reference model
  std::string gpu;                   // device name from the hardware table
  std::string program;               // --model: one of our compiled Programs
  std::string workload;
  double steps = 1;
  double tokens_per_step = 0;
  double grid_g_per_kwh = 400;
  std::string hardware;  // explicit table path
  std::string svg;       // per-layer bar chart output
  bool json = false;
};

// Runs `energy predict` and returns its JSON report (also what --json prints).
nlohmann::json run_predict(const PredictOptions& o, const EnergyCliHooks& hooks);

struct FitOptions {
  std::string csv;
  std::string model = "reference";  // which model's scores lead the report
  int folds = 5;
  int vocab = 30522;
  std::string test_csv;   // --test: fit on `csv`, score on this file
  int min_gpu_runs = 15;  // leave-one-GPU-out for GPUs with at least this many runs
  // Lead the report with the leave-one-GPU-out evaluation (needs two such GPUs).
  bool leave_one_gpu_out = false;
  std::string out;  // output prefix; default: next to the CSV
  std::string hardware;
  bool save = false;  // write fitted physical knobs to the user table
  bool json = false;
};

// Runs `energy fit`; writes OUT.json and OUT.svg and returns the JSON.
nlohmann::json run_fit(const FitOptions& o);

// Options of `energy recommend`: a planned run (the physical model's flags in `run`), the GPUs
// to recommend for, and the batch sizes the user allows.
struct RecommendOptions {
  PredictOptions run;             // the planned run; run.gpu when `gpus` is empty
  std::vector<std::string> gpus;  // devices from the hardware table
  std::vector<double> batches;    // allowed batch sizes; empty: the run's batch only
  double step_w = 0;              // power-limit sweep step; 0: 1 W (coarser beyond 600 points)
  std::string svg;                // energy and time against the power limit
};

// For every GPU: the power limit (and batch) of least energy and of least energy x time, with
// their predicted time and energy against the default limit, and the sweep behind them.
nlohmann::json run_recommend(const RecommendOptions& o);

// Adds `energy recommend` to the `energy` command.
void add_recommend_command(CLI::App& energy);

}  // namespace meganeura::energy
