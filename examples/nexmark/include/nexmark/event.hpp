// nexmark/event.hpp — the three NEXMark event types (Person, Auction, Bid) and the event
// that holds one of them, with the fields, names and units of the NEXMark schema as the
// Rust `nexmark` crate 0.2.0 (src/event.rs) and the original benchmark (Tucker et al.,
// "NEXMark — A Benchmark for Queries over Data Streams", 2002) define them.
//
// Example (compiled by tests/banner_examples.py):
//   nexmark::bid b;
//   b.auction = 1000;
//   b.price = 595843;  // cents
//   b.date_time = nexmark::timestamp{std::chrono::milliseconds{1'700'000'000'000}};
//   nexmark::event e = b;
//   assert(nexmark::kind_of(e) == nexmark::event_kind::bid);
//   assert(nexmark::date_time_of(e) == b.date_time);
//
// Ids are the crate's `usize` (64-bit here); prices are cents; times are milliseconds
// since the Unix epoch (the schema's unit), as std::chrono::sys_time.
//
// Thread safety: plain values. Distinct objects: safe. Shared objects: unsafe.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace nexmark {

/// Event time: milliseconds since the Unix epoch.
using timestamp = std::chrono::sys_time<std::chrono::milliseconds>;

/// The kind of an event. The values are the binary file's kind byte (event_file.hpp).
enum class event_kind : std::uint8_t { person = 0, auction = 1, bid = 2 };

/// "Person", "Auction" or "Bid": the tag of the crate's JSON (serde's externally tagged enum).
constexpr std::string_view kind_name(event_kind k) noexcept {
  switch (k) {
    case event_kind::person:
      return "Person";
    case event_kind::auction:
      return "Auction";
    case event_kind::bid:
      return "Bid";
  }
  return "?";
}

/// A person who sells or bids.
struct person {
  std::uint64_t id = 0;       ///< unique among persons, from config::first_person_id up
  std::string name;           ///< "first last", from config::first_names / last_names
  std::string email_address;  ///< 7 letters "@" 5 letters ".com"
  std::string credit_card;    ///< four groups of four digits, space separated
  std::string city;           ///< one of config::us_cities
  std::string state;          ///< one of config::us_states
  timestamp date_time{};      ///< event time
  std::string extra;          ///< padding to config::avg_person_byte_size
  bool operator==(const person&) const = default;
};

/// An item put up for auction.
struct auction {
  std::uint64_t id = 0;           ///< unique among auctions, from config::first_auction_id up
  std::string item_name;          ///< 20 letters
  std::string description;        ///< 100 letters
  std::uint64_t initial_bid = 0;  ///< cents
  std::uint64_t reserve = 0;      ///< cents, >= initial_bid
  timestamp date_time{};          ///< event time
  timestamp expires{};            ///< when the auction closes, > date_time
  std::uint64_t seller = 0;       ///< a person id
  std::uint64_t category = 0;     ///< config::first_category_id + [0, num_categories)
  std::string extra;              ///< padding to config::avg_auction_byte_size
  bool operator==(const auction&) const = default;
};

/// A bid on an auction.
struct bid {
  std::uint64_t auction = 0;  ///< an auction id
  std::uint64_t bidder = 0;   ///< a person id
  std::uint64_t price = 0;    ///< cents
  std::string channel;        ///< "Google", ... (hot) or "channel-N"
  std::string url;            ///< the channel's URL
  timestamp date_time{};      ///< event time
  std::string extra;          ///< padding to config::avg_bid_byte_size
  bool operator==(const bid&) const = default;
};

/// One event; the alternative's index is its event_kind.
using event = std::variant<person, auction, bid>;

/// The kind of `e`. Never throws.
inline event_kind kind_of(const event& e) noexcept { return static_cast<event_kind>(e.index()); }

/// The event time of `e`. Never throws.
inline timestamp date_time_of(const event& e) noexcept {
  return std::visit([](const auto& x) { return x.date_time; }, e);
}

}  // namespace nexmark
