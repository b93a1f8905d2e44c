// Subcommands of the meganeura tool, each registered on the CLI11 app by one call.
#pragma once

#include <CLI/CLI.hpp>

namespace meganeura::cli {

void add_train_command(CLI::App& app);
void add_infer_command(CLI::App& app);

}  // namespace meganeura::cli
