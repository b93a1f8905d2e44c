// Fuzzes the safetensors reader with whole files. Property: a file that reads must round-trip,
// i.e. writing what was read and reading it again gives the same tensors and metadata, and the
// header-only reader agrees with the full reader.
#include <cstring>

#include "fuzz_util.h"
#include "meganeura/safetensors.h"

using namespace meganeura;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto path = fuzz::write_input("input.safetensors", data, size);
  io::SafetensorsFile file;
  try {
    file = io::read_safetensors(path);
  } catch (const io::Error&) {
    // Every rejection must also be one for the header reader or a data-only problem; both
    // readers must fail with io::Error and nothing else.
    try {
      io::read_safetensors_header(path);
    } catch (const io::Error&) {
    }
    return 0;
  }
  io::SafetensorsHeader header = io::read_safetensors_header(path);
  if (header.tensors.size() != file.tensors.size() || header.metadata != file.metadata)
    fuzz::property_failed("header reader disagrees with the full reader");
  if (header.tensors.size() > io::kMaxTensorCount) fuzz::property_failed("tensor count over the limit");
  for (const auto& [name, info] : header.tensors) {
    if (info.shape.size() > io::kMaxFileRank) fuzz::property_failed("rank over the limit", name);
  }
  try {
    // The checkpoint validator only reads the metadata; it may reject, never crash.
    io::check_checkpoint_metadata(file.metadata, path);
  } catch (const io::Error&) {
  }

  io::NamedTensorViews views;
  for (const auto& [name, record] : file.tensors) views.emplace_back(name, record.view());
  auto copy = fuzz::scratch_dir() / "copy.safetensors";
  try {
    io::write_safetensors(copy, views, file.metadata);
  } catch (const io::Error& e) {
    // The reader accepts names the writer refuses only if they cannot be written back; no
    // such case is known, so any refusal is a round-trip failure.
    fuzz::property_failed("a file that reads cannot be written back:", e.what());
  }
  io::SafetensorsFile again = io::read_safetensors(copy);
  if (again.metadata != file.metadata) fuzz::property_failed("metadata changed in a round trip");
  if (again.tensors.size() != file.tensors.size()) fuzz::property_failed("tensor count changed");
  for (const auto& [name, record] : file.tensors) {
    auto it = again.tensors.find(name);
    if (it == again.tensors.end()) fuzz::property_failed("tensor lost in a round trip", name);
    if (it->second.dtype != record.dtype || it->second.shape != record.shape || it->second.data != record.data)
      fuzz::property_failed("tensor changed in a round trip", name);
  }
  return 0;
}
