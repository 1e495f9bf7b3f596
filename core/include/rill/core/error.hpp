// rill/core/error.hpp — errors rill reports to the code that configures a pipeline.
//
// Defines:
//   rill::config_error   bad configuration: thrown from constructors, build() and run(),
//                        never from the data path. Carries the offending key.
//
// Example (compiled by tests/banner_examples.py; the operators throw these from their
// options' validate(), e.g. rill::window_sort_options{.length = 0ns}):
//   try {
//     throw rill::config_error{"window_sort.length", "window_sort.length must be > 0"};
//   } catch (const rill::config_error& e) {
//     std::cerr << e.key() << ": " << e.what() << '\n';
//     // prints "window_sort.length: window_sort.length must be > 0"
//   }
//
// Thread safety: plain exception types. Distinct objects: safe. Shared objects: safe to
// read concurrently (they are immutable after construction).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

namespace rill {

/// A configuration value is invalid. Bad configuration throws a config_error with the
/// offending key (docs/design.md "Errors"); the caller fixes the configuration (retrying
/// the same call fails the same way).
///
/// `key()` is the dotted option name, `<component>.<option>`, e.g. "window_sort.length".
/// `what()` is a complete sentence-like message that starts with the key, e.g.
/// "window_sort.length must be > 0".
///
/// Copying never throws (the key is shared, as std::invalid_argument shares its message),
/// so a config_error can be stored in a std::exception_ptr and rethrown safely.
struct config_error : std::invalid_argument {
  /// `key`: the offending option name. `message`: the full human-readable reason.
  /// Throws std::bad_alloc only if the strings cannot be allocated.
  config_error(std::string key, const std::string& message)
      : std::invalid_argument(message), key_(std::make_shared<const std::string>(std::move(key))) {}

  /// The offending option name, e.g. "window_sort.max_buffered". Never throws.
  const std::string& key() const noexcept { return *key_; }

 private:
  std::shared_ptr<const std::string> key_;
};

}  // namespace rill
