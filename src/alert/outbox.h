// The on-disk outbox: every notification is written here (and fsynced) before any attempt
// to send it, and removed only once a server accepted it. A relay that is down, slow or
// refusing therefore delays a message, never loses it. `gpualert outbox list|flush` and
// every later gpualert run retry what is left.
//
// Layout: <state_dir>/outbox/<id>/meta.json (channel, recipients, attempts, last error;
// never secrets) and <id>/payload (the full MIME message or the request body).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace meganeura::alert {

struct OutboxEntry {
  std::string id;
  std::filesystem::path dir;
  nlohmann::json meta;
};

class Outbox {
 public:
  explicit Outbox(std::filesystem::path state_dir);

  // Stores a message atomically (written to a temporary directory, fsynced, renamed).
  // Returns its id. Throws std::runtime_error when the outbox cannot be written.
  std::string put(nlohmann::json meta, std::string_view payload);
  // Entries, oldest first. Unreadable entries are listed with meta {"error": ...}.
  std::vector<OutboxEntry> list() const;
  std::string payload(const OutboxEntry& entry) const;
  void remove(const OutboxEntry& entry) const;
  void record_failure(const OutboxEntry& entry, const std::string& error) const;
  // Moves the entry (with entry.meta and the reason) to <state>/given-up/: never retried,
  // listed by `gpualert outbox list`.
  void give_up(const OutboxEntry& entry, const std::string& reason) const;
  std::vector<OutboxEntry> given_up() const;
  // Replaces the entry's meta.json atomically with entry.meta.
  void write_meta(const OutboxEntry& entry) const;
  bool empty() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace meganeura::alert
