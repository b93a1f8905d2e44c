// Helpers shared by the energy tests.
#pragma once

#include "energy/hardware.h"

namespace meganeura::energy::testing_support {

// The shipped hardware table, whatever user copy the machine running the tests may have.
inline const HardwareTable& table() {
  static const HardwareTable t = HardwareTable::load(MEGANEURA_SOURCE_DIR "/data/hardware.toml");
  return t;
}

}  // namespace meganeura::energy::testing_support
