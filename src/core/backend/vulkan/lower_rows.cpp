// Reductions and row kernels: the primitive reductions (reduce.comp), softmax along an axis
// (softmax.comp), the fused norms and scaled softmax (rows.comp) and fused reductions
// (fused.comp's reduce modes), with their planned loop bounds.
#include <algorithm>
#include <cstring>

#include "backend/vulkan/lowering_internal.h"

namespace meganeura::vk::detail {
namespace {

// Elements per lane up to which a row takes one subgroup.
constexpr uint32_t kRowsPerLane = 32;

// The device's subgroup size when its subgroup variants apply to workgroups of `wg` (0: not).
uint32_t subgroup_width(const DeviceClass& dc, uint32_t wg) {
  const uint32_t sg = dc.subgroup_size;
  const bool power_of_two = sg && (sg & (sg - 1)) == 0;
  return dc.subgroup_arithmetic && power_of_two && sg >= 4 && sg <= wg ? sg : 0;
}

// Where a split reduction's kernel takes its workspace and its mode.
struct SplitLayout {
  uint32_t slot;     // the workspace's binding
  size_t mode_word;  // push word of the mode
  uint32_t combine;  // the combining mode
};

// A reduction split into `chunks` pieces per output: `l` writes each piece's partial result to
// the workspace, then, after a barrier, a workgroup per output combines its pieces.
void split(Launch l, SplitLayout s, uint64_t outputs, uint64_t chunks, const DeviceClass& dc,
           std::vector<Launch>& out) {
  const uint32_t wg = l.spec[0];
  l.bindings[s.slot] = kWorkspaceBinding;
  l.workspace_bytes = outputs * chunks * 4;
  Launch combine = l;
  combine.push[s.mode_word] = s.combine;
  combine.barrier_before = true;
  combine.loop_iterations = strided(chunks, wg) + tree(wg);
  grid(combine, outputs, dc);
  out.push_back(std::move(l));
  out.push_back(std::move(combine));
}

}  // namespace

namespace {

// softmax and log_softmax along one axis (softmax.comp): a workgroup per row.
void lower_softmax(const Context& c, const Dispatch& d, Launch soft, std::vector<Launch>& out) {
  const Shape& xs = c.shape(d.reads[0]);
  int64_t axis = std::get<AxisAttrs>(d.attrs).axis;
  if (axis < 0) axis += int64_t(xs.size());
  int64_t len = xs[size_t(axis)], inner = 1, outer = 1;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (int64_t(i) < axis)
      outer *= xs[i];
    else if (int64_t(i) > axis)
      inner *= xs[i];
  }
  Push pc{soft};
  pc.u(uint64_t(outer * inner));
  pc.u(uint64_t(len));
  pc.u(uint64_t(inner));
  pc.u(d.op == Op::log_softmax);
  soft.bindings[0] = d.reads[0];
  soft.bindings[1] = d.write();
  soft.spec = {c.dc.workgroup};
  grid(soft, uint64_t(outer * inner), c.dc);
  soft.loop_iterations = 3 * strided(uint64_t(len), c.dc.workgroup) + 2 * tree(c.dc.workgroup);
  out.push_back(std::move(soft));
}

}  // namespace

void lower_reduce(const Context& c, const Dispatch& d, Launch l, Launch soft, std::vector<Launch>& out) {
  if (d.op == Op::softmax || d.op == Op::log_softmax) return lower_softmax(c, d, std::move(soft), out);
  const Shape& xs = c.shape(d.reads[0]);
  auto axes = std::get<ReduceAttrs>(d.attrs).axes;
  for (auto& a : axes)
    if (a < 0) a += int64_t(xs.size());
  if (axes.empty())
    for (size_t i = 0; i < xs.size(); ++i) axes.push_back(int64_t(i));
  auto st = strides_of(xs);
  Shape keep, red;
  std::vector<int64_t> keep_st, red_st;
  for (size_t i = 0; i < xs.size(); ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), int64_t(i)) != axes.end();
    (reduced ? red : keep).push_back(xs[i]);
    (reduced ? red_st : keep_st).push_back(st[i]);
  }
  collapse(keep, {&keep_st});
  collapse(red, {&red_st});
  if (keep.size() > kMaxRank || red.size() > kMaxRank) unsupported(d.op, "more than 6 non-mergeable axes");
  const uint64_t outputs = uint64_t(numel(keep)), count = uint64_t(numel(red));
  const uint32_t wg = c.dc.workgroup;
  // Short reductions over many outputs: one subgroup each where the device has subgroup
  // arithmetic, else one invocation each, a compensated serial sum (error bounded
  // independently of the length); long ones: a workgroup each with a tree, split into pieces
  // when one workgroup's walk is too long.
  const bool serial = count <= kSerialRowMax && outputs >= kSerialRowsMin;
  const uint32_t sg = subgroup_width(c.dc, wg);
  const uint64_t walk = loop(red.size());  // the reduced layout's rank per element
  const uint64_t chunks = serial ? 1 : reduction_chunks(outputs, count, wg, walk, c.dc);
  enum : uint32_t { kWorkgroup, kSerial, kPartial, kCombine, kBySubgroup };
  Push pc{l};
  pc.u(outputs);
  pc.u(count);
  pc.u(d.op == Op::max);
  pc.u(d.op == Op::mean);
  pc.u(keep.size());
  pc.u(red.size());
  pc.u(serial ? (sg ? kBySubgroup : kSerial) : chunks > 1 ? kPartial : kWorkgroup);
  pc.u(chunks);
  pc.array(keep);
  pc.array(keep_st);
  pc.array(red);
  pc.array(red_st);
  l.bindings[0] = d.reads[0];
  l.bindings[1] = d.write();
  l.spec = {wg};
  if (serial && sg) {
    l.kernel = Kernel::reduce_subgroup;
    grid(l, ceil_div(outputs, wg / sg), c.dc);
    l.loop_iterations = loop(keep.size()) + nest(ceil_div(count, sg), walk);
    out.push_back(std::move(l));
    return;
  }
  if (serial) {
    grid(l, ceil_div(outputs, wg), c.dc);
    l.loop_iterations = loop(keep.size()) + nest(count, walk);
    out.push_back(std::move(l));
    return;
  }
  grid(l, outputs * chunks, c.dc);
  l.loop_iterations = loop(keep.size()) + nest(ceil_div(ceil_div(count, chunks), wg), walk) + tree(wg);
  if (chunks == 1) {
    out.push_back(std::move(l));
    return;
  }
  split(std::move(l), {.slot = 2, .mode_word = 6, .combine = kCombine}, outputs, chunks, c.dc, out);
}

void lower_rows(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch rows, std::vector<Launch>& out) {
  wide_operands(d, k, rows, 3);
  rows.spec = {c.dc.row_workgroup};
  if (d.op == Op::norm) {
    rows.push[kPushMode] = 0;
    rows.push[kPushEpsOrScale] = fbits(std::get<NormAttrs>(d.attrs).eps);
  } else {
    const auto& a = std::get<SoftmaxAttrs>(d.attrs);
    rows.push[kPushMode] = 1;
    rows.push[kPushEpsOrScale] = fbits(a.scale);
    rows.push[kPushFill] = fbits(a.fill);
  }
  const uint32_t n_rows = k.push.get(push::kRows), len = k.push.get(push::kLen);
  const uint32_t sg = subgroup_width(c.dc, c.dc.workgroup);
  enum : uint32_t { kByWorkgroup, kByInvocation, kBySubgroup };
  // Three passes over a row (the mean or maximum, the sum, the write), each with a reduction.
  if (sg && len <= kRowsPerLane * sg && n_rows >= kSerialRowsMin) {  // a subgroup per row
    rows.kernel = Kernel::rows_subgroup;
    rows.push[kPushSerial] = kBySubgroup;
    rows.spec = {c.dc.workgroup};
    grid(rows, ceil_div(n_rows, c.dc.workgroup / sg), c.dc);
    rows.loop_iterations = 3 * strided(len, sg);
  } else if (len <= kSerialRowMax && n_rows >= kSerialRowsMin) {  // an invocation per row
    rows.push[kPushSerial] = kByInvocation;
    rows.spec = {c.dc.workgroup};
    grid(rows, ceil_div(n_rows, c.dc.workgroup), c.dc);
    rows.loop_iterations = 3 * loop(len);
  } else {  // a workgroup per row: its reductions a tree over the invocations or the subgroups
    const uint32_t wg = c.dc.row_workgroup, rsg = subgroup_width(c.dc, wg);
    if (rsg) rows.kernel = Kernel::rows_subgroup;
    rows.push[kPushSerial] = kByWorkgroup;
    grid(rows, n_rows, c.dc);
    rows.loop_iterations = 3 * strided(len, wg) + 3 * (rsg ? tree(wg / rsg) : tree(wg));
  }
  out.push_back(std::move(rows));
}

void lower_fused_reduce(const Context& c, const Dispatch& d, const KernelLaunch& k, Launch l,
                        std::vector<Launch>& out) {
  const auto& a = std::get<FusedAttrs>(d.attrs);
  for (size_t i = 1; i < a.axes.size(); ++i) {
    if (a.axes[i] != a.axes[i - 1] + 1) unsupported(d.op, "a reduction over non-contiguous axes");
  }
  for (size_t i = 0; i < d.reads.size(); ++i) l.bindings[i] = d.reads[i];
  const uint64_t outputs = uint64_t(k.push.get(push::kReduceOuter)) * k.push.get(push::kReduceInner);
  const uint64_t len = k.push.get(push::kReduceLen), element = fused_program_cost(l);
  if (len <= kSerialRowMax && outputs >= kSerialRowsMin) {  // an invocation per output
    l.push[kPushMode] = kFusedSerial;
    grid(l, ceil_div(outputs, c.dc.workgroup), c.dc);
    l.loop_iterations = nest(len, element);
    out.push_back(std::move(l));
    return;
  }
  const uint32_t wg = c.dc.row_workgroup;  // a workgroup per output, or per piece of one
  const uint64_t chunks = reduction_chunks(outputs, len, wg, element, c.dc), span = ceil_div(len, chunks);
  l.spec = {wg};
  l.push[kPushMode] = chunks > 1 ? kFusedPartial : kFusedReduce;
  l.push[kPushChunks] = uint32_t(chunks);
  l.push[kPushSpan] = uint32_t(span);
  grid(l, outputs * chunks, c.dc);
  l.loop_iterations = nest(ceil_div(span, wg), element) + tree(wg);
  if (chunks == 1) {
    out.push_back(std::move(l));
    return;
  }
  split(std::move(l), {.slot = 10, .mode_word = kPushMode, .combine = kFusedCombine}, outputs, chunks, c.dc, out);
}

}  // namespace meganeura::vk::detail
