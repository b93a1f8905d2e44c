// meganeura: train, infer and estimate energy from one binary.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

#include "commands.h"
#include "energy/cli.h"

meganeura::SessionOptions meganeura::cli::base_session_options() {
  const char* validation = std::getenv("MEGANEURA_VULKAN_VALIDATION");
  return SessionOptions{.vulkan_validation = validation && std::string(validation) == "1"};
}

int main(int argc, char** argv) {
  CLI::App app{"meganeura: train and deploy neural networks on any GPU through Vulkan"};
  app.set_version_flag("--version", std::string("meganeura ") + MEGANEURA_VERSION);
  app.require_subcommand(1);
  meganeura::cli::add_train_command(app);
  meganeura::cli::add_infer_command(app);
  meganeura::cli::add_program_command(app);
  meganeura::cli::add_workload_commands(app);
  meganeura::cli::add_bench_command(app);
  meganeura::cli::add_devices_command(app);
  meganeura::cli::add_profile_command(app);
  meganeura::cli::add_tokenize_command(app);
  meganeura::cli::add_llama_command(app);
  meganeura::cli::add_generate_command(app);
  meganeura::cli::add_quantize_command(app);
  meganeura::energy::add_energy_commands(app, meganeura::cli::energy_hooks());
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {  // a subcommand finished: its status
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {  // a usage error (or --help / --version): status 2 (0)
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meganeura: %s\n", e.what());
    return 1;
  }
  return 0;
}
