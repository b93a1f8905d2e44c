// The command-line parser of gpualert. gpualert starts before every job it watches, so its
// start-up is part of the job's wall time: this parser registers nothing at static
// initialisation, allocates little and throws nothing on the normal path.
//
// Options are `--name VALUE` or `--name=VALUE`, flags are `--name`; an option given a
// vector is repeatable. Words that are not options fill the positionals in order.
#pragma once

#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace gpualert_cli {

class Args {
 public:
  // `command` is what the user typed ("gpualert classify"), `synopsis` what follows it in
  // the usage line, `about` a sentence on what the command does.
  Args(std::string command, const std::string& synopsis, std::string about)
      : command_(std::move(command)), usage_(command_ + " " + synopsis), about_(std::move(about)) {}

  Args& option(const char* name, std::string* out, const char* help, const char* metavar = "VALUE") {
    specs_.push_back({name, help, metavar, out, nullptr, nullptr});
    return *this;
  }
  Args& option(const char* name, std::vector<std::string>* out, const char* help, const char* metavar = "VALUE") {
    specs_.push_back({name, help, metavar, nullptr, out, nullptr});
    return *this;
  }
  Args& flag(const char* name, bool* out, const char* help) {
    specs_.push_back({name, help, "", nullptr, nullptr, out});
    return *this;
  }
  Args& positional(const char* name, std::string* out, const char* help) {
    positionals_.push_back({name, help, out});
    return *this;
  }
  // Text printed after the option list (subcommands, examples).
  Args& epilog(std::string text) {
    epilog_ = std::move(text);
    return *this;
  }

  // Parses argv[begin, end). With `stop_at_word`, the first word that is not an option ends
  // the parse (it is the command to run) and its index is returned through `stopped_at`;
  // a "--" before it also ends the parse, the command starting after it.
  // Returns an exit status when the program should end now: 0 after --help, 2 after an
  // error, which is printed as one line on stderr.
  std::optional<int> parse(int begin, int end, char** argv, bool stop_at_word = false, int* stopped_at = nullptr) {
    size_t next_positional = 0;
    for (int i = begin; i < end; ++i) {
      std::string_view a = argv[i];
      if (a == "--help" || a == "-h") {
        std::fputs(help().c_str(), stdout);
        return 0;
      }
      if (a == "--" && stop_at_word) {
        // Ends our options: the command starts after it. A later "--" is the command's.
        if (stopped_at != nullptr) *stopped_at = i + 1;
        return check_positionals(next_positional);
      }
      if (a.size() > 2 && a.substr(0, 2) == "--") {
        std::string_view name = a, value;
        bool inline_value = false;
        if (auto eq = a.find('='); eq != std::string_view::npos) {
          name = a.substr(0, eq);
          value = a.substr(eq + 1);
          inline_value = true;
        }
        const Spec* spec = find(name);
        if (spec == nullptr) return fail("unknown option '" + std::string(name) + "'");
        if (spec->flag != nullptr) {
          if (inline_value) return fail("option " + std::string(name) + " takes no value");
          *spec->flag = true;
          continue;
        }
        if (!inline_value) {
          if (i + 1 >= end) return fail("option " + std::string(name) + " needs a value");
          value = argv[++i];
        }
        if (spec->single != nullptr)
          *spec->single = std::string(value);
        else
          spec->repeated->emplace_back(value);
        continue;
      }
      if (a.size() > 1 && a[0] == '-') return fail("unknown option '" + std::string(a) + "'");
      if (stop_at_word) {
        if (stopped_at != nullptr) *stopped_at = i;
        return check_positionals(next_positional);
      }
      if (next_positional >= positionals_.size()) return fail("unexpected argument '" + std::string(a) + "'");
      *positionals_[next_positional++].out = std::string(a);
    }
    if (stopped_at != nullptr) *stopped_at = end;
    return check_positionals(next_positional);
  }

  std::string help() const {
    std::string s = "Usage: " + usage_ + "\n\n" + about_ + "\n";
    if (!positionals_.empty()) {
      s += "\nArguments:\n";
      for (const auto& p : positionals_) s += line(p.name, p.help);
    }
    s += "\nOptions:\n";
    for (const auto& o : specs_)
      s += line(o.flag != nullptr ? std::string(o.name) : std::string(o.name) + " " + o.metavar,
                std::string(o.help) + (o.repeated != nullptr ? " (repeatable)" : ""));
    s += line("-h, --help", "print this help and exit");
    if (!epilog_.empty()) s += "\n" + epilog_;
    return s;
  }

 private:
  struct Spec {
    const char* name;
    const char* help;
    const char* metavar;
    std::string* single;
    std::vector<std::string>* repeated;
    bool* flag;
  };
  struct Positional {
    const char* name;
    const char* help;
    std::string* out;
  };

  const Spec* find(std::string_view name) const {
    for (const auto& s : specs_)
      if (name == s.name) return &s;
    return nullptr;
  }
  std::optional<int> check_positionals(size_t given) const {
    if (given < positionals_.size()) return fail(std::string("missing ") + positionals_[given].name);
    return std::nullopt;
  }
  std::optional<int> fail(const std::string& what) const {
    std::fprintf(stderr, "[gpualert] %s (see %s --help)\n", what.c_str(), command_.c_str());
    return 2;
  }
  static std::string line(const std::string& left, const std::string& right) {
    std::string s = "  " + left;
    s += s.size() < 28 ? std::string(28 - s.size(), ' ') : "\n" + std::string(28, ' ');
    return s + right + "\n";
  }

  std::string command_, usage_, about_, epilog_;
  std::vector<Spec> specs_;
  std::vector<Positional> positionals_;
};

// Parses a number given to `option`; prints one line and returns false when it is not one.
template <typename T>
bool parse_number(const char* option, const std::string& text, T* out) {
  try {
    size_t used = 0;
    if constexpr (std::is_integral_v<T>)
      *out = static_cast<T>(std::stoll(text, &used));
    else
      *out = static_cast<T>(std::stod(text, &used));
    if constexpr (std::is_floating_point_v<T>) {
      if (used == text.size() && std::isfinite(*out)) return true;
    } else if (used == text.size()) {
      return true;
    }
  } catch (const std::exception&) {
  }
  std::fprintf(stderr, "[gpualert] %s: '%s' is not a number\n", option, text.c_str());
  return false;
}

}  // namespace gpualert_cli
