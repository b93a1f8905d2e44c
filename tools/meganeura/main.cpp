// meganeura: train, infer, benchmark and estimate energy from one binary.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "energy/cli.h"

namespace {

// The compiler lends the energy commands its programs here.
meganeura::energy::EnergyCliHooks energy_hooks() { return {}; }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"meganeura: train and deploy neural networks on any GPU through Vulkan"};
  app.set_version_flag("--version", std::string("meganeura ") + MEGANEURA_VERSION);
  app.require_subcommand(1);
  meganeura::energy::add_energy_commands(app, energy_hooks());
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "meganeura: %s\n", e.what());
    return 1;
  }
  return 0;
}
