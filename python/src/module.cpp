// The extension module meganeura._meganeura; the package meganeura re-exports it.
#include "pymeganeura.h"

#ifndef MEGANEURA_VERSION
#define MEGANEURA_VERSION "unknown"
#endif

PYBIND11_MODULE(_meganeura, m) {
  namespace mp = meganeura::python;
  m.doc() = "Meganeura: build, train and run neural-network programs on the CPU or through Vulkan.";
  m.attr("__version__") = MEGANEURA_VERSION;
  mp::bind_errors(m);
  mp::bind_graph(m);
  mp::bind_builders(m);
  mp::bind_session(m);
  mp::bind_trainer(m);
  mp::bind_io(m);
  mp::bind_generate(m);
  pybind11::module_ models = m.def_submodule("models", "Built-in models and their data.");
  pybind11::module_ workloads = m.def_submodule("workloads", "The five matched workloads.");
  mp::bind_models(models, workloads);
  pybind11::module_ energy = m.def_submodule("energy", "Energy prediction and fitting.");
  mp::bind_energy(energy);
}
