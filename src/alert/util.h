// Small helpers shared by the gpualert components: durations, sizes, signal names,
// shell quoting and time stamps. Parsers throw std::invalid_argument with a message
// naming the bad value, so a typo in a flag or the config becomes a one-line error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace meganeura::alert {

// Longest duration accepted (a century); longer ones are errors naming this limit.
inline constexpr double kMaxDurationSeconds = 100.0 * 365 * 86400;

// "90", "90s", "1.5m", "2h", "1h30m", "250ms" -> seconds. Bare numbers are seconds.
double parse_duration(std::string_view text);
// "512", "10k", "25MB", "25MiB", "1G" -> bytes (k/M/G are powers of 1024). Sizes that do not
// fit 64 bits are errors.
uint64_t parse_size(std::string_view text);
std::string format_duration(double seconds);  // "1h 02m 03s", "4.2 s"
std::string format_size(uint64_t bytes);      // "1.5 MiB"

// "SIGSEGV", "segv", "11" -> 11. Throws for unknown names.
int parse_signal(std::string_view text);
// 11 -> "SIGSEGV"; unknown numbers -> "SIG<n>".
std::string signal_name(int signal);

// Quotes an argument for display the way a POSIX shell would need it.
std::string shell_quote(std::string_view arg);
std::string join_command(const std::vector<std::string>& argv);

// Seconds since the epoch (wall clock) and an ISO 8601 UTC rendering of it.
double wall_now();
std::string iso_time(double epoch_seconds);
// strftime of the given time (seconds since the epoch) in UTC.
std::string utc_time(double epoch_seconds, const char* format);

std::string hostname();

// Takes the first line (without its '\n') off the front of `rest`.
std::string_view next_line(std::string_view& rest);

// The home directory of `uid` in passwd(5) text (name:pw:uid:gid:gecos:home:shell), or ""
// when no well-formed line has that uid or its home is not absolute. Read directly, not
// through getpwuid: NSS modules cannot be loaded into the static wrapper.
std::string passwd_home(std::string_view passwd_text, unsigned long uid);

// Small-file I/O with plain POSIX calls: the wrapper's run path stays off iostreams, whose
// locale set-up is a noticeable part of a short job's start-up.
// Reads `path` from `offset` to its end (at most `max` bytes); nullopt when unreadable.
std::optional<std::string> read_file(const std::string& path, uint64_t offset = 0, size_t max = size_t(64) << 20);
// Creates or truncates `path` (mode 600) and writes `data`, fsynced when `sync`; throws
// an error naming the path.
void write_file(const std::string& path, std::string_view data, bool sync);
// The value of an environment variable, empty optional when unset or empty.
std::optional<std::string> env(const char* name);

// Creates `dir` (missing parts with mode 700) and checks that it is a real directory owned
// by the effective user with no group or other access. Throws std::runtime_error otherwise.
void check_private_dir(const std::filesystem::path& dir);

// A URL with everything after its host replaced by "****": webhook URLs (Slack-style) and
// ntfy topics are credentials in their path. "" stays "".
std::string mask_url(std::string_view url);

// Replaces every character outside the printable ASCII range, for one-line messages.
std::string printable(std::string_view text, size_t max_len = 300);

}  // namespace meganeura::alert
