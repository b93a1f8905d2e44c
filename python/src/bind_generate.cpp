// meganeura.generate: text from a Llama-architecture checkpoint as an iterator of text pieces,
// through the token loop that `meganeura generate` runs (text/generation.h), with the same
// defaults. Setting up and every model run happen with the GIL released; Ctrl-C is seen
// between tokens, leaving the generation usable (the next piece continues it).
#include <memory>
#include <optional>

#include "errors.h"
#include "pymeganeura.h"
#include "text/generation.h"

namespace meganeura::python {
namespace {

namespace fs = std::filesystem;

struct GenerateArgs {
  std::optional<std::string> prompt;
  std::optional<std::vector<int32_t>> prompt_ids;
  fs::path config;
  std::optional<fs::path> weights, tokenizer;
  bool random_weights = false, ignore_eos = false;
  text::SamplingOptions sampling;
  text::StopCriteria stop;
  DeviceArgs device;
  int64_t max_context = 0, prefill_chunk = GeneratorOptions{}.prefill_chunk;
  std::string weights_dtype = "auto";
};

// One generation: what it runs on and how much of its text has been handed out. `busy` is
// taken, never waited for, by every call, so two threads get a clear error instead of a race.
struct PyGeneration {
  std::optional<text::Tokenizer> tokenizer;
  std::unique_ptr<Generator> generator;
  std::unique_ptr<text::Generation> run;
  size_t yielded = 0;
  std::mutex busy;
};
using GenerationPtr = std::shared_ptr<PyGeneration>;

std::unique_lock<std::mutex> lock(PyGeneration& g) {
  std::unique_lock<std::mutex> l(g.busy, std::try_to_lock);
  if (!l.owns_lock()) throw std::runtime_error("[generate] the generation is in use by another thread");
  return l;
}

std::vector<int32_t> prompt_ids(const GenerateArgs& a, const text::Tokenizer* tok) {
  if (a.prompt && a.prompt_ids) throw std::invalid_argument("[generate] give prompt or prompt_ids, not both");
  if (a.prompt_ids) return *a.prompt_ids;
  if (!a.prompt) throw std::invalid_argument("[generate] give a prompt (text) or prompt_ids");
  if (tok == nullptr) throw std::invalid_argument("[generate] a text prompt needs tokenizer (or give prompt_ids)");
  const std::vector<int> ids = tok->encode(*a.prompt);
  return {ids.begin(), ids.end()};
}

// Everything before the first token, in C++ alone (the caller has released the GIL): each
// argument is checked before the model is compiled, and the prompt's fit before weights load.
GenerationPtr start(GenerateArgs a) {
  if (a.stop.max_new_tokens < 0) {
    throw std::invalid_argument("[generate] max_new_tokens must be >= 0 (0: until the cache is full), got " +
                                std::to_string(a.stop.max_new_tokens));
  }
  if (a.weights.has_value() == a.random_weights)
    throw std::invalid_argument("[generate] give weights or random_weights=True (one of them)");
  require_readable(a.config, "[generate] cannot read the config");
  if (a.weights) require_readable(*a.weights, "[generate] cannot read the weights");
  if (a.tokenizer) require_readable(*a.tokenizer, "[generate] cannot read the tokenizer");
  const models::LlamaConfig config = models::read_llama_config(a.config);
  auto g = std::make_shared<PyGeneration>();
  if (a.tokenizer) g->tokenizer = text::Tokenizer::from_file(*a.tokenizer);
  std::vector<int32_t> prompt = prompt_ids(a, g->tokenizer ? &*g->tokenizer : nullptr);
  text::validate(a.sampling);
  if (!a.ignore_eos)
    for (int id : text::read_eos_token_ids(a.config)) a.stop.stop_token_ids.push_back(id);
  g->generator = std::make_unique<Generator>(
      config, GeneratorOptions{.max_context = a.max_context,
                               .prefill_chunk = a.prefill_chunk,
                               .top_k = text::device_top_k(a.sampling, config.vocab_size),
                               .weights = text::weights_dtype(a.weights_dtype, a.weights.value_or(fs::path())),
                               .session = session_options(a.device)});
  g->run = std::make_unique<text::Generation>(*g->generator, std::move(prompt), a.sampling, std::move(a.stop),
                                              g->tokenizer ? &*g->tokenizer : nullptr);
  if (a.weights)
    g->generator->load_weights(*a.weights);
  else
    g->generator->initialise_weights();
  return g;
}

// The next non-empty piece of text; tokens that release none (a character or a possible stop
// string still incomplete) are run without returning to Python.
py::str next_piece(PyGeneration& g) {
  auto held = lock(g);
  while (true) {
    const std::string_view text = g.run->released();
    if (text.size() > g.yielded) {
      py::str piece(text.data() + g.yielded, text.size() - g.yielded);
      g.yielded = text.size();
      return piece;
    }
    if (g.run->finished()) throw py::stop_iteration();
    // Ctrl-C (or any pending signal handler's exception) between tokens.
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    py::gil_scoped_release release;
    g.run->step();
  }
}

// A property read under the generation's lock.
template <class F>
auto locked(F f) {
  return [f](PyGeneration& g) {
    auto held = lock(g);
    return f(g);
  };
}

void bind_generation_class(py::module_& m) {
  py::class_<PyGeneration, GenerationPtr>(
      m, "Generation",
      "Text being generated: iterate for its pieces; the ids, text and speeds so far are its properties.")
      .def("__iter__", [](const GenerationPtr& g) { return g; })
      .def("__next__", &next_piece)
      .def_property_readonly("tokens", locked([](PyGeneration& g) { return g.run->new_tokens(); }),
                             "The new token ids so far.")
      .def_property_readonly("prompt_tokens", locked([](PyGeneration& g) { return g.run->prompt_tokens(); }))
      .def_property_readonly("text", locked([](PyGeneration& g) { return std::string(g.run->released()); }),
                             "The text released so far (all of it once finished).")
      .def_property_readonly("finished", locked([](PyGeneration& g) { return g.run->finished(); }))
      .def_property_readonly("device", locked([](PyGeneration& g) { return g.generator->session().device_name(); }))
      .def_property_readonly("ttft_ms", locked([](PyGeneration& g) { return g.run->stats().ttft_ms; }))
      .def_property_readonly("prefill_tokens_per_second",
                             locked([](PyGeneration& g) { return g.run->stats().prefill_tokens_per_second; }))
      .def_property_readonly("decode_tokens_per_second",
                             locked([](PyGeneration& g) { return g.run->stats().decode_tokens_per_second; }))
      .def("__repr__", locked([](PyGeneration& g) {
             return "Generation(" + std::to_string(g.run->prompt_tokens()) + " prompt tokens, " +
                    std::to_string(g.run->new_tokens().size()) + " new" + (g.run->finished() ? ", finished)" : ")");
           }));
}

}  // namespace

void bind_generate(py::module_& m) {
  bind_generation_class(m);
  const text::SamplingOptions s;
  m.def(
      "generate",
      [](std::optional<std::string> prompt, fs::path config, std::optional<fs::path> weights,
         std::optional<fs::path> tokenizer, std::optional<std::vector<int32_t>> prompt_ids, int max_new_tokens,
         double temperature, int top_k, float top_p, float min_p, float repetition_penalty, uint64_t seed,
         std::vector<std::string> stop, std::vector<int> stop_ids, bool ignore_eos, std::string device,
         int64_t max_context, int64_t prefill_chunk, int threads, bool random_weights, std::string weights_dtype) {
        GenerateArgs a{.prompt = std::move(prompt),
                       .prompt_ids = std::move(prompt_ids),
                       .config = std::move(config),
                       .weights = std::move(weights),
                       .tokenizer = std::move(tokenizer),
                       .random_weights = random_weights,
                       .ignore_eos = ignore_eos,
                       .sampling = {.temperature = float(temperature),
                                    .top_k = top_k,
                                    .top_p = top_p,
                                    .min_p = min_p,
                                    .repetition_penalty = repetition_penalty,
                                    .seed = seed},
                       .stop = {.max_new_tokens = max_new_tokens,
                                .stop_token_ids = std::move(stop_ids),
                                .stop_strings = std::move(stop)},
                       .device = DeviceArgs{.device = std::move(device), .seed = seed, .threads = threads},
                       .max_context = max_context,
                       .prefill_chunk = prefill_chunk,
                       .weights_dtype = std::move(weights_dtype)};
        py::gil_scoped_release release;
        return start(std::move(a));
      },
      py::arg("prompt") = py::none(), py::kw_only(), py::arg("config"), py::arg("weights") = py::none(),
      py::arg("tokenizer") = py::none(), py::arg("prompt_ids") = py::none(),
      py::arg("max_new_tokens") = text::kGenerateMaxNewTokens, py::arg("temperature") = text::kGenerateTemperature,
      py::arg("top_k") = s.top_k, py::arg("top_p") = s.top_p, py::arg("min_p") = s.min_p,
      py::arg("repetition_penalty") = s.repetition_penalty, py::arg("seed") = kDeviceDefaults.seed,
      py::arg("stop") = std::vector<std::string>{}, py::arg("stop_ids") = std::vector<int>{},
      py::arg("ignore_eos") = false, py::arg("device") = kDeviceDefaults.device,
      py::arg("max_context") = GeneratorOptions{}.max_context,
      py::arg("prefill_chunk") = GeneratorOptions{}.prefill_chunk, py::arg("threads") = kDeviceDefaults.threads,
      py::arg("random_weights") = false, py::arg("weights_dtype") = "auto",
      "Generates text from a Llama-architecture checkpoint (config.json and safetensors, or a GGUF file as config, "
      "weights and tokenizer), as `meganeura generate` does; weights_dtype 'f16', 'bf16', 'q8_0' or 'q4_0' holds every "
      "matrix in that format. Returns a Generation to iterate for the text, piece by piece.");
}

}  // namespace meganeura::python
