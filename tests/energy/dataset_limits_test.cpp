// The CSV reader reads at most kMaxCsvBytes into memory: an endless input stops there with an
// error naming the limit. Then the findings of fuzzing, with their reproducers
// (tests/fuzz/regressions/energy_csv/) as fixtures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
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
    EXPECT_EQ(std::string(e.what()), "[energy] /dev/zero: larger than the limit of 67108864 bytes (kMaxCsvBytes)");
  }
}

TEST(DatasetLimits, MissingFileIsAnError) { EXPECT_THROW(load_runs_csv("/nonexistent/runs.csv"), std::runtime_error); }

// A row whose seq_len_batch cell is empty, in a file without a max_length column: the error
// used to be std::out_of_range "map::at" (the missing column's name was looked up).
TEST(DatasetFuzzFindings, EmptySeqCellWithoutMaxLengthColumn) {
  const auto path = std::filesystem::path(MEGANEURA_SOURCE_DIR) /
                    "tests/fuzz/regressions/energy_csv/empty-seq-cell-without-max-length-column";
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << path;
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  try {
    parse_runs_csv(text, "runs.csv");
    FAIL() << "accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), "[energy] runs.csv row 2, column 'seq_len_batch': empty cell");
  }
  // With a max_length column the empty cell falls back to it.
  const Dataset d = parse_runs_csv(
      "gpu,strategy,gpus,layers,hidden,batch,seq,max_length,tokens,energy_kwh\n"
      "t4,baseline,1,2,128,8,,64,1e6,0.002\n",
      "fallback.csv");
  ASSERT_EQ(d.records.size(), 1u);
  EXPECT_DOUBLE_EQ(d.records[0].seq, 64);
}

}  // namespace
}  // namespace meganeura::energy
