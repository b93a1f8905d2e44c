// The per-workload builders behind build_workload.
#pragma once

#include "meganeura/workloads.h"

namespace meganeura::models {
Workload build_smollm2(Graph& g, Scale scale, bool minimal);
Workload build_smolvla(Graph& g, Scale scale, bool minimal);
Workload build_whisper(Graph& g, Scale scale, bool minimal);
Workload build_unet(Graph& g, Scale scale, bool minimal);
Workload build_resnet50(Graph& g, Scale scale, bool minimal);
}  // namespace meganeura::models
