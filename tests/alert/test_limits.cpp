// gpualert's input limits: log lines longer than kMaxLogLineBytes are scanned in pieces (a log
// of one endless progress-bar line takes bounded memory and its errors are still found), and
// config files over kMaxConfigBytes are refused with an error naming the limit. Then the
// findings of fuzzing, each with its reproducer from tests/fuzz/regressions/ as the fixture.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "alert/classifier.h"
#include "alert/config.h"
#include "alert/mime.h"
#include "alert/util.h"

namespace fs = std::filesystem;
using meganeura::alert::Classification;
using meganeura::alert::Classifier;
using meganeura::alert::kMaxConfigBytes;
using meganeura::alert::kMaxLogLineBytes;
using meganeura::alert::SystemFacts;

namespace {

fs::path scratch(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("gpualert-limits-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d / name;
}

std::string fixture(const std::string& name) {
  std::ifstream in(fs::path(MEGANEURA_SOURCE_DIR) / "tests/fuzz/regressions" / name, std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write(const fs::path& p, const std::string& s) { std::ofstream(p, std::ios::binary) << s; }

SystemFacts failed() {
  SystemFacts f;
  f.exit_code = 1;
  return f;
}

// Both entry points, which must agree.
Classification classify_both(const std::string& log) {
  Classifier c;
  Classification text = c.classify_text(log, failed());
  const fs::path p = scratch("long.log");
  write(p, log);
  Classification file = c.classify_file(p, 0, failed());
  EXPECT_EQ(text.id, file.id);
  EXPECT_EQ(text.evidence.size(), file.evidence.size());
  for (size_t i = 0; i < std::min(text.evidence.size(), file.evidence.size()); ++i) {
    EXPECT_EQ(text.evidence[i].line, file.evidence[i].line) << i;
    EXPECT_EQ(text.evidence[i].text, file.evidence[i].text) << i;
  }
  return text;
}

}  // namespace

TEST(Limits, ErrorAtTheEndOfAnEndlessLineIsFound) {
  // 3.5 MiB of '\r'-redrawn progress bar, then the error, all on line 2.
  std::string log = "start\n";
  while (log.size() < 3 * kMaxLogLineBytes + kMaxLogLineBytes / 2) log += "\r 42%|####      | 420/1000";
  log += "\rRuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n";
  Classification c = classify_both(log);
  EXPECT_EQ(c.id, "cuda_oom");
  ASSERT_FALSE(c.evidence.empty());
  EXPECT_EQ(c.evidence[0].line, 2u);
  EXPECT_LE(c.evidence[0].text.size(), 400u);
}

TEST(Limits, LineNumbersAfterALineOfExactlyTheLimit) {
  std::string log(kMaxLogLineBytes, 'x');
  log += "\nSegmentation fault (core dumped)\n";
  Classification c = classify_both(log);
  EXPECT_EQ(c.id, "segfault");
  ASSERT_FALSE(c.evidence.empty());
  EXPECT_EQ(c.evidence[0].line, 2u);  // the long line is line 1, whatever its pieces
}

TEST(Limits, ConfigLargerThanTheLimitIsRefused) {
  const fs::path p = scratch("big.toml");
  std::string text = "[run]\ngrace = \"30s\"\n";
  text += "# " + std::string(kMaxConfigBytes, 'x') + "\n";
  write(p, text);
  try {
    meganeura::alert::load_config(p);
    FAIL() << "accepted a config over the limit";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the limit of 1048576 bytes (kMaxConfigBytes)"), std::string::npos)
        << e.what();
  }
  // Just inside the limit it loads.
  text = "[run]\ngrace = \"30s\"\n# ";
  text += std::string(kMaxConfigBytes - text.size() - 1, 'x') + "\n";
  ASSERT_EQ(text.size(), kMaxConfigBytes);
  write(p, text);
  EXPECT_DOUBLE_EQ(meganeura::alert::load_config(p).grace_s, 30);
}

TEST(Limits, EndlessConfigIsRefused) {
  try {
    meganeura::alert::load_config(fs::path("/dev/zero"));
    FAIL() << "accepted /dev/zero";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("kMaxConfigBytes"), std::string::npos) << e.what();
  }
}

// The fuzzer's input splits at '\\' into sender, recipient, subject, ...; a CR/LF in the
// sender or a recipient used to end the header line and start a "Bcc:" header of the
// sender's choosing.
TEST(FuzzFindings, RecipientCannotInjectAHeader) {
  const std::string input = fixture("mime/header-injection-through-recipient");
  ASSERT_NE(input.find("\r\nBcc: evil@x"), std::string::npos);
  meganeura::alert::EmailParts parts;
  parts.from = "me@x\r\nBcc: evil@x";
  parts.to = {"to\r\n@x", "a@b\nX-Injected: 1"};
  parts.subject = "s";
  const std::string mail = meganeura::alert::build_email(parts);
  const std::string headers = mail.substr(0, mail.find("\r\n\r\n") + 2);
  EXPECT_EQ(headers.find("\r\nBcc:"), std::string::npos) << headers;
  EXPECT_EQ(headers.find("\nX-Injected:"), std::string::npos) << headers;
  EXPECT_NE(headers.find("From: me@x  Bcc: evil@x\r\n"), std::string::npos) << headers;
  EXPECT_NE(headers.find("To: to  @x, a@b X-Injected: 1\r\n"), std::string::npos) << headers;
}

// Values whose conversion to an integer was undefined behaviour (UBSan: "outside the range of
// representable values").
TEST(FuzzFindings, SizeBeyond64BitsIsAnError) {
  const std::string input = fixture("args/size-beyond-64-bits");
  EXPECT_THROW(meganeura::alert::parse_size(input), std::invalid_argument);
  EXPECT_EQ(meganeura::alert::parse_size("16G"), 16ull << 30);
  EXPECT_THROW(meganeura::alert::parse_size("17179869184G"), std::invalid_argument);  // 2^64 bytes
  EXPECT_EQ(meganeura::alert::parse_size("17179869183G"), 17179869183ull << 30);
}

TEST(FuzzFindings, DurationBeyondTheLimitIsAnError) {
  const std::string input = fixture("args/duration-beyond-long-long");
  try {
    meganeura::alert::parse_duration(input);
    FAIL() << "accepted a 1e300-day duration";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("kMaxDurationSeconds"), std::string::npos) << e.what();
  }
  EXPECT_DOUBLE_EQ(meganeura::alert::parse_duration("36500d"), meganeura::alert::kMaxDurationSeconds);
  EXPECT_THROW(meganeura::alert::parse_duration("36501d"), std::invalid_argument);
}

// A size given as a float beyond int64 made toml++ convert it with undefined behaviour; sizes
// are integers or strings with a unit, so a float is refused, naming the key.
TEST(FuzzFindings, FloatSizeIsRefused) {
  const fs::path p = scratch("float-size.toml");
  write(p, fixture("config/float-size-beyond-int64"));
  try {
    meganeura::alert::load_config(p);
    FAIL() << "a float size was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("attach.max_file"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("expected a size"), std::string::npos) << e.what();
  }
}

// toml++ 3.3 reaches __builtin_unreachable() deciding whether some non-ASCII characters are
// whitespace: U+02C2 after "smtp =", or U+0487 while it scans a malformed value for its end.
// It is now given ASCII only: such a character outside strings is refused (naming the line),
// and inside strings it becomes a \u escape.
TEST(FuzzFindings, TomlParserOnlySeesAscii) {
  const fs::path p = scratch("unreachable.toml");
  auto error_of = [&](const std::string& text) {
    write(p, text);
    try {
      meganeura::alert::load_config(p);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error_of(fixture("config/toml-unreachable-on-non-ascii-after-value"))
                .find("line 1: non-ASCII character outside a string"),
            std::string::npos);
  // Malformed (a number followed by a string); the error is toml++'s own.
  const std::string malformed = error_of(fixture("config/toml-unreachable-scanning-a-malformed-value"));
  EXPECT_NE(malformed.find("config '" + p.string() + "' line 1"), std::string::npos) << malformed;
  EXPECT_NE(error_of("[run]\ngrace = \"1s\" \xcb\x82\n").find("line 2: non-ASCII"), std::string::npos);
  EXPECT_NE(error_of("[smtp]\n\nfrom = \"\xc3(\"\n").find("line 3: invalid UTF-8"), std::string::npos);
  EXPECT_NE(error_of("[smtp]\nfrom = \"\\\xc3\xa9\"\n").find("line 2: invalid escape"), std::string::npos);

  // Non-ASCII text in every kind of string and in comments keeps its meaning.
  write(p,
        "# r\xc3\xa9glages\n[smtp]\nfrom = \"Zo\xc3\xab <z@x>\"\nusername = 'a\\\"\xcb\x82'\n"
        "url = \"\"\"smtp://h\"\"\"\nca_file = \"\"\"x\\\n   \xc3\xa9\"\"\"\n"
        "password = '''p'\xf0\x9f\x94\x91''''\n[run]\nstate_dir = '/tmp/\xc3\xa9'\n");
  ::chmod(p.c_str(), 0600);
  auto c = meganeura::alert::load_config(p);
  EXPECT_EQ(c.smtp.from, "Zo\xc3\xab <z@x>");
  EXPECT_EQ(c.smtp.username, "a\\\"\xcb\x82");
  EXPECT_EQ(c.smtp.url, "smtp://h");
  EXPECT_EQ(c.smtp.ca_file, "x\xc3\xa9");  // a line-ending backslash trims up to the next character
  EXPECT_EQ(c.smtp.password, "p'\xf0\x9f\x94\x91'");
  EXPECT_EQ(c.state_dir, fs::path("/tmp/\xc3\xa9"));
}

// A long subject used to go out as one header line of any length (RFC 5322 allows 998
// characters); long or non-ASCII subjects are now folded encoded-words.
TEST(FuzzFindings, LongSubjectIsFolded) {
  const std::string input = fixture("mime/subject-line-over-998-characters");
  meganeura::alert::EmailParts parts;
  parts.from = "a@b";
  parts.subject = input.substr(4, input.find('\\', 4) - 4);
  ASSERT_GT(parts.subject.size(), 998u);
  const std::string mail = meganeura::alert::build_email(parts);
  for (size_t start = 0, end; (end = mail.find("\r\n", start)) != std::string::npos; start = end + 2)
    EXPECT_LE(end - start, 998u);
  const size_t subject_at = mail.find("Subject: ");
  const std::string header = mail.substr(subject_at, mail.find("\r\nDate:") - subject_at);
  EXPECT_EQ(header.rfind("Subject: =?UTF-8?B?", 0), 0u) << header.substr(0, 100);
  EXPECT_NE(header.find("?=\r\n =?UTF-8?B?"), std::string::npos);
  // A short ASCII subject stays as it is.
  parts.subject = "[gpualert] FAILED job";
  EXPECT_NE(meganeura::alert::build_email(parts).find("\r\nSubject: [gpualert] FAILED job\r\n"), std::string::npos);
}
