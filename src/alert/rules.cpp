#include "alert/rules.h"

#include <csignal>

namespace meganeura::alert {

// Order matters: the first matching rule wins.
//  - Outcomes imposed from outside (hang kill, scheduler/timeout termination) come first:
//    whatever the log says afterwards is a consequence.
//  - Hardware and CUDA causes come before the generic Python errors they surface as
//    (a CUDA OOM is also a RuntimeError with a traceback).
//  - Signals with a definite meaning (SIGSEGV, SIGFPE) come before file/permission errors,
//    which are often harmless warnings in a log that crashed for another reason.
//  - nan_loss also applies to runs that exit 0: a diverged run is not a success.
//  - Death by a signal with no specific meaning (SIGKILL, SIGINT, ...) is "killed" even when
//    the log shows a traceback: an interrupted Python prints KeyboardInterrupt on its way.
//  - The generic catch-alls (RuntimeError, any traceback) come last.
// The classifier applies this order first to the end of the output (the last traceback
// and the lines after it, or the last lines) and the death signal, and only then to the
// whole log, so an early harmless line never outranks the final error.
const std::vector<Rule>& rule_table() {
  static const std::vector<Rule> kRules = {
      {"hang", "Hang (no output, job ended by gpualert)",
       "Look for a deadlock or a stalled collective; run with py-spy dump or NCCL_DEBUG=INFO.",
       "", When::kAlways, Fact::kHangKilled, {0, 0}, 0.95},
      {"time_limit", "Terminated from outside (time limit, preemption, cancel, node failure)",
       "Request more time, checkpoint more often, or resume from the last checkpoint.",
       R"(DUE TO TIME LIMIT|DUE TO PREEMPTION|DUE TO NODE FAILURE|CANCELLED AT \S+ DUE TO|[Tt]ime limit (exceeded|reached)|got signal: 15\b|Signal 15 \(SIGTERM\) received by PID)",
       When::kAlways, Fact::kTerminated, {SIGTERM, 0}, 0.9},
      {"gpu_hardware", "GPU hardware error (Xid, ECC, lost GPU)",
       "Drain the node and report the GPU to the administrators; resubmit on another node.",
       R"(\bXid (\(PCI:[^)]*\):? ?)?(\d{3,}|1[0-24-9]|2\d|3[02-9]|4[0-24-9]|[5-9]\d|\d)\b|[Uu]ncorrectable ECC|ECC error|[Ff]allen off the bus|GPU is lost|GPU has fallen|NVLink (error|fatal)|cudaErrorECCUncorrectable|CUDA_ERROR_ECC_UNCORRECTABLE|unrecoverable hardware error)",
       When::kFailed, Fact::kGpuEvent, {0, 0}, 0.95},
      {"cuda_oom", "CUDA out of memory",
       "Reduce the batch size or sequence length, enable activation checkpointing, or use mixed precision.",
       R"(CUDA out of memory|CUDA error: out of memory|OutOfMemoryError: CUDA|cudaErrorMemoryAllocation|CUBLAS_STATUS_ALLOC_FAILED|CUDA_ERROR_OUT_OF_MEMORY|HIP out of memory|OOM when allocating tensor|RESOURCE_EXHAUSTED: (Out of memory|Failed to allocate)|(?i:cuda (runtime |driver )?error[^a-z\n]{0,12}out of memory)|OutOfMemoryError: Out of memory allocating|No available memory for the cache blocks)",
       When::kFailed, Fact::kNone, {0, 0}, 0.95},
      {"nccl", "NCCL / distributed communication failure",
       "Check the network and NCCL settings (NCCL_DEBUG=INFO), that every rank started, and the collective order.",
       R"((?i:nccl error)|ncclInternalError|ncclSystemError|ncclUnhandledCudaError|ncclInvalidUsage|ncclRemoteError|Watchdog caught collective operation timeout|NCCL communicator was aborted|DistBackendError|DistStoreError|DistNetworkError|NCCL timeout|NCCL operation \w+\([^)]*\) failed|Some NCCL operations have failed)",
       When::kFailed, Fact::kNone, {0, 0}, 0.93},
      {"device_mismatch", "Tensors on different devices",
       "Move the model and every input to the same device (model.to(device), batch.to(device)).",
       R"(Expected all tensors to be on the same device|Expected object of device type|Input type \(.*\) and weight type \(.*\) should be the same|tensors? (is|are) on (different|a different) devices?)",
       When::kFailed, Fact::kNone, {0, 0}, 0.93},
      {"cuda_runtime", "CUDA runtime error",
       "Rerun with CUDA_LAUNCH_BLOCKING=1 to locate the failing kernel; check driver/toolkit versions and indices.",
       R"(CUDA error|CUDA kernel errors|cudaError\w+|CUDNN_STATUS_\w+|CUBLAS_STATUS_\w+|device-side assert|illegal memory access|no CUDA-capable device|No CUDA GPUs are available|CUDA driver version is insufficient|Found no NVIDIA driver|cuDNN error|CUDA_ERROR_\w+|\bXid (\(PCI:[^)]*\):? ?)?(13|31|43)\b)",
       When::kFailed, Fact::kGpuAppEvent, {0, 0}, 0.9},
      {"oom_killer", "Killed by the kernel OOM killer",
       "The job exceeded its memory limit: request more memory, lower the workers/batch, or stream the data.",
       R"(oom_kill event|oom-kill|Out of memory: Killed process|Memory cgroup out of memory|[Kk]illed by (the )?OOM|OOM killer|OOM Killed|(?i:exceeded (job |step )?memory limit)|task \d+: Out Of Memory)",
       When::kFailed, Fact::kOomKill, {0, 0}, 0.93},
      {"ram_oom", "Host memory exhausted",
       "Reduce host-side buffers (data loader workers, prefetch, caches) or request more memory.",
       R"(\bMemoryError\b|std::bad_alloc|Cannot allocate memory|can't allocate memory|Unable to allocate [\d.]+ ?[KMGTP]i?B|_ArrayMemoryError|[Oo]ut of memory|out of shared memory|insufficient shared memory)",
       When::kFailed, Fact::kNone, {0, 0}, 0.9},
      {"disk_full", "Disk full or quota exceeded",
       "Free space or write checkpoints/logs elsewhere (scratch); check quotas with df/quota.",
       R"(No space left on device|(?i:disk quota exceeded)|\bENOSPC\b|\bEDQUOT\b)", When::kFailed,
       Fact::kNone, {0, 0}, 0.95},
      {"segfault", "Segmentation fault",
       "Run under gdb or with faulthandler enabled; check native extensions and library versions.",
       R"((?i:segmentation fault)|\bSIGSEGV\b|Fatal Python error: Segmentation|segfault at [0-9a-f]+|Bus error)",
       When::kFailed, Fact::kNone, {SIGSEGV, SIGBUS}, 0.95},
      {"div_zero", "Division by zero",
       "Guard the denominator (empty batch, zero count, zero-length dataset).",
       R"(ZeroDivisionError|Floating point exception|[Ii]nteger divide by zero|[Dd]ivision by zero)",
       When::kFailed, Fact::kNone, {SIGFPE, 0}, 0.95},
      {"missing_module", "Missing module or library",
       "Install the package in the job's environment, or activate the right environment/module first.",
       R"(ModuleNotFoundError|No module named|ImportError|cannot open shared object file|undefined symbol:)",
       When::kFailed, Fact::kNone, {0, 0}, 0.93},
      {"file_not_found", "File not found",
       "Check the path (relative to the job's working directory) and that the file exists on this node.",
       R"(FileNotFoundError|No such file or directory|: command not found|: not found$)",
       When::kFailed, Fact::kNone, {0, 0}, 0.9},
      {"permission", "Permission denied",
       "Check the file's owner and mode, the directory's permissions, and where the job writes.",
       R"(PermissionError|Permission denied|Operation not permitted|\bEACCES\b)", When::kFailed,
       Fact::kNone, {0, 0}, 0.9},
      {"nan_loss", "Loss became NaN or infinite",
       "Lower the learning rate, clip gradients, check the data for NaN/Inf, or use loss scaling.",
       R"((?i:\bloss\b[^\n]{0,30}?[\s:=(-]nan\b)|(?i:loss\w*['"]?\s*[=:]\s*['"]?[-+]?nan\b)|(?i:(^|[\s,{'"(])(train_|training_|training )?loss['"]?\s*[=:]\s*[-+]?inf(inity)?\b)|(?i)\b(nan|non-finite|infinite)\s+loss|(?i)loss (is|became|has become) (nan|inf|non-finite)|(?i)nan (detected )?in (the )?loss|Detected NaN|Function '\w+' returned nan|Minimum loss scale reached)",
       When::kAlways, Fact::kNone, {0, 0}, 0.9},
      {"assertion", "Assertion failed",
       "Read the failed condition in the evidence: an input or shape violated the code's assumption.",
       R"(AssertionError|Assertion [`'].*' failed|[Aa]ssertion failed|Assertion `|Check failed:)",
       When::kFailed, Fact::kNone, {0, 0}, 0.9},
      {"abort", "Aborted",
       "Read the lines before the abort (uncaught C++ exception, failed check) and rerun under gdb.",
       R"(terminate called after throwing|terminate called without an active exception|Aborted \(core dumped\)|\bSIGABRT\b)",
       When::kFailed, Fact::kNone, {SIGABRT, 0}, 0.9},
      {"killed", "Killed by a signal",
       "Something outside the program ended it (kill, scheduler, another process); check who sent the signal.",
       R"((?i:signal 9 \(SIGKILL\) received by PID)|\(exitcode: -9\)|exitcode\s*: -9\b)",
       When::kFailed, Fact::kAnySignal, {0, 0}, 0.7},
      {"runtime_error", "RuntimeError", "Read the RuntimeError message in the evidence.",
       R"(RuntimeError)", When::kFailed, Fact::kNone, {0, 0}, 0.75},
      {"traceback", "Python exception", "Read the last traceback in the evidence.",
       R"(Traceback \(most recent call last\))", When::kFailed, Fact::kNone, {0, 0}, 0.7},
      {"success", "Success", "Nothing to do.", "", When::kAlways, Fact::kExitZero, {0, 0}, 0.97},
      {"unknown", "Unknown failure",
       "No known cause in the log: read its last lines and the exit status.", "", When::kAlways,
       Fact::kAlways, {0, 0}, 0.3},
  };
  return kRules;
}

}  // namespace meganeura::alert
