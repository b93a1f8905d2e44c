// System evidence kept only when it is about this job: kernel OOM-kill reports that name
// one of the job's processes or its cgroup, and GPU events on the GPUs the job may use.
#pragma once

#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::alert {

struct JobScope {
  std::set<long> pids;  // every process of the job seen while it ran
  std::string cgroup;   // the job's cgroup v2 path as the kernel prints it ("/slurm/job_42")
};

// Xids the driver raises for faults of the application itself (illegal address, MMU fault
// from a bad pointer, a kernel's exception), not of the GPU.
bool is_application_xid(int xid);
// The Xid number in "Xid 79 on GPU 0" or "NVRM: Xid (PCI:...): 79, ..."; -1 when none.
int xid_of(std::string_view text);

// Kernel log lines about an OOM kill, kept when their pid is one of the job's or their
// task_memcg is the job's cgroup (or below it). A line naming neither is dropped.
std::vector<std::string> job_kernel_oom(const std::vector<std::string>& lines, const JobScope& scope);

// GPU events ("... on GPU N") on the GPUs of CUDA_VISIBLE_DEVICES when it lists indices;
// all of them when it is unset or names GPUs by UUID; none when it is set and empty.
std::vector<std::string> job_gpu_events(const std::vector<std::string>& events, const char* cuda_visible_devices);

// The pids of the processes in session `sid` (the job runs in a session of its own).
std::vector<long> session_members(long sid);

}  // namespace meganeura::alert
