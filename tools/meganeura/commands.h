// Subcommands of the meganeura tool, each registered on the CLI11 app by one call.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "energy/cli.h"
#include "meganeura/session.h"

namespace meganeura::cli {

void add_train_command(CLI::App& app);
void add_infer_command(CLI::App& app);
void add_program_command(CLI::App& app);
// models, run and gate: the matched workloads.
void add_workload_commands(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_devices_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
// llama: a Hugging Face Llama checkpoint over token ids.
void add_llama_command(CLI::App& app);
// generate: text from a Llama checkpoint through the key/value cache.
void add_generate_command(CLI::App& app);
// quantize: a Llama checkpoint as a GGUF file with block-format weights.
void add_quantize_command(CLI::App& app);
// Comma-separated token ids, each in [0, vocab); `option` names the flag in messages.
std::vector<int32_t> parse_token_ids(const std::string& text, const std::string& option, int64_t vocab);
// VmHWM of this process in bytes (-1 when unknown): getrusage's ru_maxrss survives exec, so a
// parent's footprint (a Python driver with PyTorch loaded) would be reported as ours.
int64_t peak_rss_bytes();
// The session options every command starts from. The environment is read here, in the tool,
// never by the library: MEGANEURA_VULKAN_VALIDATION=1 switches the Khronos validation layer on.
SessionOptions base_session_options();
// Adds the gradient of `loss` with respect to every parameter of `g` as the output
// "grad.<parameter name>": the names `run --dump` writes and the reference scripts read.
// `scaled`: the gradients of loss * the input kLossScaleName (loss scaling; train.h), left
// scaled for the caller to divide.
void output_parameter_gradients(Graph& g, Tensor loss, bool scaled = false);
// Lends the energy commands the dispatches of our compiled training steps.
energy::EnergyCliHooks energy_hooks();

}  // namespace meganeura::cli
