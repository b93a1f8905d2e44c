// meganeura train|infer: train a built-in model with a live progress line (alone, or
// data-parallel over the ranks of an MPI job), checkpoint it, resume from a checkpoint, and
// serve it from an inference-only program.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "commands.h"
#include "meganeura/backend.h"
#include "meganeura/checkpoint.h"
#include "meganeura/distributed.h"
#include "meganeura/generate.h"
#include "meganeura/passes.h"
#include "meganeura/train.h"
#include "parallel.h"
#include "schedule/schedule.h"
#include "tasks.h"
#include "text/generation.h"

namespace meganeura::cli {
namespace {

struct TrainArgs {
  std::string model = "mlp", device = "auto", out, resume, optimizer;
  std::string workload, scale = "ci";  // train: a matched workload instead of --model
  int64_t steps = 0;
  uint64_t seed = 1;
  double lr = 0;
  int accumulation = 1;
  bool json = false;
  ModelOptions sizes;
  bool inference = false;           // program: the inference graph instead of the training step
  std::string vulkan = "lavapipe";  // program: the Vulkan device whose launches it reports
  std::string plan_device;          // program: plan for this device's limits and passes ("": none)
  std::string llama_config;         // program: a Llama config.json's generation programs instead of a built-in model
  int64_t max_context = 0, prefill_chunk = 128;
  std::string weights_dtype = "f32";  // program --config, infer: the matrices' format
  std::string precision = "strict";   // train, program: the precision contract
  std::string backward = "f32";       // train, program: what the gradients' products read
  bool data_parallel = false;
  double bucket_mb = 25, comm_timeout = 300;
  int check_replicas = 0;
};

// A positive, finite number: CLI11's PositiveNumber lets "nan" and "inf" through.
const CLI::Validator kPositiveFinite(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v) || v <= 0)
        return "must be a positive finite number, got '" + s + "'";
      return {};
    },
    "POSITIVE");

void add_precision_option(CLI::App* c, TrainArgs& a, const std::string& what) {
  c->add_option("--precision", a.precision,
                "strict | accelerated (f16 operands, f32 accumulation) | accelerated-bf16: " + what)
      ->check(CLI::IsMember({"strict", "accelerated", "accelerated-bf16"}));
  c->add_option("--backward", a.backward,
                "f32 | reduced: the gradients' products read operands rounded like the forward's "
                "(accelerated only; training scales the loss dynamically)")
      ->check(CLI::IsMember({"f32", "reduced"}));
}

void add_model_options(CLI::App* c, TrainArgs& a) {
  c->add_option("--model", a.model, "mlp | chargpt | decoder")->check(CLI::IsMember({"mlp", "chargpt", "decoder"}));
  c->add_option("--width", a.sizes.width, "hidden width (mlp) or model dimension (chargpt)")
      ->check(CLI::PositiveNumber);
  c->add_option("--layers", a.sizes.layers, "number of hidden layers / transformer blocks")->check(CLI::PositiveNumber);
  c->add_option("--heads", a.sizes.heads, "attention heads (chargpt)")->check(CLI::PositiveNumber);
}

// Generation after evaluation (chargpt); see docs/generation.md for the order the filters apply in.
void add_sampling_options(CLI::App* c, ModelOptions& o) {
  c->add_option("--prompt", o.prompt, "text the sample continues (default \"The river\")");
  c->add_option("--max-new-tokens", o.stop.max_new_tokens, "tokens to generate (default 160)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            int64_t v = 0;
            if (!CLI::detail::lexical_cast(s, v) || v <= 0)
              return "must be a positive number of tokens (chargpt has no end-of-text token), got '" + s + "'";
            return {};
          },
          "POSITIVE"));
  c->add_option("--temperature", o.sampling.temperature, "0: greedy; default 0.7");
  c->add_option("--top-k", o.sampling.top_k, "keep the k most likely tokens (0: off)");
  c->add_option("--top-p", o.sampling.top_p, "keep the smallest set with this much probability (1: off)");
  c->add_option("--min-p", o.sampling.min_p, "drop tokens below this fraction of the top one (0: off)");
  c->add_option("--repetition-penalty", o.sampling.repetition_penalty, "divide seen tokens' logits (1: off)");
  c->add_option("--stop", o.stop.stop_strings, "stop before this text (repeatable)");
}

class Progress {
 public:
  Progress(int64_t first, int64_t total) : first_(first), total_(total), tty_(isatty(2)) {}
  void update(int64_t step, float loss) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    const double rate = double(step - first_) / std::max(elapsed, 1e-9);
    const double eta = rate > 0 ? double(total_ - step) / rate : 0;
    const bool last = step == total_;
    if (!tty_ && !last && step % std::max<int64_t>(1, total_ / 10)) return;
    std::fprintf(stderr, "%sstep %lld/%lld  loss %.4f  %.1f steps/s  ETA %.0fs%s", tty_ ? "\r" : "",
                 static_cast<long long>(step), static_cast<long long>(total_), double(loss), rate, eta,
                 tty_ && !last ? "   " : "\n");
    std::fflush(stderr);
  }
  double rate(int64_t step) const {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    return double(step - first_) / std::max(elapsed, 1e-9);
  }

 private:
  int64_t first_, total_;
  bool tty_;
  std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
};

void print(const nlohmann::json& out, bool json) {
  if (json) {
    std::cout << out.dump() << "\n";
    return;
  }
  for (auto& [k, v] : out.items()) {
    // Per-step series are for --json; data-parallel runs summarise theirs on stderr.
    if (k == "losses" || k == "step_ms" || k == "data_parallel") continue;
    std::cout << k << ": " << (v.is_string() ? v.get<std::string>() : v.dump()) << "\n";
  }
}

std::unique_ptr<Task> make_train_task(const TrainArgs& a) {
  if (a.workload.empty()) return make_task(a.model, a.seed, a.sizes);
  if (a.sizes.batch)
    throw CLI::ValidationError("--batch", "applies to --model mlp|chargpt; a workload's batch is part of its shape");
  return make_workload_task(a.workload, a.scale, a.seed);
}

OptimizerConfig optimizer_for(const TrainArgs& a, const Task& task, int64_t steps) {
  OptimizerConfig opt = task.default_optimizer();
  if (!a.optimizer.empty()) opt.kind = parse_optimizer(a.optimizer);
  if (a.lr > 0) opt.lr = a.lr;
  opt.accumulation = a.accumulation;
  if (steps % a.accumulation) {
    // A checkpoint must fall on an update: a half-accumulated gradient could not be resumed.
    throw std::invalid_argument("--steps " + std::to_string(steps) + " is not a multiple of --accumulation " +
                                std::to_string(a.accumulation));
  }
  opt.total_steps = std::max(opt.total_steps, steps);
  return opt;
}

// The process that owns the parameters (rank 0, or the only one) gives them their values: the
// seeded draw, the task's own, or a checkpoint; data-parallel, it then broadcasts them. Returns
// the step to start from.
int64_t prepare_parameters(const TrainArgs& a, Task& task, Trainer& trainer, Communicator* comm, int64_t steps) {
  if (!comm || comm->rank() == 0) {
    task.initialise(trainer.session());
    if (!a.resume.empty()) {
      auto meta = load_checkpoint(trainer.session(), a.resume);
      const std::string model_hash = std::to_string(task.model_hash());
      if (meta.count("graph_hash") && meta["graph_hash"] != model_hash) {
        throw std::runtime_error("checkpoint " + a.resume + " is of a different model (graph hash " +
                                 meta["graph_hash"] + ")");
      }
    }
  }
  if (comm) broadcast_parameters(trainer.session(), *comm);
  if (comm && a.check_replicas > 0) check_replicas(trainer.session(), *comm, "after the broadcast");
  const int64_t start = a.resume.empty() ? 0 : trainer.updates() * trainer.config().accumulation;
  if (start > steps)
    throw std::runtime_error("checkpoint is at step " + std::to_string(start) + ", past --steps " +
                             std::to_string(steps));
  return start;
}

void print_banner(const Task& task, Trainer& trainer, const Communicator* comm, const std::string& placement,
                  int64_t start, int64_t steps) {
  const std::string& note = trainer.session().device_note();
  std::string parallel;
  if (comm) {
    parallel = "; data-parallel: " + comm->description() + (placement.empty() ? "" : ", " + placement);
  }
  std::fprintf(stderr, "training %s on %s%s: steps %lld..%lld%s\n", task.name().c_str(),
               trainer.session().device_name().c_str(), note.empty() ? "" : (" (" + note + ")").c_str(),
               static_cast<long long>(start + 1), static_cast<long long>(steps), parallel.c_str());
}

// Runs steps start..steps; returns the JSON summary's training part.
nlohmann::json train_steps(const Task& task, Trainer& trainer, const Shard& shard, bool show, int64_t start,
                           int64_t steps) {
  Progress progress(start, steps);
  nlohmann::json losses = nlohmann::json::array(), step_ms = nlohmann::json::array();
  float loss = NAN;
  for (int64_t step = start; step < steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    task.feed(trainer.session(), step, shard);
    loss = trainer.step();
    step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (!std::isfinite(loss))
      throw std::runtime_error("loss is " + std::to_string(loss) + " at step " + std::to_string(step + 1));
    losses.push_back(loss);
    if (show) progress.update(step + 1, loss);
  }
  return {{"model", task.name()},    {"device", trainer.session().device_name()},
          {"first_step", start + 1}, {"steps", steps},
          {"final_loss", loss},      {"losses", losses},
          {"step_ms", step_ms},      {"steps_per_second", progress.rate(steps)}};
}

// Trains; `comm` (data-parallel) or null. Rank 0 alone reports, writes the checkpoint and
// evaluates.
int train(const TrainArgs& a, Communicator* comm) {
  auto task = make_train_task(a);
  const int64_t steps = a.steps > 0 ? a.steps : task->default_steps();
  const OptimizerConfig opt = optimizer_for(a, *task, steps);
  SessionOptions so = base_session_options();
  select_device(so, a.device);
  so.seed = a.seed;
  so.precision = parse_precision(a.precision);
  so.backward = parse_backward(a.backward);
  const std::string placement = comm ? place_rank(so, *comm) : "";
  DataParallelOptions parallel{
      .comm = comm,
      .bucket_mb = a.bucket_mb,
      .check_replicas_every = a.check_replicas,
      .agreement = std::hash<std::string>{}(std::to_string(a.seed) + "/" + std::to_string(steps))};
  Trainer trainer([&](Graph& g) { return task->build_loss(g); }, opt, so, parallel);
  const int64_t start = prepare_parameters(a, *task, trainer, comm, steps);
  const bool lead = !comm || comm->rank() == 0;
  if (lead) print_banner(*task, trainer, comm, placement, start, steps);
  const Shard shard = comm ? Shard{comm->rank(), comm->size()} : Shard{};
  nlohmann::json out = train_steps(*task, trainer, shard, lead, start, steps);
  if (comm) out["data_parallel"] = comm_profile_json(trainer.comm_profile());
  if (trainer.loss_scale() > 0) {
    out["loss_scale"] = trainer.loss_scale();
    out["skipped_updates"] = trainer.skipped_updates();
  }
  if (!lead) return 0;
  if (comm) print_comm_profile(trainer.comm_profile());
  if (!a.out.empty()) {
    const std::string model_hash = std::to_string(task->model_hash());
    save_checkpoint(trainer.session(), a.out, {{"graph_hash", model_hash}, {"model", task->name()}});
    out["checkpoint"] = a.out;
    std::fprintf(stderr, "checkpoint written to %s\n", a.out.c_str());
  }
  task->add_inference(trainer.session());
  out.update(task->evaluate(trainer.session()));
  print(out, a.json);
  return 0;
}

int run_train(const TrainArgs& a) {
  if (!a.data_parallel) {
    if (const int n = launched_ranks(); n > 1) {
      std::fprintf(stderr,
                   "note: one of %d processes started by a launcher without --data-parallel: each trains alone\n", n);
    }
    return train(a, nullptr);
  }
  auto comm = make_mpi_communicator(CommOptions{.timeout_s = a.comm_timeout});
  ForwardSignals forward(*comm);
  try {
    return train(a, comm.get());
  } catch (const std::exception& e) {
    comm->abort("meganeura: " + std::string(e.what()), 1);  // ends every rank, never returns
  }
  return 1;
}

int run_infer(const TrainArgs& a) {
  ModelOptions sizes = a.sizes;
  // Block formats are the model's (matmul_q); f16 and bf16 the plan's storage, any model.
  const DType weights = text::weights_dtype(a.weights_dtype, {});
  const bool half = weights == DType::f16 || weights == DType::bf16;
  sizes.weights = half ? DType::f32 : weights;
  auto task = make_task(a.model, a.seed, sizes);
  SessionOptions so = base_session_options();
  select_device(so, a.device);
  so.seed = a.seed;
  if (half) so.weights_dtype = weights;
  Session session(so);
  task->add_inference(session);
  auto meta = load_checkpoint(session, a.resume, task->inference_load_options());
  if (meta.count("graph_hash") && meta["graph_hash"] != std::to_string(task->model_hash())) {
    throw std::runtime_error("checkpoint " + a.resume + " is of a different model than " + a.model);
  }
  uint64_t weight_bytes = 0;
  for (const auto& [name, b] : session.buffers())
    if (b.role == Role::parameter) weight_bytes += storage_bytes(b.stored, b.type.numel());
  nlohmann::json out = {{"model", task->name()},
                        {"device", session.device_name()},
                        {"checkpoint", a.resume},
                        {"weights_dtype", dtype_name(weights)},
                        {"weight_bytes", weight_bytes}};
  if (!session.device_note().empty()) out["device_note"] = session.device_note();
  if (meta.count("step")) out["trained_steps"] = std::stoll(meta["step"]);
  out.update(task->evaluate(session));
  if (out.contains("test_loss")) out["final_loss"] = out["test_loss"];
  if (out.contains("eval_loss")) out["final_loss"] = out["eval_loss"];
  print(out, a.json);
  return 0;
}

// "lavapipe" (planned without the device), or a Vulkan device's index or name substring.
VulkanDeviceInfo vulkan_device_for_plan(const std::string& which) {
  if (which == "lavapipe") return lavapipe_device_info();
  const std::vector<VulkanDeviceInfo> devices = vulkan_devices();
  std::string names;
  for (const VulkanDeviceInfo& d : devices) {
    if (which == std::to_string(d.index) || d.name.find(which) != std::string::npos) return d;
    names += (names.empty() ? "" : ", ") + d.name;
  }
  throw std::invalid_argument("[program] no Vulkan device '" + which +
                              "' (devices: " + (names.empty() ? "none" : names) + "; or lavapipe)");
}

// Each dispatch's Vulkan launches and planned loop iterations per invocation (the largest of
// its launches), and the device and loop budget they were planned for.
void add_vulkan_plan(nlohmann::json& j, const Program& p, const std::string& device) {
  const VulkanProgramPlan plan = plan_vulkan_program(p, vulkan_device_for_plan(device));
  j["vulkan"] = {{"device", plan.device}, {"loop_budget", plan.loop_budget}};
  for (size_t i = 0; i < plan.dispatches.size(); ++i) {
    nlohmann::json launches = nlohmann::json::array();
    uint64_t most = 0;
    for (const VulkanLaunchPlan& l : plan.dispatches[i]) {
      launches.push_back({{"kernel", l.kernel},
                          {"loop_iterations", l.loop_iterations},
                          {"workgroup_size", l.workgroup},
                          {"groups", {l.groups[0], l.groups[1], l.groups[2]}},
                          {"shared_memory_bytes", l.shared_memory_bytes}});
      most = std::max(most, l.loop_iterations);
    }
    j["dispatches"][i]["vulkan"] = {{"loop_iterations", most}, {"launches", launches}};
  }
}

// The program, each dispatch with the kernel launch the schedule lowers it to.
nlohmann::json program_json(const Program& p, const std::string& vulkan) {
  const Schedule sched = lower(p);
  auto j = nlohmann::json::parse(p.to_json());
  auto launches = nlohmann::json::parse(sched.to_json());
  for (size_t i = 0; i < j["dispatches"].size(); ++i) {
    j["dispatches"][i].update(launches["launches"][i]);
    j["dispatches"][i]["weight_bytes"] = p.weight_bytes(p.dispatches[i]);
  }
  j["workspace_bytes"] = sched.workspace_bytes;
  j["weight_bytes"] = p.total_weight_bytes();
  add_vulkan_plan(j, p, vulkan);
  return j;
}

void print_summary(const Program& p) {
  std::printf(
      "%zu dispatches, %zu barriers (%.2f per dispatch), %.3g FLOP, %.3g bytes moved (%.3g of them weights), arena "
      "%llu bytes in %zu buffer(s) (lower bound %llu, %u in place, %u views), external %llu bytes\n",
      p.dispatches.size(), p.barrier_count(),
      double(p.barrier_count()) / double(std::max<size_t>(1, p.dispatches.size())), p.total_flops(), p.total_bytes(),
      double(p.total_weight_bytes()), static_cast<unsigned long long>(p.arena_bytes), p.arena_buffers.size(),
      static_cast<unsigned long long>(p.memory.lower_bound_bytes), p.memory.inplace_reuses, p.memory.views,
      static_cast<unsigned long long>(p.memory.external_bytes));
}

// A Llama model's generation programs (meganeura/generate.h), planned in one session as
// `generate` plans them: the prompt chunks and the decode step, sharing the weights, the
// key/value caches and the position by name. Nothing is run and no weights are read.
int run_generation_programs(const TrainArgs& a) {
  SessionOptions so = base_session_options();
  if (!a.plan_device.empty()) select_device(so, a.plan_device);
  const Generator gen(models::read_llama_config(a.llama_config), {.batch = a.sizes.batch ? a.sizes.batch : 1,
                                                                  .max_context = a.max_context,
                                                                  .prefill_chunk = a.prefill_chunk,
                                                                  .weights = text::weights_dtype(a.weights_dtype, {}),
                                                                  .session = so});
  const Session& s = gen.session();
  uint64_t shared = 0;
  nlohmann::json external = nlohmann::json::array();
  for (const auto& [name, b] : s.buffers()) {
    const uint64_t bytes = storage_bytes(b.stored, b.type.numel());
    shared += bytes;
    external.push_back({{"name", name}, {"role", role_name(b.role)}, {"bytes", bytes}});
  }
  nlohmann::json programs = nlohmann::json::array();
  for (const auto& [tokens, index] : gen.programs()) {
    const Program& p = s.program(index);
    if (a.json) {
      programs.push_back({{"tokens", tokens}, {"program", program_json(p, a.vulkan)}});
    } else {
      std::printf("%s program: %lld token(s) per sequence; ", tokens == 1 ? "decode" : "prefill",
                  static_cast<long long>(tokens));
      print_summary(p);
    }
  }
  if (a.json) {
    std::cout << nlohmann::json{{"batch", gen.batch()},
                                {"max_context", gen.max_context()},
                                {"programs", programs},
                                {"external", external},
                                {"external_bytes", shared}}
                     .dump()
              << "\n";
  } else {
    std::printf("one session: batch %lld, max_context %lld, %zu programs sharing %zu external buffers of %llu bytes\n",
                static_cast<long long>(gen.batch()), static_cast<long long>(gen.max_context()), gen.programs().size(),
                s.buffers().size(), static_cast<unsigned long long>(shared));
  }
  return 0;
}

int run_program(const TrainArgs& a) {
  if (!a.llama_config.empty()) return run_generation_programs(a);
  auto task = make_task(a.model, a.seed, a.sizes);
  Program p;
  SessionOptions so = base_session_options();
  if (!a.plan_device.empty()) select_device(so, a.plan_device);
  if (a.inference) {
    Session s(so);  // the planned inference programs of the task, without running them
    task->add_inference(s);
    p = s.program(0);
  } else {
    using Clock = std::chrono::steady_clock;
    auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    const auto t0 = Clock::now();
    Graph g = apply_precision(training_graph([&](Graph& x) { return task->build_loss(x); }, task->default_optimizer()),
                              parse_precision(a.precision), nullptr, nullptr, parse_backward(a.backward));
    const auto t1 = Clock::now();
    PlanOptions po;
    po.verify = false;
    if (a.plan_device.empty()) {
      p = plan(optimize(g), po);
    } else {
      const Session s(so);
      po.limits = s.backend().limits();
      po.half_operands = s.backend().half_operands();  // as Session::add plans a contract's operands
      p = plan(optimize(g, s.backend().passes()), po);
    }
    const auto t2 = Clock::now();
    verify(p);
    const auto t3 = Clock::now();
    if (!a.json) {
      std::printf("compile: graph + autodiff + optimizer %.1f ms, passes + plan %.1f ms, verify %.1f ms\n", ms(t0, t1),
                  ms(t1, t2), ms(t2, t3));
    }
  }
  if (a.json) {
    std::cout << program_json(p, a.vulkan).dump() << "\n";
    return 0;
  }
  std::cout << p.dump();
  print_summary(p);
  return 0;
}

}  // namespace

void add_program_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c =
      app.add_subcommand("program", "print the planned program of a built-in model (training step by default)");
  add_model_options(c, *a);
  c->add_flag("--inference", a->inference, "the inference program instead of the training step");
  c->add_option("--config", a->llama_config,
                "a Llama model's config.json (or its directory): its generation programs (prompt chunks and the "
                "decode step) in one session, as `generate` plans them, instead of a built-in model")
      ->check(CLI::ExistingPath)
      ->excludes(c->get_option("--model"))
      ->excludes(c->get_option("--inference"));
  c->add_option("--batch", a->sizes.batch, "with --config: sequences decoded together (default 1)")
      ->check(CLI::PositiveNumber);
  c->add_option("--max-context", a->max_context,
                "with --config: key/value cache positions (default: min(max_position_embeddings, 2048))")
      ->check(CLI::PositiveNumber);
  c->add_option("--prefill-chunk", a->prefill_chunk, "with --config: the longest prompt chunk (a power of two)")
      ->check(CLI::PositiveNumber);
  c->add_option("--weights-dtype", a->weights_dtype,
                "with --config: the matrices' format, f32 | f16 | bf16 | q8_0 | q4_0 (each dispatch's weight_bytes "
                "shows it)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  c->add_flag("--json", a->json, "the program as JSON");
  add_precision_option(c, *a, "the training step's precision contract (its rounding nodes show in the program)");
  c->add_option("--device", a->plan_device,
                "plan for this device's limits and kernels (cpu | vulkan | auto | a Vulkan device's index or name), "
                "so that a session there accepts the program; default: no limits (the CPU backend only)");
  c->add_option("--vulkan", a->vulkan,
                "with --json: report each dispatch's Vulkan launches and planned loop iterations per invocation for "
                "this device: lavapipe (default; planned without it) or a Vulkan device's index or name");
  c->callback([a] { throw CLI::RuntimeError(run_program(*a)); });
}

namespace {
void add_parallel_options(CLI::App* c, TrainArgs& a) {
  CLI::Option* dp = c->add_flag("--data-parallel", a.data_parallel,
                                "average the gradients over the ranks of an mpirun or srun job (Open MPI); each "
                                "rank trains on its shard of a global batch of --batch times the rank count");
  c->add_option("--bucket-mb", a.bucket_mb, "data-parallel: gradient bucket size in MB (default 25)")
      ->check(kPositiveFinite)
      ->needs(dp);
  c->add_option("--comm-timeout", a.comm_timeout,
                "data-parallel: seconds a collective may take before the ranks that do not answer are named "
                "and the job ends (default 300)")
      ->check(kPositiveFinite)
      ->needs(dp);
  c->add_option("--check-replicas", a.check_replicas,
                "data-parallel: compare the parameters across ranks after every K-th update (0: never)")
      ->check(CLI::Range(0, std::numeric_limits<int>::max()))
      ->needs(dp);
}
}  // namespace

void add_train_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("train", "train a built-in model and write a checkpoint");
  add_model_options(c, *a);
  c->add_option("--workload", a->workload,
                "train a matched workload instead: smollm2 | smolvla | unet | resnet50 | whisper")
      ->check(CLI::IsMember({"smollm2", "smolvla", "unet", "resnet50", "whisper"}));
  c->add_option("--scale", a->scale, "workload scale: full | ci")->check(CLI::IsMember({"full", "ci"}));
  c->add_option("--steps", a->steps, "total training steps (default: the model's)")->check(CLI::PositiveNumber);
  c->add_option("--out", a->out, "checkpoint to write (safetensors)");
  c->add_option("--resume", a->resume, "checkpoint to resume from");
  c->add_option("--device", a->device,
                "cpu | vulkan | auto | a Vulkan device's index or name (see `meganeura devices`)");
  c->add_option("--seed", a->seed, "initialisation and data seed");
  c->add_option("--lr", a->lr, "peak learning rate")->check(kPositiveFinite);
  c->add_option("--optimizer", a->optimizer, "sgd | adam | adamw")->check(CLI::IsMember({"sgd", "adam", "adamw"}));
  c->add_option("--accumulation", a->accumulation, "micro-steps per update")->check(CLI::PositiveNumber);
  c->add_flag("--json", a->json, "print a JSON summary on stdout");
  c->add_option("--batch", a->sizes.batch, "examples per process (mlp, chargpt; default 64, 16)")
      ->check(CLI::PositiveNumber);
  add_precision_option(
      c, *a,
      "the precision contract of the forward products (gradients too with --backward reduced; the update stays f32)");
  add_parallel_options(c, *a);
  c->callback([a] { throw CLI::RuntimeError(run_train(*a)); });
}

void add_infer_command(CLI::App& app) {
  auto a = std::make_shared<TrainArgs>();
  CLI::App* c = app.add_subcommand("infer", "load a checkpoint into an inference program and evaluate it");
  add_model_options(c, *a);
  c->add_option("--checkpoint", a->resume, "checkpoint to load")->required();
  c->add_option("--device", a->device,
                "cpu | vulkan | auto | a Vulkan device's index or name (see `meganeura devices`)");
  c->add_option("--seed", a->seed, "sampling seed");
  c->add_option("--weights-dtype", a->weights_dtype,
                "f32 | f16 | bf16 | q8_0 | q4_0 (default f32): f16 and bf16 hold the weights that products and "
                "embeddings read in 16 bits (any model); chargpt also takes its embedding and projections in 8 or 4 "
                "bits")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  add_sampling_options(c, a->sizes);
  c->add_flag("--json", a->json, "print a JSON summary on stdout");
  c->callback([a] {
    text::validate(a->sizes.sampling);
    throw CLI::RuntimeError(run_infer(*a));
  });
}

}  // namespace meganeura::cli
