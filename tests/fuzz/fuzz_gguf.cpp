// Fuzzes the GGUF reader with whole files. Properties: the reader and the memory map agree; a
// file that reads decodes every tensor it holds (small ones) and writes back as a file that
// reads the same, and writing that again gives the same bytes.
#include <fstream>
#include <iterator>

#include "fuzz_util.h"
#include "meganeura/gguf.h"

using namespace meganeura;

namespace {

std::string bytes_of(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::write_input("input.gguf", data, size);
  io::GgufFile file;
  try {
    file = io::read_gguf(path);
  } catch (const io::Error&) {
    try {  // the map must refuse it as well, with io::Error and nothing else
      io::GgufMap map(path);
      fuzz::property_failed("the map read a file the reader refused");
    } catch (const io::Error&) {
    }
    return 0;
  }
  const io::GgufMap map(path);
  if (map.file().tensors.size() != file.tensors.size() || map.file().metadata.size() != file.metadata.size())
    fuzz::property_failed("the map disagrees with the reader");
  std::vector<io::GgufTensorView> views;
  for (const io::GgufTensorInfo& t : file.tensors) {
    if (t.numel() <= (int64_t(1) << 16)) {
      std::vector<float> values(static_cast<size_t>(t.numel()));
      io::dequantize(t.type, map.data(t.name), values);
    }
    views.push_back({t.name, t.type, t.shape, map.data(t.name)});
  }
  const auto a = fuzz::scratch_dir() / "a.gguf", b = fuzz::scratch_dir() / "b.gguf";
  io::write_gguf(a, file.metadata, views, file.alignment);
  const io::GgufMap again(a);
  if (again.file().tensors.size() != file.tensors.size()) fuzz::property_failed("a rewritten file lost tensors");
  std::vector<io::GgufTensorView> views2;
  for (const io::GgufTensorInfo& t : again.file().tensors) {
    const auto d0 = map.data(t.name), d1 = again.data(t.name);
    if (!std::equal(d0.begin(), d0.end(), d1.begin(), d1.end())) fuzz::property_failed("tensor bytes changed", t.name);
    views2.push_back({t.name, t.type, t.shape, d1});
  }
  io::write_gguf(b, again.file().metadata, views2, again.file().alignment);
  if (bytes_of(a) != bytes_of(b)) fuzz::property_failed("writing a file read back gives other bytes");
  return 0;
}
