// The Program's JSON form (to_json, from_json), its text dump and its hash.
#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include "graph/attr_fields.h"
#include "graph/op_table.h"
#include "meganeura/program.h"

namespace meganeura {

using nlohmann::json;

double Program::total_flops() const {
  double f = 0;
  for (const Dispatch& d : dispatches) f += d.flops;
  return f;
}
double Program::total_bytes() const {
  double b = 0;
  for (const Dispatch& d : dispatches) b += d.bytes;
  return b;
}
uint64_t Program::weight_bytes(const Dispatch& d) const {
  uint64_t b = 0;
  for (size_t i = 0; i < d.reads.size(); ++i) {
    if (std::find(d.reads.begin(), d.reads.begin() + i, d.reads[i]) != d.reads.begin() + i) continue;  // once
    const ProgramTensor& t = tensors.at(d.reads[i]);
    const ProgramTensor* root = &t;
    while (root->view_of >= 0) root = &tensors.at(size_t(root->view_of));
    if (root->role != Role::parameter) continue;
    // A gather (embedding) reads the rows it picks: as many elements as it writes.
    const double out = double(tensors.at(d.write()).type.numel()), in = double(t.type.numel());
    const bool gather = op_info(d.op).family == OpFamily::index && i == 0 && in > 0;
    b += gather ? uint64_t(double(t.bytes) * std::min(1.0, out / in)) : t.bytes;
  }
  return b;
}
uint64_t Program::read_bytes(const Dispatch& d) const {
  uint64_t b = 0;
  for (size_t i = 0; i < d.reads.size(); ++i) {
    if (std::find(d.reads.begin(), d.reads.begin() + i, d.reads[i]) == d.reads.begin() + i)
      b += tensors.at(d.reads[i]).bytes;
  }
  return b;
}
uint64_t Program::total_weight_bytes() const {
  uint64_t b = 0;
  for (const Dispatch& d : dispatches) b += weight_bytes(d);
  return b;
}
size_t Program::barrier_count() const {
  size_t n = 0;
  for (const Dispatch& d : dispatches) n += d.barrier;
  return n;
}
const ExternalBuffer* Program::external(const std::string& name) const {
  for (const ExternalBuffer& e : externals) {
    if (e.name == name) return &e;
  }
  return nullptr;
}

namespace {

// Doubles that JSON cannot hold (inf, nan) are written as strings.
json number(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf";
}

json limits_json(const DeviceLimits& l) {
  return {{"max_binding_bytes", l.max_binding_bytes},
          {"max_allocation_bytes", l.max_allocation_bytes},
          {"offset_alignment", l.offset_alignment}};
}

}  // namespace

std::string Program::to_json() const {
  json ts = json::array();
  for (const ProgramTensor& t : tensors) {
    ts.push_back({{"dtype", dtype_name(t.type.dtype)},
                  {"stored", dtype_name(t.stored)},
                  {"shape", t.type.shape},
                  {"role", role_name(t.role)},
                  {"binding", t.binding},
                  {"buffer", t.buffer},
                  {"offset", t.offset},
                  {"bytes", t.bytes},
                  {"node", t.node},
                  {"view_of", t.view_of}});
  }
  json ds = json::array();
  for (const Dispatch& d : dispatches) {
    json waits = json::array();
    for (const Hazard& h : d.waits) waits.push_back({h.dispatch, hazard_name(h.kind)});
    ds.push_back({{"op", op_name(d.op)},
                  {"attrs", json::parse(attrs_json(d.attrs))},
                  {"reads", d.reads},
                  {"writes", d.writes},
                  {"flops", number(d.flops)},
                  {"bytes", number(d.bytes)},
                  {"waits", waits},
                  {"barrier", d.barrier}});
  }
  json es = json::array();
  for (const ExternalBuffer& e : externals) {
    json values = json::array();
    for (double v : e.const_data) values.push_back(number(v));
    es.push_back({{"name", e.name},
                  {"role", role_name(e.role)},
                  {"dtype", dtype_name(e.type.dtype)},
                  {"stored", dtype_name(e.stored)},
                  {"shape", e.type.shape},
                  {"init", {int(e.init.kind), number(e.init.a)}},
                  {"values", values}});
  }
  return json{{"float_dtype", dtype_name(float_dtype)},
              {"limits", limits_json(limits)},
              {"arena_buffers", arena_buffers},
              {"arena_bytes", arena_bytes},
              {"graph_hash", graph_hash},
              {"tensors", ts},
              {"dispatches", ds},
              {"externals", es},
              {"memory",
               {{"logical", memory.logical_bytes},
                {"planned", memory.planned_bytes},
                {"lower_bound", memory.lower_bound_bytes},
                {"external", memory.external_bytes},
                {"inplace_reuses", memory.inplace_reuses},
                {"views", memory.views}}}}
      .dump();
}

uint64_t Program::hash() const { return fnv1a(to_json()); }

// ---- from_json -----
namespace {

// Limits of from_json: one tensor has at most kMaxProgramTensorElements elements (so its bytes
// fit 64 bits in any dtype) and at most kMaxProgramRank dimensions.
constexpr int64_t kMaxProgramTensorElements = int64_t(1) << 56;
constexpr size_t kMaxProgramRank = 64;

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw std::invalid_argument("[program] from_json: " + path + ": " + what);
}

const json& field(const json& j, const std::string& key, const std::string& path) {
  if (!j.is_object()) bad(path, "expected an object");
  auto it = j.find(key);
  if (it == j.end()) bad(path + "." + key, "missing");
  return *it;
}

uint64_t as_u64(const json& j, const std::string& path) {
  if (!j.is_number_unsigned()) bad(path, "expected a non-negative integer, got " + j.dump());
  return j.get<uint64_t>();
}
int64_t as_i64(const json& j, const std::string& path) {
  if (!j.is_number_integer()) bad(path, "expected an integer, got " + j.dump());
  return j.get<int64_t>();
}
uint32_t as_u32(const json& j, const std::string& path) {
  uint64_t v = as_u64(j, path);
  if (v > UINT32_MAX) bad(path, "out of range");
  return uint32_t(v);
}
double as_double(const json& j, const std::string& path) {
  if (j.is_number()) return j.get<double>();
  if (j == "inf") return INFINITY;
  if (j == "-inf") return -INFINITY;
  if (j == "nan") return NAN;
  bad(path, "expected a number, got " + j.dump());
}
bool as_bool(const json& j, const std::string& path) {
  if (!j.is_boolean()) bad(path, "expected true or false, got " + j.dump());
  return j.get<bool>();
}
std::string as_string(const json& j, const std::string& path) {
  if (!j.is_string()) bad(path, "expected a string, got " + j.dump());
  return j.get<std::string>();
}
const json& as_array(const json& j, const std::string& path) {
  if (!j.is_array()) bad(path, "expected an array");
  return j;
}
std::vector<int64_t> as_ints(const json& j, const std::string& path) {
  std::vector<int64_t> v;
  for (size_t i = 0; i < as_array(j, path).size(); ++i) v.push_back(as_i64(j[i], path + "[" + std::to_string(i) + "]"));
  return v;
}
std::vector<uint32_t> as_indices(const json& j, const std::string& path) {
  std::vector<uint32_t> v;
  for (size_t i = 0; i < as_array(j, path).size(); ++i) v.push_back(as_u32(j[i], path + "[" + std::to_string(i) + "]"));
  return v;
}
// A shape whose element count (and so its byte count) fits 64 bits; verify() and the
// backends multiply dimensions without further checks.
std::vector<int64_t> as_shape(const json& j, const std::string& path) {
  std::vector<int64_t> s = as_ints(j, path);
  if (s.size() > kMaxProgramRank)
    bad(path,
        std::to_string(s.size()) + " dimensions, above kMaxProgramRank (" + std::to_string(kMaxProgramRank) + ")");
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) bad(path, "negative dimension " + std::to_string(d));
    if (d != 0 && n > kMaxProgramTensorElements / d) {
      bad(path, "more than kMaxProgramTensorElements (2^56) elements");
    }
    n *= d;
  }
  return s;
}
DType as_dtype(const json& j, const std::string& path) {
  std::string s = as_string(j, path);
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u32, DType::f64, DType::q8_0, DType::q4_0}) {
    if (dtype_name(t) == s) return t;
  }
  bad(path, "unknown dtype '" + s + "'");
}
Role as_role(const json& j, const std::string& path) {
  std::string s = as_string(j, path);
  for (Role r : {Role::input, Role::parameter, Role::state, Role::constant, Role::output, Role::temp}) {
    if (role_name(r) == s) return r;
  }
  bad(path, "unknown role '" + s + "'");
}
Op as_op(const json& j, const std::string& path) {
  std::string s = as_string(j, path);
  for (const OpInfo& info : op_table()) {
    if (info.name == s) return info.op;
  }
  bad(path, "unknown op '" + s + "'");
}
// A fused op's code as attrs_json writes it: "in<k>" pushes input k, "store<k>" / "load<k>" store
// and load output k of a multi-output program, a number pushes a constant,
// an op name applies a unary or binary op, [affine, a, b] and [clip_coef, a] carry constants.
std::vector<FusedInstr> fused_code(const json& j, const std::string& path) {
  if (as_array(j, path).size() > kFusedMaxCode)
    bad(path, std::to_string(j.size()) + " instructions, above kFusedMaxCode (" + std::to_string(kFusedMaxCode) + ")");
  std::vector<FusedInstr> code;
  for (size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    const std::string ep = path + "[" + std::to_string(i) + "]";
    FusedInstr f;
    const std::string s = e.is_string() ? e.get<std::string>() : "";
    auto indexed = [&](const std::string& prefix, size_t limit) {
      return s.size() == prefix.size() + 1 && s.rfind(prefix, 0) == 0 && s.back() >= '0' &&
             size_t(s.back() - '0') < limit;
    };
    if (indexed("in", kFusedMaxInputs)) {
      f.kind = FusedInstr::input;
      f.index = uint32_t(s[2] - '0');
    } else if (indexed("store", kFusedMaxOutputs) || indexed("load", kFusedMaxOutputs)) {
      f.kind = s[0] == 's' ? FusedInstr::store : FusedInstr::load;
      f.index = uint32_t(s.back() - '0');
    } else if (e.is_number() || (e.is_string() && (e == "inf" || e == "-inf" || e == "nan"))) {
      f.kind = FusedInstr::constant;
      f.a = as_double(e, ep);
    } else if (e.is_array()) {
      if (e.empty()) bad(ep, "expected [op, constants...]");
      f.kind = FusedInstr::unary;
      f.op = as_op(e[0], ep + "[0]");
      const size_t want = f.op == Op::affine ? 3 : f.op == Op::clip_coef ? 2 : 0;
      if (want == 0 || e.size() != want)
        bad(ep, "only [\"affine\", scale, shift] and [\"clip_coef\", max_norm] carry constants");
      f.a = as_double(e[1], ep + "[1]");
      if (want == 3) f.b = as_double(e[2], ep + "[2]");
    } else {
      f.op = as_op(e, ep);
      const OpInfo& info = op_info(f.op);
      if (info.family != OpFamily::unary && info.family != OpFamily::binary)
        bad(ep, "'" + std::string(info.name) + "' is not an elementwise op");
      f.kind = info.family == OpFamily::unary ? FusedInstr::unary : FusedInstr::binary;
    }
    code.push_back(f);
  }
  return code;
}

// One attribute, read as its C++ type codes it (graph/attr_fields.h).
void read_attr(const json& j, const std::string& path, bool, bool& v) { v = as_bool(j, path); }
void read_attr(const json& j, const std::string& path, bool, int64_t& v) { v = as_i64(j, path); }
void read_attr(const json& j, const std::string& path, bool, double& v) { v = as_double(j, path); }
void read_attr(const json& j, const std::string& path, bool, DType& v) { v = as_dtype(j, path); }
void read_attr(const json& j, const std::string& path, bool, Op& v) { v = as_op(j, path); }
void read_attr(const json& j, const std::string& path, bool, int64_t (&v)[2]) {
  const std::vector<int64_t> pair = as_ints(j, path);
  if (pair.size() != 2) bad(path, "expected two integers");
  v[0] = pair[0];
  v[1] = pair[1];
}
void read_attr(const json& j, const std::string& path, bool shape, std::vector<int64_t>& v) {
  v = shape ? as_shape(j, path) : as_ints(j, path);
}
void read_attr(const json& j, const std::string& path, bool, std::vector<FusedInstr>& v) { v = fused_code(j, path); }

// Attributes are written without their type; the set of keys names it (no two attribute
// structs share one), and the struct's field table says how to read each key.
Attrs attrs_from(const json& j, const std::string& path) {
  if (!j.is_object()) bad(path, "expected an object");
  std::set<std::string, std::less<>> keys;
  for (auto& [k, v] : j.items()) keys.insert(k);
  std::optional<Attrs> out;
  attr_fields::for_each_attrs_type([&](auto attrs) {
    using S = decltype(attrs);
    std::set<std::string, std::less<>> want;
    attr_fields::for_each_field<S>([&](const auto& f) { want.emplace(f.key); });
    if (out || want != keys) return;
    attr_fields::for_each_field<S>([&](const auto& f) {
      const std::string key(f.key);
      read_attr(field(j, key, path), path + "." + key, f.shape, f.get(attrs));
    });
    out = std::move(attrs);
  });
  if (!out) bad(path, "attributes " + j.dump() + " match no op's attribute set");
  return *std::move(out);
}

// One JSON object's fields, with paths for the errors ("tensors[3].shape").
struct Fields {
  const json& j;
  std::string path;
  const json& at(const char* k) const { return field(j, k, path); }
  std::string pk(const char* k) const { return path + "." + k; }
};

ProgramTensor tensor_from(const Fields& f) {
  ProgramTensor x;
  x.type.dtype = as_dtype(f.at("dtype"), f.pk("dtype"));
  x.type.shape = as_shape(f.at("shape"), f.pk("shape"));
  x.stored = as_dtype(f.at("stored"), f.pk("stored"));
  x.role = as_role(f.at("role"), f.pk("role"));
  x.binding = as_string(f.at("binding"), f.pk("binding"));
  x.buffer = as_u32(f.at("buffer"), f.pk("buffer"));
  x.offset = as_u64(f.at("offset"), f.pk("offset"));
  x.bytes = as_u64(f.at("bytes"), f.pk("bytes"));
  x.node = as_u32(f.at("node"), f.pk("node"));
  const int64_t v = as_i64(f.at("view_of"), f.pk("view_of"));
  if (v < -1 || v > INT32_MAX) bad(f.pk("view_of"), "out of range");
  x.view_of = int32_t(v);
  return x;
}

Hazard hazard_from(const json& w, const std::string& path) {
  if (!w.is_array() || w.size() != 2) bad(path, "expected [dispatch, \"raw\"|\"war\"|\"waw\"]");
  Hazard h{as_u32(w[0], path + "[0]")};
  const std::string kind = as_string(w[1], path + "[1]");
  if (kind == "raw")
    h.kind = HazardKind::raw;
  else if (kind == "war")
    h.kind = HazardKind::war;
  else if (kind == "waw")
    h.kind = HazardKind::waw;
  else
    bad(path + "[1]", "unknown hazard kind '" + kind + "'");
  return h;
}

Dispatch dispatch_from(const Fields& f) {
  Dispatch x{.op = as_op(f.at("op"), f.pk("op")),
             .attrs = attrs_from(f.at("attrs"), f.pk("attrs")),
             .reads = as_indices(f.at("reads"), f.pk("reads")),
             .writes = as_indices(f.at("writes"), f.pk("writes")),
             .flops = as_double(f.at("flops"), f.pk("flops")),
             .bytes = as_double(f.at("bytes"), f.pk("bytes")),
             .waits = {},
             .barrier = false};
  const json& waits = as_array(f.at("waits"), f.pk("waits"));
  for (size_t k = 0; k < waits.size(); ++k)
    x.waits.push_back(hazard_from(waits[k], f.pk("waits") + "[" + std::to_string(k) + "]"));
  x.barrier = as_bool(f.at("barrier"), f.pk("barrier"));
  return x;
}

ExternalBuffer external_from(const Fields& f) {
  ExternalBuffer x;
  x.name = as_string(f.at("name"), f.pk("name"));
  x.role = as_role(f.at("role"), f.pk("role"));
  x.type.dtype = as_dtype(f.at("dtype"), f.pk("dtype"));
  x.type.shape = as_shape(f.at("shape"), f.pk("shape"));
  x.stored = as_dtype(f.at("stored"), f.pk("stored"));
  const json& init = f.at("init");
  if (!init.is_array() || init.size() != 2) bad(f.pk("init"), "expected [kind, value]");
  const int64_t kind = as_i64(init[0], f.pk("init") + "[0]");
  if (kind < 0 || kind > int64_t(Init::constant))
    bad(f.pk("init") + "[0]", "unknown initialiser " + std::to_string(kind));
  x.init = Init{Init::Kind(kind), as_double(init[1], f.pk("init") + "[1]")};
  const json& values = as_array(f.at("values"), f.pk("values"));
  for (size_t k = 0; k < values.size(); ++k)
    x.const_data.push_back(as_double(values[k], f.pk("values") + "[" + std::to_string(k) + "]"));
  return x;
}

// Reads every element of the array `key` of the root with `read`.
template <class T, class Read>
std::vector<T> array_from(const json& root, const char* key, Read read) {
  const json& items = as_array(field(root, key, "program"), std::string("program.") + key);
  std::vector<T> out;
  for (size_t i = 0; i < items.size(); ++i)
    out.push_back(read(Fields{items[i], key + ("[" + std::to_string(i) + "]")}));
  return out;
}

void header_from(const json& root, Program& p) {
  const Fields r{root, "program"};
  p.float_dtype = as_dtype(r.at("float_dtype"), r.pk("float_dtype"));
  const Fields lim{r.at("limits"), r.pk("limits")};
  p.limits.max_binding_bytes = as_u64(lim.at("max_binding_bytes"), lim.pk("max_binding_bytes"));
  p.limits.max_allocation_bytes = as_u64(lim.at("max_allocation_bytes"), lim.pk("max_allocation_bytes"));
  p.limits.offset_alignment = as_u64(lim.at("offset_alignment"), lim.pk("offset_alignment"));
  const json& bufs = as_array(r.at("arena_buffers"), r.pk("arena_buffers"));
  for (size_t i = 0; i < bufs.size(); ++i)
    p.arena_buffers.push_back(as_u64(bufs[i], r.pk("arena_buffers") + "[" + std::to_string(i) + "]"));
  p.arena_bytes = as_u64(r.at("arena_bytes"), r.pk("arena_bytes"));
  p.graph_hash = as_u64(r.at("graph_hash"), r.pk("graph_hash"));
}

void memory_from(const Fields& m, MemoryStats& s) {
  s.logical_bytes = as_u64(m.at("logical"), m.pk("logical"));
  s.planned_bytes = as_u64(m.at("planned"), m.pk("planned"));
  s.lower_bound_bytes = as_u64(m.at("lower_bound"), m.pk("lower_bound"));
  s.external_bytes = as_u64(m.at("external"), m.pk("external"));
  s.inplace_reuses = as_u32(m.at("inplace_reuses"), m.pk("inplace_reuses"));
  s.views = as_u32(m.at("views"), m.pk("views"));
}

}  // namespace

Attrs parse_attrs(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    bad("attrs", std::string("not JSON: ") + e.what());
  }
  return attrs_from(j, "attrs");
}

Program Program::from_json(const std::string& text) {
  json root;
  try {
    root = json::parse(text);
  } catch (const json::exception& e) {  // syntax errors, and numbers no double holds (1e400)
    throw std::invalid_argument(std::string("[program] from_json: not valid JSON: ") + e.what());
  }
  Program p;
  header_from(root, p);
  p.tensors = array_from<ProgramTensor>(root, "tensors", tensor_from);
  p.dispatches = array_from<Dispatch>(root, "dispatches", dispatch_from);
  p.externals = array_from<ExternalBuffer>(root, "externals", external_from);
  memory_from(Fields{field(root, "memory", "program"), "program.memory"}, p.memory);
  return p;
}

// ---- dump -----
std::string Program::dump() const {
  std::ostringstream os;
  os << "arena " << arena_bytes << " bytes in " << arena_buffers.size() << " buffer(s) (lower bound "
     << memory.lower_bound_bytes << ", logical " << memory.logical_bytes << ")\n";
  auto name = [&](uint32_t t) {
    if (t >= tensors.size()) return "t" + std::to_string(t) + "?";
    const ProgramTensor& x = tensors[t];
    return x.role == Role::temp
               ? "t" + std::to_string(t) + "@" + std::to_string(x.buffer) + ":" + std::to_string(x.offset)
               : x.binding;
  };
  for (size_t i = 0; i < dispatches.size(); ++i) {
    const Dispatch& d = dispatches[i];
    if (d.barrier) os << "-- barrier\n";
    os << '#' << i << ' ';
    for (size_t k = 0; k < d.writes.size(); ++k) os << (k ? ", " : "") << name(d.writes[k]);
    os << " = " << op_name(d.op) << '(';
    for (size_t k = 0; k < d.reads.size(); ++k) os << (k ? ", " : "") << name(d.reads[k]);
    os << ')';
    std::string a = attrs_json(d.attrs);
    if (a != "{}") os << ' ' << a;
    if (!d.writes.empty() && d.writes[0] < tensors.size()) {
      os << " : " << dtype_name(tensors[d.writes[0]].type.dtype) << shape_str(tensors[d.writes[0]].type.shape);
    }
    if (!d.waits.empty()) {
      os << "  waits";
      for (const Hazard& h : d.waits) os << ' ' << hazard_name(h.kind) << ":#" << h.dispatch;
    }
    os << '\n';
  }
  return os.str();
}

}  // namespace meganeura
