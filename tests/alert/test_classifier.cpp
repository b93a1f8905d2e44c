// The classifier's rules, and the reference tool's classification weaknesses one by one.
#include <gtest/gtest.h>

#include <csignal>
#include <nlohmann/json.hpp>
#include <set>

#include "alert/classifier.h"
#include "test_helpers.h"

using namespace alert_test;
using meganeura::alert::Classifier;
using meganeura::alert::SystemFacts;

namespace {

SystemFacts exited(int code) {
  SystemFacts f;
  f.exit_code = code;
  return f;
}

SystemFacts killed_by(int sig) {
  SystemFacts f;
  f.signal = sig;
  return f;
}

std::string progress(int lines) {
  std::string s;
  for (int i = 0; i < lines; ++i) s += "step " + std::to_string(i) + " loss 0.42 lr 1e-4\n";
  return s;
}

}  // namespace

TEST(Classifier, EveryRequiredClassExists) {
  EXPECT_NO_THROW(Classifier().check_rules());
  std::set<std::string> ids;
  for (const auto& c : Classifier::classes()) ids.insert(std::string(c.id));
  for (const char* id : {"cuda_oom", "nccl", "cuda_runtime", "ram_oom", "segfault", "file_not_found",
                         "permission", "missing_module", "div_zero", "device_mismatch", "nan_loss",
                         "oom_killer", "assertion", "runtime_error", "traceback", "gpu_hardware",
                         "disk_full", "time_limit", "hang", "abort", "killed", "success", "unknown"})
    EXPECT_TRUE(ids.count(id)) << id;
}

TEST(Classifier, ExitZeroWithNanLossIsNotSuccess) {
  Classifier c;
  auto r = c.classify_text(progress(100) + "epoch 3 train_loss=nan val_loss=nan\n" + progress(5), exited(0));
  EXPECT_EQ(r.id, "nan_loss");
  ASSERT_FALSE(r.evidence.empty());
  EXPECT_EQ(r.evidence[0].line, 101u);
  EXPECT_EQ(c.classify_text(progress(100), exited(0)).id, "success");
}

TEST(Classifier, ErrorFarBeforeTheEndIsFound) {
  Classifier c;
  std::string log = progress(40) +
                    "Traceback (most recent call last):\n"
                    "  File \"train.py\", line 3, in <module>\n"
                    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n" +
                    progress(500);
  auto r = c.classify_text(log, exited(1));
  EXPECT_EQ(r.id, "cuda_oom");
  ASSERT_FALSE(r.evidence.empty());
  EXPECT_EQ(r.evidence[0].line, 43u);
  EXPECT_NE(r.evidence[0].text.find("CUDA out of memory"), std::string::npos);
  EXPECT_GT(r.confidence, 0.5);
  EXPECT_FALSE(r.remedy.empty());
}

TEST(Classifier, OrderPrefersSpecificCauses) {
  Classifier c;
  // A CUDA OOM is also a RuntimeError inside a traceback.
  EXPECT_EQ(c.classify_text("Traceback (most recent call last):\nRuntimeError: CUDA out of memory.\n",
                            exited(1)).id, "cuda_oom");
  // A missing shared library mentions "No such file or directory" too.
  EXPECT_EQ(c.classify_text("ImportError: libcudnn.so.8: cannot open shared object file: No such file or directory\n",
                            exited(1)).id, "missing_module");
  EXPECT_EQ(c.classify_text("Assertion `x > 0' failed.\n", killed_by(SIGABRT)).id, "assertion");
  EXPECT_EQ(c.classify_text("terminate called after throwing an instance of 'std::bad_alloc'\n",
                            killed_by(SIGABRT)).id, "ram_oom");
  EXPECT_EQ(c.classify_text("RuntimeError: CUDA error: uncorrectable ECC error encountered\n", exited(1)).id,
            "gpu_hardware");
}

TEST(Classifier, OtherFrameworksMessages) {
  Classifier c;
  EXPECT_EQ(c.classify_text("tensorflow.python.framework.errors_impl.ResourceExhaustedError: OOM when "
                            "allocating tensor with shape[64,1024,1024]\n", exited(1)).id, "cuda_oom");
  EXPECT_EQ(c.classify_text("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory "
                            "while trying to allocate 17179869184 bytes.\n", exited(1)).id, "cuda_oom");
  EXPECT_EQ(c.classify_text("FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably "
                            "exploding.\n", exited(1)).id, "nan_loss");
}

TEST(Classifier, SignalsAndStatusesDecideWithoutText) {
  Classifier c;
  EXPECT_EQ(c.classify_text("", killed_by(SIGSEGV)).id, "segfault");
  EXPECT_EQ(c.classify_text("", killed_by(SIGFPE)).id, "div_zero");
  EXPECT_EQ(c.classify_text("", killed_by(SIGABRT)).id, "abort");
  EXPECT_EQ(c.classify_text("", killed_by(SIGTERM)).id, "time_limit");
  EXPECT_EQ(c.classify_text("", killed_by(SIGKILL)).id, "killed");
  EXPECT_EQ(c.classify_text("", exited(139)).id, "segfault") << "a shell reports SIGSEGV as 139";
  EXPECT_EQ(c.classify_text("", exited(0)).id, "success");
  EXPECT_EQ(c.classify_text("something odd\n", exited(3)).id, "unknown");
}

TEST(Classifier, SystemEvidence) {
  Classifier c;
  SystemFacts oom = killed_by(SIGKILL);
  oom.cgroup_oom_kills = 1;
  auto r = c.classify_text("loading\n", oom);
  EXPECT_EQ(r.id, "oom_killer");
  EXPECT_NE(r.evidence[0].text.find("oom_kill"), std::string::npos);
  SystemFacts xid = exited(1);
  xid.gpu_events = {"Xid 79 on GPU 3"};
  EXPECT_EQ(c.classify_text("RuntimeError: CUDA error: unspecified launch failure\n", xid).id, "gpu_hardware");
  SystemFacts hang = killed_by(SIGTERM);
  hang.hang_killed = true;
  EXPECT_EQ(c.classify_text("", hang).id, "hang");
}

TEST(Classifier, WarningsDoNotFailASuccessfulRun) {
  Classifier c;
  EXPECT_EQ(c.classify_text("warning: config.yaml: No such file or directory, using defaults\n"
                            "RuntimeError caught and retried\n", exited(0)).id, "success");
}

// The reference tool matched its own log header, which holds the command line.
TEST(Classifier, CommandLineKeywordDoesNotMatch) {
  TempDir dir;
  RunSpec s = command({kGpualert, "--no-notify", "--json-report", (dir / "r.json").string(), "--",
                       "/bin/sh", "-c", "echo training done; exit 1",
                       "CUDA out of memory Segmentation fault"},
                      {{"XDG_STATE_HOME", (dir / "state").string()}});
  auto r = run(s);
  EXPECT_EQ(r.status, 1);
  auto rep = nlohmann::json::parse(read_file(dir / "r.json"));
  EXPECT_EQ(rep["class"], "unknown");
  // The header really holds the keyword, so the test would catch a header match.
  EXPECT_NE(read_file(rep["log_path"].get<std::string>()).find("CUDA out of memory"), std::string::npos);
  // Offline classification of the same log skips the header too.
  auto off = run(command({kGpualert, "classify", rep["log_path"].get<std::string>(), "--exit-status", "1", "--json"}));
  EXPECT_EQ(nlohmann::json::parse(off.out)["class"], "unknown") << off.out;
}

TEST(Classifier, OfflineClassifyCommand) {
  TempDir dir;
  write_file(dir / "job.log", progress(70) + "ZeroDivisionError: division by zero\n" + progress(70));
  auto r = run(command({kGpualert, "classify", (dir / "job.log").string(), "--exit-status", "1", "--json"}));
  ASSERT_EQ(r.status, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["class"], "div_zero");
  EXPECT_EQ(j["evidence"][0]["line"], 71);
  auto s = run(command({kGpualert, "classify", (dir / "job.log").string(), "--signal", "SIGSEGV"}));
  EXPECT_NE(s.out.find("class: segfault"), std::string::npos) << s.out;
  auto bad = run(command({kGpualert, "classify", (dir / "missing.log").string()}));
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.err.find("missing.log"), std::string::npos);
  auto badsig = run(command({kGpualert, "classify", (dir / "job.log").string(), "--signal", "SIGNOPE"}));
  EXPECT_NE(badsig.status, 0);
  EXPECT_NE(badsig.err.find("unknown signal 'SIGNOPE'"), std::string::npos) << badsig.err;
}

// The labelled corpus through the real wrapper path: a child replays each log under the
// supervisor and ends with the recorded status or signal.
TEST(Corpus, MacroF1AtLeast099) {
  auto r = run(command({kGpualert, "eval", kTestDir + "/corpus", "--min-macro-f1", "0.99"}));
  std::cout << r.out;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("classes 23"), std::string::npos) << "every class is in the corpus";
}

TEST(Corpus, HeldOutSplit) {
  auto r = run(command({kGpualert, "eval", kTestDir + "/corpus", "--split", "heldout", "--min-macro-f1", "0.99"}));
  std::cout << r.out;
  EXPECT_EQ(r.status, 0) << r.out << r.err;
}
