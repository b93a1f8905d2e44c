// The CSV reader reads at most kMaxCsvBytes into memory: an endless input stops there with an
// error naming the limit.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "energy/dataset.h"

namespace meganeura::energy {
namespace {

TEST(DatasetLimits, EndlessInputStopsAtTheLimit) {
  try {
    load_runs_csv("/dev/zero");
    FAIL() << "accepted an endless file";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "[energy] /dev/zero: larger than the limit of 67108864 bytes (kMaxCsvBytes)");
  }
}

TEST(DatasetLimits, MissingFileIsAnError) {
  EXPECT_THROW(load_runs_csv("/nonexistent/runs.csv"), std::runtime_error);
}

}  // namespace
}  // namespace meganeura::energy
