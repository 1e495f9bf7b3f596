// generator.cpp — the port of the `nexmark` crate 0.2.0's src/generator.rs, src/event.rs,
// src/config.rs and src/utils.rs. Integer arithmetic is the crate's usize arithmetic
// (64-bit, wrapping as in a release build); floating point is f32 where the crate's is.
#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <nexmark/detail/rand08.hpp>
#include <nexmark/generator.hpp>
#include <numbers>

namespace nexmark {
namespace {

using detail::small_rng;

// Fraction of people/auctions that may be hot is 1 over these (event.rs).
constexpr std::uint64_t hot_seller_batch = 100;
constexpr std::uint64_t hot_auction_batch = 100;
constexpr std::uint64_t hot_bidder_batch = 100;
constexpr std::size_t min_string_length = 3;    // utils.rs MIN_STRING_LENGTH
constexpr std::size_t channel_number = 10'000;  // utils.rs CHANNEL_NUMBER

void exact_string(small_rng& rng, std::size_t length, std::string& out) {
  out.clear();
  out.reserve(length);
  for (std::size_t i = 0; i < length; ++i)
    out.push_back(static_cast<char>(detail::gen_range_u8_inclusive(rng, 'a', 'z')));
}

std::string string_with_delimiter(small_rng& rng, std::size_t max, char delimiter) {
  const std::size_t len = detail::gen_range_u64(rng, min_string_length, max);
  std::string s;
  for (std::size_t i = 0; i < len; ++i)
    s.push_back(detail::gen_range_u32(rng, 0, 13) == 0
                    ? delimiter
                    : static_cast<char>(detail::gen_range_u8_inclusive(rng, 'a', 'z')));
  return s;
}

void next_extra(small_rng& rng, std::size_t current_size, std::size_t desired_average_size,
                std::string& out) {
  if (current_size > desired_average_size) {
    out.clear();
    return;
  }
  const std::size_t desired = desired_average_size - current_size;
  const std::size_t delta = (desired + 2) / 5;
  const std::size_t min_size = desired - delta;
  const std::size_t size = min_size + (delta == 0 ? 0 : detail::gen_range_u64(rng, 0, 2 * delta));
  exact_string(rng, size, out);
}

std::uint64_t gen_price(small_rng& rng) {
  const float x = detail::gen_f32(rng) * 6.0f;
  return static_cast<std::uint64_t>(std::round(std::pow(10.0f, x) * 100.0f));
}

// Rust's u32::reverse_bits.
std::uint32_t reverse_bits(std::uint32_t v) {
  std::uint32_t r = 0;
  for (int b = 0; b < 32; ++b, v >>= 1) r = (r << 1) | (v & 1);
  return r;
}

// utils.rs build_channel_url_map: ("channel-i", url of i) for i in 0..10000, built once.
struct channel_entry {
  std::string channel, url;
};
const std::vector<channel_entry>& channel_url_map() {
  static const std::vector<channel_entry> map = [] {
    std::vector<channel_entry> m;
    m.reserve(channel_number);
    for (std::size_t i = 0; i < channel_number; ++i) {
      std::string url = base_url(i);
      small_rng rng = small_rng::seed_from_u64(i);
      if (detail::gen_range_u32(rng, 0, 10) > 0) {
        const auto reversed =
            static_cast<std::int32_t>(reverse_bits(static_cast<std::uint32_t>(i)));
        const std::int64_t id = std::abs(static_cast<std::int64_t>(reversed));
        url += "&channel_id=";
        url += std::to_string(id);
      }
      m.push_back({"channel-" + std::to_string(i), std::move(url)});
    }
    return m;
  }();
  return map;
}

void append_4digits(std::string& s, std::uint32_t v) {
  char buf[4] = {'0', '0', '0', '0'};
  for (int i = 3; i >= 0; --i, v /= 10) buf[i] = static_cast<char>('0' + v % 10);
  s.append(buf, 4);
}

void require(bool ok, const char* key, std::size_t value, const char* rule) {
  if (!ok)
    throw config_error(std::string("nexmark config: ") + key + " = " + std::to_string(value) +
                       ": " + rule);
}

}  // namespace

std::string base_url(std::uint64_t seed) {
  small_rng rng = small_rng::seed_from_u64(seed);
  const std::string a = string_with_delimiter(rng, 5, '_');
  const std::string b = string_with_delimiter(rng, 5, '_');
  const std::string c = string_with_delimiter(rng, 5, '_');
  return "https://www.nexmark.com/" + a + "/" + b + "/" + c + "/item.htm?query=1";
}

generator::generator(config cfg) : cfg_(std::move(cfg)) {
  const config& c = cfg_;
  require(c.person_proportion > 0, "person_proportion", c.person_proportion, "must be > 0");
  require(c.auction_proportion > 0, "auction_proportion", c.auction_proportion, "must be > 0");
  require(c.bid_proportion > 0, "bid_proportion", c.bid_proportion, "must be > 0");
  require(c.out_of_order_group_size > 0, "out_of_order_group_size", c.out_of_order_group_size,
          "must be > 0");
  require(c.hot_seller_ratio > 0, "hot_seller_ratio", c.hot_seller_ratio, "must be > 0");
  require(c.hot_auction_ratio > 0, "hot_auction_ratio", c.hot_auction_ratio, "must be > 0");
  require(c.hot_bidder_ratio > 0, "hot_bidder_ratio", c.hot_bidder_ratio, "must be > 0");
  require(c.hot_channel_ratio > 0, "hot_channel_ratio", c.hot_channel_ratio, "must be > 0");
  require(c.num_categories > 0, "num_categories", c.num_categories, "must be > 0");
  require(c.active_people + c.person_id_lead > 0, "person_id_lead", c.person_id_lead,
          "must be > 0 when active_people is 0");
  require(c.first_rate > 0, "first_rate", c.first_rate, "must be > 0");
  require(c.next_rate > 0, "next_rate", c.next_rate, "must be > 0");
  require(c.us_per_unit > 0, "us_per_unit", c.us_per_unit, "must be > 0");
  require(c.rate_period > 0, "rate_period", c.rate_period, "must be > 0");
  require(c.sine_approx_steps > 0, "sine_approx_steps", c.sine_approx_steps, "must be > 0");
  require(c.num_event_generators > 0, "num_event_generators", c.num_event_generators,
          "must be > 0");
  require(!c.us_states.empty(), "us_states (count)", 0, "must not be empty");
  require(!c.us_cities.empty(), "us_cities (count)", 0, "must not be empty");
  require(!c.hot_channels.empty(), "hot_channels (count)", 0, "must not be empty");
  require(!c.first_names.empty(), "first_names (count)", 0, "must not be empty");
  require(!c.last_names.empty(), "last_names (count)", 0, "must not be empty");
  require(c.base_time.time_since_epoch().count() >= 0, "base_time (ms)", 0,
          "must not be before 1970");

  base_ms_ = static_cast<std::uint64_t>(c.base_time.time_since_epoch().count());
  for (std::size_t i = 0; i < c.hot_channels.size(); ++i) hot_urls_.push_back(base_url(i));
  proportion_denominator_ = c.person_proportion + c.auction_proportion + c.bid_proportion;

  // config.rs From<NexmarkConfig> for GeneratorConfig.
  const float generators = static_cast<float>(c.num_event_generators);
  auto rate_to_period = [&](std::size_t r) {
    return static_cast<float>(c.us_per_unit) / static_cast<float>(r);
  };
  if (c.first_rate == c.next_rate) {
    inter_event_delays_.push_back(rate_to_period(c.first_rate) * generators);
  } else if (c.shape == rate_shape::square) {
    inter_event_delays_.push_back(rate_to_period(c.first_rate) * generators);
    inter_event_delays_.push_back(rate_to_period(c.next_rate) * generators);
  } else {
    const double mid = static_cast<double>(c.first_rate + c.next_rate) / 2.0;
    // (first_rate - next_rate) in usize: wraps when next_rate > first_rate, as the crate's.
    const double amp = static_cast<double>(c.first_rate - c.next_rate) / 2.0;
    for (std::size_t i = 0; i < c.sine_approx_steps; ++i) {
      const double r = (2.0 * std::numbers::pi * static_cast<double>(i)) /
                       static_cast<double>(c.sine_approx_steps);
      const double rate = std::round(mid + amp * std::cos(r));
      require(rate >= 1.0, "next_rate", c.next_rate,
              "a sine wave needs first_rate > next_rate (the crate computes the amplitude "
              "in unsigned arithmetic)");
      inter_event_delays_.push_back(rate_to_period(static_cast<std::size_t>(rate)) * generators);
    }
  }
  const std::size_t n = c.shape == rate_shape::square ? 2 : c.sine_approx_steps;
  step_length_ = (c.rate_period + n - 1) / n;
  if (inter_event_delays_.size() > 1) {
    for (const float delay : inter_event_delays_) {
      const float events_this_cycle = static_cast<float>(step_length_ * 1'000'000) / delay;
      events_per_epoch_ += static_cast<std::size_t>(std::round(events_this_cycle));
      epoch_period_ += (events_this_cycle * delay) / 1000.0f;
    }
    require(events_per_epoch_ > 0, "rate_period", c.rate_period, "gives no event per epoch");
  }
}

generator& generator::with_step(std::uint64_t step) {
  if (step == 0) throw config_error("nexmark generator: step = 0: must be > 0");
  step_ = step;
  return *this;
}

std::uint64_t generator::global_offset() const noexcept {
  const std::uint64_t o = offset_, d = proportion_denominator_;
  const std::uint64_t pp = cfg_.person_proportion, ap = cfg_.auction_proportion,
                      bp = cfg_.bid_proportion;
  if (!filter_) return o;
  switch (*filter_) {
    case event_kind::person:
      return o / pp * d + o % pp;
    case event_kind::auction:
      return o / ap * d + pp + o % ap;
    case event_kind::bid:
      return o / bp * d + pp + ap + o % bp;
  }
  return o;
}

std::uint64_t generator::next_adjusted_event(std::uint64_t events_so_far) const noexcept {
  const std::uint64_t g = cfg_.out_of_order_group_size;
  const std::uint64_t n = cfg_.first_event_number + events_so_far;
  return (n / g) * g + (n * 953) % g;
}

std::uint64_t generator::event_number() const noexcept {
  return filter_ ? cfg_.first_event_number + global_offset() : next_adjusted_event(offset_);
}

std::uint64_t generator::event_timestamp_ms(std::uint64_t event_number) const noexcept {
  if (inter_event_delays_.size() == 1)
    return base_ms_ + static_cast<std::uint64_t>(std::round(
                          (static_cast<float>(event_number) * inter_event_delays_[0]) / 1000.0f));
  const std::uint64_t epoch = event_number / events_per_epoch_;
  std::uint64_t event_i = event_number % events_per_epoch_;
  float offset_in_epoch = 0.0f;
  for (const float delay : inter_event_delays_) {
    const float events_this_cycle = static_cast<float>(step_length_ * 1'000'000) / delay;
    const auto rounded = static_cast<std::uint64_t>(std::round(events_this_cycle));
    // The crate's condition (see the header): out_of_order_group_size, not event_i.
    if (cfg_.out_of_order_group_size < rounded) {
      const float offset_in_cycle = static_cast<float>(event_i) * delay;
      return base_ms_ +
             static_cast<std::uint64_t>(std::round(static_cast<float>(epoch) * epoch_period_ +
                                                   offset_in_epoch + offset_in_cycle / 1000.0f));
    }
    event_i -= rounded;
    offset_in_epoch += (events_this_cycle * delay) / 1000.0f;
  }
  return 0;
}

timestamp generator::next_timestamp() const noexcept {
  return timestamp{
      std::chrono::milliseconds{static_cast<std::int64_t>(event_timestamp_ms(event_number()))}};
}

event generator::next() {
  event e;
  next(e);
  return e;
}

void generator::next(event& out) {
  make_event(event_number(), out);
  offset_ += step_;
}

void generator::make_event(std::uint64_t event_number, event& out) const {
  const std::uint64_t id = cfg_.first_event_id + event_number;
  const std::uint64_t time = event_timestamp_ms(event_number);
  const std::uint64_t rem = event_number % proportion_denominator_;
  if (rem < cfg_.person_proportion) {
    if (out.index() != 0) out.emplace<person>();
    make_person(id, time, std::get<person>(out));
  } else if (rem < cfg_.person_proportion + cfg_.auction_proportion) {
    if (out.index() != 1) out.emplace<auction>();
    make_auction(event_number, id, time, std::get<auction>(out));
  } else {
    if (out.index() != 2) out.emplace<bid>();
    make_bid(id, time, std::get<bid>(out));
  }
}

std::uint64_t generator::person_last_id(std::uint64_t event_id) const noexcept {
  const std::uint64_t epoch = event_id / proportion_denominator_;
  const std::uint64_t offset =
      std::min<std::uint64_t>(event_id % proportion_denominator_, cfg_.person_proportion - 1);
  return epoch * cfg_.person_proportion + offset;
}

std::uint64_t generator::auction_last_id(std::uint64_t event_id) const noexcept {
  std::uint64_t epoch = event_id / proportion_denominator_;
  std::uint64_t offset = event_id % proportion_denominator_;
  if (offset < cfg_.person_proportion) {
    epoch -= 1;
    offset = cfg_.auction_proportion - 1;
  } else if (cfg_.person_proportion + cfg_.auction_proportion <= offset) {
    offset = cfg_.auction_proportion - 1;
  } else {
    offset -= cfg_.person_proportion;
  }
  return epoch * cfg_.auction_proportion + offset;
}

void generator::make_person(std::uint64_t event_id, std::uint64_t time, person& p) const {
  small_rng rng = small_rng::seed_from_u64(event_id);
  p.id = person_last_id(event_id) + cfg_.first_person_id;
  const std::string& first = cfg_.first_names[detail::choose_index(rng, cfg_.first_names.size())];
  const std::string& last = cfg_.last_names[detail::choose_index(rng, cfg_.last_names.size())];
  p.name.assign(first).append(" ").append(last);
  std::string part;
  exact_string(rng, 7, part);
  p.email_address.assign(part).append("@");
  exact_string(rng, 5, part);
  p.email_address.append(part).append(".com");
  p.credit_card.clear();
  for (int i = 0; i < 4; ++i) {
    if (i) p.credit_card.push_back(' ');
    append_4digits(p.credit_card, detail::gen_range_u32(rng, 0, 10000));
  }
  p.city = cfg_.us_cities[detail::choose_index(rng, cfg_.us_cities.size())];
  p.state = cfg_.us_states[detail::choose_index(rng, cfg_.us_states.size())];
  const std::size_t current_size = 8 + p.name.size() + p.email_address.size() +
                                   p.credit_card.size() + p.city.size() + p.state.size();
  next_extra(rng, current_size, cfg_.avg_person_byte_size, p.extra);
  p.date_time = timestamp{std::chrono::milliseconds{static_cast<std::int64_t>(time)}};
}

void generator::make_auction(std::uint64_t event_number, std::uint64_t event_id, std::uint64_t time,
                             auction& a) const {
  small_rng rng = small_rng::seed_from_u64(event_id);
  a.id = auction_last_id(event_id) + cfg_.first_auction_id;
  exact_string(rng, 20, a.item_name);
  exact_string(rng, 100, a.description);
  a.initial_bid = gen_price(rng);
  a.reserve = a.initial_bid + gen_price(rng);
  // Auction::next_length: up to twice the time until in_flight_auctions more auctions.
  const std::uint64_t events_for_auctions =
      (cfg_.in_flight_auctions * proportion_denominator_) / cfg_.auction_proportion;
  const std::uint64_t horizon = event_timestamp_ms(event_number + events_for_auctions) - time;
  const std::uint64_t length =
      1 + detail::gen_range_u64(rng, 0, std::max<std::uint64_t>(horizon * 2, 1));
  std::uint64_t seller;
  if (detail::gen_range_u64(rng, 0, cfg_.hot_seller_ratio) > 0) {
    seller = (person_last_id(event_id) / hot_seller_batch) * hot_seller_batch;
  } else {  // Person::next_id
    const std::uint64_t people = person_last_id(event_id) + 1;
    const std::uint64_t active = std::min<std::uint64_t>(people, cfg_.active_people);
    seller = people - active + detail::gen_range_u64(rng, 0, active + cfg_.person_id_lead);
  }
  a.seller = seller + cfg_.first_person_id;
  a.category = cfg_.first_category_id + detail::gen_range_u64(rng, 0, cfg_.num_categories);
  const std::size_t current_size = 8 + a.item_name.size() + a.description.size() + 8 * 5;
  next_extra(rng, current_size, cfg_.avg_auction_byte_size, a.extra);
  a.date_time = timestamp{std::chrono::milliseconds{static_cast<std::int64_t>(time)}};
  a.expires = timestamp{std::chrono::milliseconds{static_cast<std::int64_t>(time + length)}};
}

void generator::make_bid(std::uint64_t event_id, std::uint64_t time, bid& b) const {
  small_rng rng = small_rng::seed_from_u64(event_id);
  std::uint64_t auction_id;
  if (0 < detail::gen_range_u64(rng, 0, cfg_.hot_auction_ratio)) {
    auction_id = (auction_last_id(event_id) / hot_auction_batch) * hot_auction_batch;
  } else {  // Auction::next_id
    const std::uint64_t max_auction = auction_last_id(event_id);
    const std::uint64_t min_auction =
        max_auction < cfg_.in_flight_auctions ? 0 : max_auction - cfg_.in_flight_auctions;
    auction_id = min_auction + detail::gen_range_u64(
                                   rng, 0, max_auction - min_auction + 1 + cfg_.auction_id_lead);
  }
  std::uint64_t bidder;
  if (0 < detail::gen_range_u64(rng, 0, cfg_.hot_bidder_ratio)) {
    bidder = (person_last_id(event_id) / hot_bidder_batch) * hot_bidder_batch + 1;
  } else {  // Person::next_id
    const std::uint64_t people = person_last_id(event_id) + 1;
    const std::uint64_t active = std::min<std::uint64_t>(people, cfg_.active_people);
    bidder = people - active + detail::gen_range_u64(rng, 0, active + cfg_.person_id_lead);
  }
  b.price = gen_price(rng);
  if (detail::gen_range_u64(rng, 0, cfg_.hot_channel_ratio) > 0) {
    const std::size_t index = detail::gen_range_u64(rng, 0, cfg_.hot_channels.size());
    b.channel = cfg_.hot_channels[index];
    b.url = hot_urls_[index];
  } else {
    const auto& map = channel_url_map();
    const channel_entry& e = map[detail::choose_index(rng, map.size())];
    b.channel = e.channel;
    b.url = e.url;
  }
  next_extra(rng, 8 + 8 + 8 + 8, cfg_.avg_bid_byte_size, b.extra);
  b.auction = auction_id + cfg_.first_auction_id;
  b.bidder = bidder + cfg_.first_person_id;
  b.date_time = timestamp{std::chrono::milliseconds{static_cast<std::int64_t>(time)}};
}

}  // namespace nexmark
