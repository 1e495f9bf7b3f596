// nexmark/generator.hpp — the NEXMark event generator: the model of the original benchmark
// as the Rust `nexmark` crate 0.2.0 implements it (RisingWave's port of Apache Beam's
// Java generator), ported line by line so that the same configuration gives the same
// events, field for field.
//
// Example (compiled by tests/banner_examples.py):
//   nexmark::config cfg;  // the crate's defaults, base_time fixed
//   nexmark::generator gen{cfg};
//   nexmark::event first = gen.next();  // event 0 is a person, id 1000
//   assert(nexmark::kind_of(first) == nexmark::event_kind::person);
//   assert(std::get<nexmark::person>(first).id == 1000);
//   for (int i = 1; i < 50; ++i) gen.next();  // 1 person, 3 auctions, 46 bids per 50
//
// The model (the crate's src/event.rs, src/config.rs, src/utils.rs):
//   - Event number n (0, 1, ...) has kind person, auction or bid by n mod 50 (with the
//     default proportions 1 : 3 : 46), id first_event_id + n, and event time
//     base_time + round(n * inter-event delay); the delay is us_per_unit / rate
//     microseconds (default 10,000 events/s: 0.1 ms) or, when first_rate != next_rate, a
//     square or sine wave of rate_period seconds.
//   - Out of order: with out_of_order_group_size = g > 1 the i-th event emitted is event
//     number (i / g) * g + (i * 953) mod g, so event times go back by less than g events'
//     delay within each group of g.
//   - Every event's fields come from a SmallRng seeded with its event id: the stream is a
//     pure function of the configuration; first_event_id is the seed.
//   - Hot items: a bid is for the newest "hot" auction (a multiple of 100) with
//     probability 1 - 1/hot_auction_ratio, by the hot bidder with 1 - 1/hot_bidder_ratio;
//     an auction's seller is the hot seller with 1 - 1/hot_seller_ratio. Otherwise ids
//     are drawn among the last active_people persons / in_flight_auctions auctions (plus
//     a lead, so some refer to items not yet created).
//
// What differs from the crate: nothing in the events. base_time is a configured value
// (default 1,700,000,000,000 ms, 2023-11-14T22:13:20Z) where the crate's
// NexmarkConfig::default() takes the wall clock; the comparison test passes the crate's
// first event time. The crate's rate-wave lookup (GeneratorConfig::event_timestamp)
// compares out_of_order_group_size, where Beam compares the event's index in the epoch,
// with the number of events of a cycle; the port keeps the crate's rule, so with
// first_rate != next_rate event times follow the crate, not Beam. The crate's binary
// runs only its defaults (one constant rate, in order), so tests/examples/
// nexmark_crate_test.py checks that path, --type, --offset and --step against it; the
// rate waves and out_of_order_group_size > 1 are ported from the crate's source and
// checked by tests/examples/nexmark_test.cpp only.
//
// Floating point: timestamps and prices are computed in float (f32) as the crate does,
// and prices use powf; results equal the crate's on an IEEE-754 target with the same libm
// (glibc) and no FMA contraction (ISO C++ mode: -ffp-contract=off).
//
// Thread safety: a generator is used by one thread at a time. Distinct generators: safe.
#pragma once

#include <cstdint>
#include <nexmark/event.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace nexmark {

/// Rate wave when first_rate != next_rate (the crate's RateShape).
enum class rate_shape { square, sine };

/// The crate's NexmarkConfig: same names (its rate_shape is `shape` here) and defaults
/// (except base_time). Sizes are bytes; a hot ratio r makes P(hot) = 1 - 1/r.
struct config {
  std::size_t active_people = 1000;      ///< persons considered active for new auctions and bids
  std::size_t in_flight_auctions = 100;  ///< auctions open at any time
  std::size_t out_of_order_group_size =
      1;                                   ///< 1 = in order; g = shuffled within groups of g events
  std::size_t avg_person_byte_size = 200;  ///< target size of a person, bytes (sets `extra`)
  std::size_t avg_auction_byte_size = 500;
  std::size_t avg_bid_byte_size = 100;
  std::size_t hot_seller_ratio = 4;  ///< P(hot seller) = 1 - 1/ratio
  std::size_t hot_auction_ratio = 2;
  std::size_t hot_bidder_ratio = 4;
  std::size_t hot_channel_ratio = 2;
  std::uint64_t first_event_id = 0;      ///< id of event 0; the seed of the stream
  std::uint64_t first_event_number = 0;  ///< number of the first event (sets its time)
  timestamp base_time{std::chrono::milliseconds{1'700'000'000'000}};  ///< time of event 0
  std::size_t num_categories = 5;
  std::size_t auction_id_lead = 10;
  std::size_t person_proportion = 1;  ///< per person_ + auction_ + bid_proportion events
  std::size_t auction_proportion = 3;
  std::size_t bid_proportion = 46;
  std::uint64_t first_auction_id = 1000;
  std::uint64_t first_person_id = 1000;
  std::uint64_t first_category_id = 10;
  std::size_t person_id_lead = 10;
  std::size_t sine_approx_steps = 10;
  std::vector<std::string> us_states{"az", "ca", "id", "or", "wa", "wy"};
  std::vector<std::string> us_cities{"phoenix",  "los angeles", "san francisco", "boise",
                                     "portland", "bend",        "redmond",       "seattle",
                                     "kent",     "cheyenne"};
  /// Hot channels; their URLs are the crate's get_base_url(0..) (one per channel).
  std::vector<std::string> hot_channels{"Google", "Facebook", "Baidu", "Apple"};
  std::vector<std::string> first_names{"peter", "paul",  "luke",  "john",   "saul",  "vicky",
                                       "kate",  "julie", "sarah", "deiter", "walter"};
  std::vector<std::string> last_names{"shultz", "abrams", "spencer", "white", "bartels",
                                      "walton", "smith",  "jones",   "noris"};
  std::size_t num_event_generators = 1;  ///< generators sharing the rate (delay x this)
  rate_shape shape = rate_shape::sine;
  std::size_t rate_period = 600;    ///< seconds of one rate wave
  std::size_t first_rate = 10'000;  ///< events per unit (us_per_unit microseconds)
  std::size_t next_rate = 10'000;
  std::size_t us_per_unit = 1'000'000;  ///< microseconds per rate unit (1 s)
};

/// A configuration the generator cannot use; what() names the key and the value.
class config_error : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// The crate's EventGenerator: an endless, deterministic sequence of events.
class generator {
 public:
  /// Throws config_error for a zero proportion, ratio, group size, rate, period, step
  /// count or us_per_unit, an empty name/city/state/channel list, or rates whose
  /// inter-event delay is not positive.
  explicit generator(config cfg = {});

  /// Starts at the offset-th event (of the filtered kind, with a type filter). Default 0.
  generator& with_offset(std::uint64_t offset) noexcept {
    offset_ = offset;
    return *this;
  }
  /// Advances the offset by `step` after each event (0 is a config_error). Default 1.
  generator& with_step(std::uint64_t step);
  /// Only events of kind `k` (the crate's with_type_filter). Default: all kinds.
  generator& with_type_filter(event_kind k) noexcept {
    filter_ = k;
    return *this;
  }

  /// The next event. Allocates its strings; never throws but std::bad_alloc.
  event next();
  /// The next event into `out` (reuses its strings' capacity when the kind repeats).
  void next(event& out);

  /// The current offset (count of events of the filtered kind, or of all events).
  std::uint64_t offset() const noexcept { return offset_; }
  /// The event time of the event next() returns.
  timestamp next_timestamp() const noexcept;

  /// The event with number `event_number` (a pure function of the configuration).
  void make_event(std::uint64_t event_number, event& out) const;

  const config& configuration() const noexcept { return cfg_; }

 private:
  std::uint64_t event_number() const noexcept;
  std::uint64_t global_offset() const noexcept;
  std::uint64_t event_timestamp_ms(std::uint64_t event_number) const noexcept;
  std::uint64_t next_adjusted_event(std::uint64_t events_so_far) const noexcept;
  void make_person(std::uint64_t id, std::uint64_t time, person& p) const;
  void make_auction(std::uint64_t event_number, std::uint64_t event_id, std::uint64_t time,
                    auction& a) const;
  void make_bid(std::uint64_t event_id, std::uint64_t time, bid& b) const;
  std::uint64_t person_last_id(std::uint64_t event_id) const noexcept;
  std::uint64_t auction_last_id(std::uint64_t event_id) const noexcept;

  config cfg_;
  std::vector<std::string> hot_urls_;
  std::uint64_t base_ms_ = 0;
  std::size_t proportion_denominator_ = 0;
  std::size_t step_length_ = 0;
  std::size_t events_per_epoch_ = 0;
  float epoch_period_ = 0;
  std::vector<float> inter_event_delays_;
  std::uint64_t offset_ = 0, step_ = 1;
  std::optional<event_kind> filter_;
};

/// The crate's get_base_url(seed): "https://www.nexmark.com/<a>/<b>/<c>/item.htm?query=1".
std::string base_url(std::uint64_t seed);

}  // namespace nexmark
