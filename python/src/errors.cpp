// C++ exceptions -> Python exceptions with the same message. pybind11 already maps the standard
// ones (invalid_argument -> ValueError, out_of_range -> IndexError, bad_alloc -> MemoryError,
// other exceptions -> RuntimeError); files add their own classes here.
#include "errors.h"

#include <cstring>
#include <filesystem>

#include "meganeura/llama.h"
#include "meganeura/safetensors.h"
#include "pymeganeura.h"
#include "text/tokenizer.h"

namespace meganeura::python {

void require_readable(const std::filesystem::path& path, const char* what) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw PathError{ENOENT, what, path.string()};
}

void require_parent_directory(const std::filesystem::path& path, const char* what) {
  std::error_code ec;
  const std::filesystem::path parent = path.parent_path().empty() ? "." : path.parent_path();
  if (!std::filesystem::is_directory(parent, ec)) throw PathError{ENOENT, what, path.string()};
}

void bind_errors(py::module_& m) {
  // A file the library could not use: the OS refused it or its content is malformed. Both bases,
  // so `except OSError` and `except ValueError` each catch it.
  py::object file_error = py::reinterpret_steal<py::object>(PyErr_NewExceptionWithDoc(
      "meganeura.FileError", "A file the library could not read or write: an OS error or malformed content.",
      py::make_tuple(py::handle(PyExc_OSError), py::handle(PyExc_ValueError)).ptr(), nullptr));
  m.attr("FileError") = file_error;
  static py::handle file_error_type = file_error.release();
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const io::Error& e) {
      PyErr_SetString(file_error_type.ptr(), e.what());
    } catch (const models::ConfigError& e) {  // config.json: malformed, or a model this builder lacks
      PyErr_SetString(file_error_type.ptr(), e.what());
    } catch (const text::TokenizerError& e) {  // tokenizer.json: malformed or unsupported
      PyErr_SetString(file_error_type.ptr(), e.what());
    } catch (const PathError& e) {
      // OSError(errno, text, filename) becomes the errno's subclass (FileNotFoundError, ...).
      py::tuple args = py::make_tuple(e.error, std::string(e.what) + ": " + std::strerror(e.error), e.path);
      PyErr_SetObject(PyExc_OSError, args.ptr());
    } catch (const std::filesystem::filesystem_error& e) {
      py::tuple args = py::make_tuple(e.code().value(), std::string(e.what()), e.path1().string());
      PyErr_SetObject(PyExc_OSError, args.ptr());
    }
  });
}

}  // namespace meganeura::python
