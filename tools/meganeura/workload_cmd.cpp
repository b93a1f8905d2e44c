// meganeura models|run|gate: the five matched workloads, their external check interface
// (weights and inputs in, outputs, loss and every parameter's gradient out, all safetensors),
// and the elementwise gates against the PyTorch reference in bench/reference/.
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "commands.h"
#include "meganeura/autodiff.h"
#include "meganeura/weights.h"
#include "meganeura/workloads.h"
#include "text/generation.h"
#include "workload_run.h"

namespace meganeura::cli {
namespace {
namespace fs = std::filesystem;

struct RunArgs {
  std::string workload, scale = "ci", device = "cpu", weights, inputs, dump, write_weights, write_inputs;
  std::string reference, work_dir, negative_control, python = "/usr/bin/python3", reference_device = "cpu";
  uint64_t seed = 1;
  std::string weights_dtype = "f32";  // run: the forward pass in 8 or 4 bits
  std::string precision = "strict", backward = "f32";
  bool json = false, f64 = false, forward_only = false;
};

void add_common(CLI::App* c, RunArgs& a) {
  std::vector<std::string> ids;
  for (const auto& w : models::workload_list()) ids.push_back(w.id);
  c->add_option("--workload", a.workload, "smollm2 | smolvla | unet | resnet50 | whisper")
      ->required()
      ->check(CLI::IsMember(ids));
  c->add_option("--scale", a.scale, "full | ci")->check(CLI::IsMember({"full", "ci"}));
  c->add_option("--device", a.device, "cpu | vulkan | auto")->check(CLI::IsMember({"cpu", "vulkan", "auto"}));
  c->add_option("--seed", a.seed, "initialisation and synthetic-input seed");
  c->add_option("--precision", a.precision,
                "strict | accelerated | accelerated-bf16: the forward products' operands rounded to f16 or bf16, "
                "gradients in f32")
      ->check(CLI::IsMember({"strict", "accelerated", "accelerated-bf16"}));
  c->add_option("--backward", a.backward,
                "f32 | reduced: the gradients' products read operands rounded like the forward's (accelerated "
                "only), the gradients taken with loss scaling")
      ->check(CLI::IsMember({"f32", "reduced"}));
}

int run_models(bool json) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& w : models::workload_list()) {
    nlohmann::json j = {{"id", w.id}, {"description", w.description}, {"published_parameters", w.published_params}};
    for (auto scale : {models::Scale::full, models::Scale::ci}) {
      Graph g;
      models::build_workload(g, w.id, scale);
      j[std::string("parameters_") + models::scale_name(scale)] = models::parameter_count(g);
    }
    list.push_back(j);
  }
  if (json) {
    std::cout << list.dump() << "\n";
    return 0;
  }
  std::printf("%-9s %14s %12s  %s\n", "id", "parameters", "ci scale", "description");
  for (const auto& j : list) {
    std::printf("%-9s %14lld %12lld  %s\n", j["id"].get<std::string>().c_str(), j["parameters_full"].get<long long>(),
                j["parameters_ci"].get<long long>(), j["description"].get<std::string>().c_str());
  }
  return 0;
}

int run_run(const RunArgs& a) {
  if (a.dump.empty()) throw std::invalid_argument("--dump is required");
  WorkloadRunOptions o{a.workload,
                       models::parse_scale(a.scale),
                       parse_device(a.device),
                       a.seed,
                       a.f64,
                       a.weights,
                       a.inputs,
                       a.write_weights,
                       a.write_inputs,
                       text::weights_dtype(a.weights_dtype, {}),
                       parse_precision(a.precision),
                       a.forward_only};
  o.backward = parse_backward(a.backward);
  RunOutcome r = run_workload(o);
  write_dump(a.dump, r.tensors);
  nlohmann::json out = {{"workload", a.workload},
                        {"scale", a.scale},
                        {"device", r.device},
                        {"loss", r.loss},
                        {"parameters", r.parameters},
                        {"weights_dtype", a.weights_dtype},
                        {"precision", a.precision},
                        {"backward", a.backward},
                        {"weight_bytes", r.weight_bytes},
                        {"product_read_bytes", r.product_read_bytes},
                        {"planned_bytes", r.planned_bytes},
                        {"forward_only", a.forward_only},
                        {"dump", a.dump}};
  if (a.json)
    std::cout << out.dump() << "\n";
  else
    std::printf("%s (%s) on %s: loss %.6g, %lld parameters, dump %s\n", a.workload.c_str(), a.scale.c_str(),
                r.device.c_str(), double(r.loss), static_cast<long long>(r.parameters), a.dump.c_str());
  return 0;
}

int run_gate(const RunArgs& a) {
  fs::path dir = a.work_dir;
  bool temporary = false;
  if (dir.empty()) {
    std::string tmpl = (fs::temp_directory_path() / "meganeura-gate-XXXXXX").string();
    if (!mkdtemp(tmpl.data()))
      throw std::runtime_error("[gate] cannot create a temporary directory: " + std::string(std::strerror(errno)));
    dir = tmpl;
    temporary = true;
  }
  // A temporary folder goes however the gate ends (a failed reference included).
  struct Cleanup {
    const fs::path& dir;
    const bool& on;
    ~Cleanup() {
      std::error_code ec;
      if (on) fs::remove_all(dir, ec);
    }
  } cleanup{dir, temporary};
  fs::create_directories(dir);
  const fs::path weights = a.weights.empty() ? dir / "weights.safetensors" : fs::path(a.weights);
  const fs::path inputs = a.inputs.empty() ? dir / "inputs.safetensors" : fs::path(a.inputs);
  WorkloadRunOptions o{a.workload,
                       models::parse_scale(a.scale),
                       parse_device(a.device),
                       a.seed,
                       false,
                       a.weights,
                       a.inputs,
                       a.weights.empty() ? weights.string() : "",
                       a.inputs.empty() ? inputs.string() : "",
                       DType::f32,
                       parse_precision(a.precision)};
  o.backward = parse_backward(a.backward);
  RunOutcome ours = run_workload(o);
  if (!a.negative_control.empty()) apply_negative_control(ours.tensors, a.negative_control);
  const fs::path ref_dump = dir / "reference.safetensors";
  std::string script =
      a.reference.empty() ? std::string(MEGANEURA_SOURCE_DIR) + "/bench/reference/reference.py" : a.reference;
  std::string cmd = shell_quote(a.python) + " " + shell_quote(script) + " --workload " + a.workload + " --scale " +
                    a.scale + " --device " + a.reference_device + " --weights " + shell_quote(weights.string()) +
                    " --inputs " + shell_quote(inputs.string()) + " --dump " + shell_quote(ref_dump.string()) + " 1>&2";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    const std::string how = rc == -1        ? "could not start"
                            : WIFEXITED(rc) ? "exit status " + std::to_string(WEXITSTATUS(rc))
                                            : "signal " + std::to_string(WTERMSIG(rc));
    throw std::runtime_error("[gate] the reference failed (" + cmd + ": " + how + ")");
  }
  GateReport rep = compare(ours.tensors, read_dump(ref_dump));
  nlohmann::json out = rep.to_json();
  out["workload"] = a.workload;
  out["scale"] = a.scale;
  out["device"] = ours.device;
  out["contract"] = a.precision;  // the precision contract (before "pass": see torch_device)
  out["backward"] = a.backward;
  if (ours.loss_scale > 0) out["loss_scale"] = ours.loss_scale;
  out["torch_device"] = a.reference_device;  // sorts after "scale": the tests match "pass":true,"scale"
  if (!a.negative_control.empty()) out["negative_control"] = a.negative_control;
  if (a.json) {
    std::cout << out.dump() << "\n";
  } else {
    rep.print(std::cout);
  }
  return rep.pass ? 0 : 2;
}

}  // namespace

void add_workload_commands(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* m = app.add_subcommand("models", "list the matched workloads and their parameter counts");
  m->add_flag("--json", *json, "JSON on stdout");
  m->callback([json] { throw CLI::RuntimeError(run_models(*json)); });

  auto a = std::make_shared<RunArgs>();
  CLI::App* r =
      app.add_subcommand("run", "run one forward and backward pass of a workload and dump outputs, loss and gradients");
  add_common(r, *a);
  r->add_option("--weights", a->weights, "weights (safetensors file, index .json or directory); default seeded random");
  r->add_option("--inputs", a->inputs, "inputs (safetensors); default synthetic from the seed");
  r->add_option("--dump", a->dump, "safetensors file for outputs, loss and grad.<parameter>")->required();
  r->add_option("--write-weights", a->write_weights, "also write the weights used");
  r->add_option("--write-inputs", a->write_inputs, "also write the inputs used");
  r->add_flag("--f64", a->f64, "run in the f64 oracle mode (reference backend)");
  r->add_option(
       "--weights-dtype", a->weights_dtype,
       "f32 | f16 | bf16 | q8_0 | q4_0: hold the weights that products and embeddings read in 16 bits, or the "
       "linear layers' weights in 8 or 4 bits, and run the forward pass alone (outputs and loss, no gradients)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  r->add_flag("--forward-only", a->forward_only, "the forward pass alone: outputs and loss, no gradients");
  r->add_flag("--json", a->json, "JSON summary on stdout (with the bytes the products read and the memory planned)");
  r->callback([a] { throw CLI::RuntimeError(run_run(*a)); });

  auto gte = std::make_shared<RunArgs>();
  CLI::App* gc = app.add_subcommand("gate", "run a workload here and in the PyTorch reference and apply the gates");
  add_common(gc, *gte);
  gc->add_option("--weights", gte->weights, "weights to use on both sides; default seeded random");
  gc->add_option("--inputs", gte->inputs, "inputs to use on both sides; default synthetic");
  gc->add_option("--reference", gte->reference, "reference script (default bench/reference/reference.py)");
  gc->add_option("--python", gte->python, "the Python with PyTorch that runs the reference (default /usr/bin/python3)");
  gc->add_option("--reference-device", gte->reference_device, "where PyTorch runs the reference: cpu | cuda")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  gc->add_option("--work-dir", gte->work_dir, "keep the exchanged files here");
  gc->add_option("--negative-control", gte->negative_control,
                 "corrupt our side on purpose (flip-grad:<parameter> | scale-output:<factor>); the gate must fail");
  gc->add_flag("--json", gte->json, "JSON report on stdout");
  gc->callback([gte] { throw CLI::RuntimeError(run_gate(*gte)); });
}

}  // namespace meganeura::cli
