// Every attribute struct's fields, written once: the JSON key and the member it names. The
// canonical text of a node's attributes (attrs_json, Graph::to_json, whose hash checkpoints
// keep), the program reader (plan/program_json.cpp) and the tests walk these tables; no other
// code names an attribute struct's keys.
//
// A table lists its fields in key order, as canonical JSON sorts keys (checked below at
// compile time), and no two structs have the same key set: attributes are written without
// their type, and the reader tells the struct by its keys (checked by the round-trip test).
// A field's coding follows from its C++ type (bool, int64_t, double, DType, Op, int64_t[2],
// a list of integers, a fused program's code); `shape` marks a list of integers that is a
// tensor shape, which the reader checks as one (no negative dimension, bounded size).
#pragma once

#include <string_view>
#include <tuple>
#include <utility>
#include <variant>

#include "meganeura/graph.h"

namespace meganeura::attr_fields {

template <class Get>
struct Field {
  std::string_view key;
  Get get;             // a stateless lambda: (const) S& -> (const) field&
  bool shape = false;  // a tensor shape
};
template <class Get>
Field(std::string_view, Get) -> Field<Get>;
template <class Get>
Field(std::string_view, Get, bool) -> Field<Get>;

// clang-format off
#define MEGANEURA_FIELD_AT(key_, expr_) \
  ::meganeura::attr_fields::Field{#key_, [](auto& s) -> auto& { return s.expr_; }}
#define MEGANEURA_FIELD(key_) MEGANEURA_FIELD_AT(key_, key_)
#define MEGANEURA_SHAPE_FIELD(key_) \
  ::meganeura::attr_fields::Field{#key_, [](auto& s) -> auto& { return s.key_; }, true}
// clang-format on

template <class S>
constexpr auto fields();

template <>
constexpr auto fields<NoAttrs>() {
  return std::tuple{};
}
template <>
constexpr auto fields<AffineAttrs>() {
  return std::tuple{MEGANEURA_FIELD(scale), MEGANEURA_FIELD(shift)};
}
template <>
constexpr auto fields<CastAttrs>() {
  return std::tuple{MEGANEURA_FIELD(to)};
}
template <>
constexpr auto fields<ClipAttrs>() {
  return std::tuple{MEGANEURA_FIELD(max_norm)};
}
template <>
constexpr auto fields<ReduceAttrs>() {
  return std::tuple{MEGANEURA_FIELD(axes), MEGANEURA_FIELD(keepdims)};
}
template <>
constexpr auto fields<AxisAttrs>() {
  return std::tuple{MEGANEURA_FIELD(axis)};
}
template <>
constexpr auto fields<MatmulAttrs>() {
  return std::tuple{MEGANEURA_FIELD(trans_a), MEGANEURA_FIELD(trans_b)};
}
template <>
constexpr auto fields<ConvAttrs>() {
  return std::tuple{MEGANEURA_FIELD(dilation), MEGANEURA_FIELD(grad_shape), MEGANEURA_FIELD(groups),
                    MEGANEURA_FIELD(pad), MEGANEURA_FIELD(stride)};
}
template <>
constexpr auto fields<PoolAttrs>() {
  return std::tuple{MEGANEURA_FIELD(grad_shape), MEGANEURA_FIELD(kernel), MEGANEURA_FIELD(pad),
                    MEGANEURA_FIELD(stride)};
}
template <>
constexpr auto fields<ShapeAttrs>() {
  return std::tuple{MEGANEURA_FIELD(shape)};
}
template <>
constexpr auto fields<PermuteAttrs>() {
  return std::tuple{MEGANEURA_FIELD(perm)};
}
template <>
constexpr auto fields<SliceAttrs>() {
  return std::tuple{MEGANEURA_FIELD(ends), MEGANEURA_FIELD(starts)};
}
template <>
constexpr auto fields<PadAttrs>() {
  return std::tuple{MEGANEURA_FIELD(after), MEGANEURA_FIELD(before)};
}
template <>
constexpr auto fields<EmbeddingAttrs>() {
  return std::tuple{MEGANEURA_FIELD(num_rows)};
}
template <>
constexpr auto fields<OneHotAttrs>() {
  return std::tuple{MEGANEURA_FIELD(classes), MEGANEURA_FIELD(ignore_index)};
}
template <>
constexpr auto fields<RopeAttrs>() {
  return std::tuple{MEGANEURA_FIELD(factor),          MEGANEURA_FIELD(high_freq_factor),      MEGANEURA_FIELD(inverse),
                    MEGANEURA_FIELD(low_freq_factor), MEGANEURA_FIELD(original_max_position), MEGANEURA_FIELD(theta)};
}
template <>
constexpr auto fields<MaskAttrs>() {
  return std::tuple{MEGANEURA_FIELD(fill)};
}
template <>
constexpr auto fields<ScheduleAttrs>() {
  return std::tuple{MEGANEURA_FIELD(base_lr), MEGANEURA_FIELD(min_lr), MEGANEURA_FIELD(total), MEGANEURA_FIELD(warmup)};
}
template <>
constexpr auto fields<BiasCorrectionAttrs>() {
  return std::tuple{MEGANEURA_FIELD(beta), MEGANEURA_FIELD(power)};
}
template <>
constexpr auto fields<FusedAttrs>() {
  return std::tuple{MEGANEURA_FIELD(axes),
                    MEGANEURA_FIELD(code),
                    MEGANEURA_SHAPE_FIELD(domain),
                    MEGANEURA_FIELD(keepdims),
                    MEGANEURA_FIELD(reduce),
                    MEGANEURA_FIELD_AT(trans_a, matmul.trans_a),
                    MEGANEURA_FIELD_AT(trans_b, matmul.trans_b)};
}
template <>
constexpr auto fields<NormAttrs>() {
  return std::tuple{MEGANEURA_FIELD(center), MEGANEURA_FIELD(eps)};
}
template <>
constexpr auto fields<SoftmaxAttrs>() {
  return std::tuple{MEGANEURA_FIELD(causal), MEGANEURA_FIELD(fill), MEGANEURA_FIELD(scale)};
}
template <>
constexpr auto fields<GatherAttrs>() {
  return std::tuple{MEGANEURA_FIELD(axis), MEGANEURA_FIELD(size)};
}
template <>
constexpr auto fields<TopKAttrs>() {
  return std::tuple{MEGANEURA_FIELD(k)};
}
template <>
constexpr auto fields<AttentionAttrs>() {
  return std::tuple{MEGANEURA_FIELD(causal), MEGANEURA_SHAPE_FIELD(k), MEGANEURA_SHAPE_FIELD(q), MEGANEURA_FIELD(scale),
                    MEGANEURA_SHAPE_FIELD(v)};
}
template <>
constexpr auto fields<CachedAttentionAttrs>() {
  return std::tuple{MEGANEURA_FIELD(scale), MEGANEURA_FIELD(window)};
}

#undef MEGANEURA_FIELD_AT
#undef MEGANEURA_FIELD
#undef MEGANEURA_SHAPE_FIELD

// Calls f(field) for each field of S, in key order.
template <class S, class F>
constexpr void for_each_field(F&& f) {
  std::apply([&](const auto&... field) { (f(field), ...); }, fields<S>());
}

template <class S>
constexpr bool keys_sorted() {
  std::string_view previous;
  bool sorted = true, first = true;
  for_each_field<S>([&](const auto& field) {
    sorted = sorted && (first || previous < field.key);
    previous = field.key;
    first = false;
  });
  return sorted;
}
template <class... S>
constexpr bool all_sorted(std::variant<S...>*) {
  return (keys_sorted<S>() && ...);
}
static_assert(all_sorted(static_cast<Attrs*>(nullptr)),
              "an attribute table does not list its fields in key order (canonical JSON sorts keys)");

// Calls f(S{}) with a default value of every alternative of Attrs.
template <class F>
void for_each_attrs_type(F&& f) {
  [&]<size_t... I>(std::index_sequence<I...>) { (f(std::variant_alternative_t<I, Attrs>{}), ...); }
  (std::make_index_sequence<std::variant_size_v<Attrs>>{});
}

}  // namespace meganeura::attr_fields
