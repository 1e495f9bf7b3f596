// queries.cpp — the JSON lines of the NEXMark query rows (include/nexmark/queries.hpp,
// window_queries.hpp).
#include <charconv>
#include <nexmark/queries.hpp>
#include <nexmark/window_queries.hpp>

namespace nexmark {
namespace {

void num(std::string& out, std::uint64_t v) {
  char b[20];
  out.append(b, std::to_chars(b, b + sizeof b, v).ptr);
}
// The generated strings are letters; escape what JSON requires all the same.
void str(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      static constexpr char hex[] = "0123456789abcdef";
      out += "\\u00";
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 0xf]);
    } else {
      out.push_back(ch);
    }
  }
  out.push_back('"');
}
std::uint64_t ms(timestamp t) { return static_cast<std::uint64_t>(t.time_since_epoch().count()); }

}  // namespace

void append_json_line(const q0_row& r, std::string& out) {
  out += "{\"auction\":";
  num(out, r.auction);
  out += ",\"bidder\":";
  num(out, r.bidder);
  out += ",\"price\":";
  num(out, r.price);
  out += ",\"date_time\":";
  num(out, ms(r.date_time));
  out += ",\"extra\":";
  str(out, r.extra);
  out += "}\n";
}

void append_json_line(const q1_row& r, std::string& out) {
  out += "{\"auction\":";
  num(out, r.auction);
  out += ",\"bidder\":";
  num(out, r.bidder);
  out += ",\"price\":";
  num(out, r.price_thousandths / 1000);
  const auto frac = static_cast<unsigned>(r.price_thousandths % 1000);
  out.push_back('.');
  out.push_back(static_cast<char>('0' + frac / 100));
  out.push_back(static_cast<char>('0' + frac / 10 % 10));
  out.push_back(static_cast<char>('0' + frac % 10));
  out += ",\"date_time\":";
  num(out, ms(r.date_time));
  out += ",\"extra\":";
  str(out, r.extra);
  out += "}\n";
}

void append_json_line(const q2_row& r, std::string& out) {
  out += "{\"auction\":";
  num(out, r.auction);
  out += ",\"price\":";
  num(out, r.price);
  out += "}\n";
}

void append_json_line(const q3_row& r, std::string& out) {
  out += "{\"name\":";
  str(out, r.name);
  out += ",\"city\":";
  str(out, r.city);
  out += ",\"state\":";
  str(out, r.state);
  out += ",\"id\":";
  num(out, r.id);
  out += "}\n";
}

void append_json_line(const q4_row& r, std::string& out) {
  out += "{\"category\":";
  num(out, r.category);
  out += ",\"avg_final\":";
  num(out, r.avg_final);
  out += "}\n";
}

void append_json_line(const q5_row& r, std::string& out) {
  out += "{\"auction\":";
  num(out, r.auction);
  out += ",\"num\":";
  num(out, r.num);
  out += ",\"window_start\":";
  num(out, ms(r.window_start));
  out += ",\"window_end\":";
  num(out, ms(r.window_end));
  out += "}\n";
}

void append_json_line(const q8_row& r, std::string& out) {
  out += "{\"id\":";
  num(out, r.id);
  out += ",\"name\":";
  str(out, r.name);
  out += ",\"window_start\":";
  num(out, ms(r.window_start));
  out += "}\n";
}

void append_json_line(const q11_row& r, std::string& out) {
  out += "{\"bidder\":";
  num(out, r.bidder);
  out += ",\"bid_count\":";
  num(out, r.bid_count);
  out += ",\"window_start\":";
  num(out, ms(r.window_start));
  out += ",\"window_end\":";
  num(out, ms(r.window_end));
  out += "}\n";
}

}  // namespace nexmark
