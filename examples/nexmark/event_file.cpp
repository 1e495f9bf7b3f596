// event_file.cpp — JSON lines in serde_json's form and the binary event format
// (include/nexmark/event_file.hpp).
#include <cerrno>
#include <charconv>
#include <cstring>
#include <nexmark/event_file.hpp>

namespace nexmark {
namespace {

void put_u64(std::string& out, std::uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, 8);
}
void put_str(std::string& out, std::string_view s) {
  const auto n = static_cast<std::uint32_t>(s.size());
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.append(b, 4);
  out.append(s);
}
std::uint64_t ms(timestamp t) { return static_cast<std::uint64_t>(t.time_since_epoch().count()); }

// serde_json's escaping (ser.rs ESCAPE table): '"', '\\', the short forms \b \t \n \f \r,
// other bytes below 0x20 as \u00xx (lowercase hex); everything else verbatim.
void json_str(std::string& out, std::string_view s) {
  out.push_back('"');
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20) {
          static constexpr char hex[] = "0123456789abcdef";
          out += "\\u00";
          out.push_back(hex[c >> 4]);
          out.push_back(hex[c & 0xf]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}
void json_u64(std::string& out, std::uint64_t v) {
  char b[20];
  const auto r = std::to_chars(b, b + sizeof b, v);
  out.append(b, r.ptr);
}
// ,"key":
void key(std::string& out, std::string_view k, bool first = false) {
  if (!first) out.push_back(',');
  out.push_back('"');
  out.append(k);
  out += "\":";
}

}  // namespace

void append_json_line(const event& e, std::string& out) {
  out += "{\"";
  out.append(kind_name(kind_of(e)));
  out += "\":{";
  if (const auto* p = std::get_if<person>(&e)) {
    key(out, "id", true);
    json_u64(out, p->id);
    key(out, "name");
    json_str(out, p->name);
    key(out, "email_address");
    json_str(out, p->email_address);
    key(out, "credit_card");
    json_str(out, p->credit_card);
    key(out, "city");
    json_str(out, p->city);
    key(out, "state");
    json_str(out, p->state);
    key(out, "date_time");
    json_u64(out, ms(p->date_time));
    key(out, "extra");
    json_str(out, p->extra);
  } else if (const auto* a = std::get_if<auction>(&e)) {
    key(out, "id", true);
    json_u64(out, a->id);
    key(out, "item_name");
    json_str(out, a->item_name);
    key(out, "description");
    json_str(out, a->description);
    key(out, "initial_bid");
    json_u64(out, a->initial_bid);
    key(out, "reserve");
    json_u64(out, a->reserve);
    key(out, "date_time");
    json_u64(out, ms(a->date_time));
    key(out, "expires");
    json_u64(out, ms(a->expires));
    key(out, "seller");
    json_u64(out, a->seller);
    key(out, "category");
    json_u64(out, a->category);
    key(out, "extra");
    json_str(out, a->extra);
  } else {
    const auto& b = std::get<bid>(e);
    key(out, "auction", true);
    json_u64(out, b.auction);
    key(out, "bidder");
    json_u64(out, b.bidder);
    key(out, "price");
    json_u64(out, b.price);
    key(out, "channel");
    json_str(out, b.channel);
    key(out, "url");
    json_str(out, b.url);
    key(out, "date_time");
    json_u64(out, ms(b.date_time));
    key(out, "extra");
    json_str(out, b.extra);
  }
  out += "}}\n";
}

void append_binary(const event& e, std::string& out) {
  out.push_back(static_cast<char>(kind_of(e)));
  if (const auto* p = std::get_if<person>(&e)) {
    put_u64(out, p->id);
    put_str(out, p->name);
    put_str(out, p->email_address);
    put_str(out, p->credit_card);
    put_str(out, p->city);
    put_str(out, p->state);
    put_u64(out, ms(p->date_time));
    put_str(out, p->extra);
  } else if (const auto* a = std::get_if<auction>(&e)) {
    put_u64(out, a->id);
    put_str(out, a->item_name);
    put_str(out, a->description);
    put_u64(out, a->initial_bid);
    put_u64(out, a->reserve);
    put_u64(out, ms(a->date_time));
    put_u64(out, ms(a->expires));
    put_u64(out, a->seller);
    put_u64(out, a->category);
    put_str(out, a->extra);
  } else {
    const auto& b = std::get<bid>(e);
    put_u64(out, b.auction);
    put_u64(out, b.bidder);
    put_u64(out, b.price);
    put_str(out, b.channel);
    put_str(out, b.url);
    put_u64(out, ms(b.date_time));
    put_str(out, b.extra);
  }
}

event_file_reader::event_file_reader(const std::filesystem::path& path)
    : path_(path), buf_(1u << 20) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw event_file_error(path.string() + ": cannot open: " + std::strerror(errno));
  if (!fill(binary_magic.size()))
    fail(0, "not a NEXMark event file: shorter than the 8-byte magic");
  if (std::string_view(buf_.data(), binary_magic.size()) != binary_magic)
    fail(0, "not a NEXMark event file: the first 8 bytes are not \"NEXMARK\\x01\"");
  pos_ += binary_magic.size();
}

event_file_reader::~event_file_reader() {
  if (file_) std::fclose(file_);
}

void event_file_reader::fail(std::uint64_t at, const std::string& what) const {
  throw event_file_error(path_.string() + ": " + what + " at byte " + std::to_string(at) +
                         " (event " + std::to_string(events_) + ")");
}

// Makes `need` unread bytes available; false when the file ends first.
bool event_file_reader::fill(std::size_t need) {
  if (end_ - pos_ >= need) return true;
  if (pos_ > 0) {
    std::memmove(buf_.data(), buf_.data() + pos_, end_ - pos_);
    file_offset_ += pos_;
    end_ -= pos_;
    pos_ = 0;
  }
  if (buf_.size() < need) buf_.resize(need);
  while (end_ < need) {
    const std::size_t n = std::fread(buf_.data() + end_, 1, buf_.size() - end_, file_);
    if (n == 0) {
      if (std::ferror(file_))
        throw event_file_error(path_.string() + ": read error at byte " +
                               std::to_string(file_offset_ + end_) + ": " + std::strerror(errno));
      return false;
    }
    end_ += n;
  }
  return true;
}

std::uint64_t event_file_reader::u64(std::uint64_t record_start) {
  if (!fill(8)) fail(record_start, "truncated record (file ends inside it)");
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(buf_[pos_ + i]);
  pos_ += 8;
  return v;
}

void event_file_reader::str(std::uint64_t record_start, std::string& out) {
  if (!fill(4)) fail(record_start, "truncated record (file ends inside it)");
  std::uint32_t n = 0;
  for (int i = 3; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(buf_[pos_ + i]);
  if (n > max_string_bytes)
    fail(record_start, "malformed record: string of " + std::to_string(n) + " bytes (more than " +
                           std::to_string(max_string_bytes) + ")");
  pos_ += 4;
  if (!fill(n)) fail(record_start, "truncated record (file ends inside it)");
  out.assign(buf_.data() + pos_, n);
  pos_ += n;
}

bool event_file_reader::next(event& out) {
  if (!fill(1)) return false;
  const std::uint64_t start = offset();
  const auto kind = static_cast<unsigned char>(buf_[pos_]);
  pos_ += 1;
  auto time = [this, start] {
    return timestamp{std::chrono::milliseconds{static_cast<std::int64_t>(u64(start))}};
  };
  switch (kind) {
    case 0: {
      if (out.index() != 0) out.emplace<person>();
      auto& p = std::get<person>(out);
      p.id = u64(start);
      str(start, p.name);
      str(start, p.email_address);
      str(start, p.credit_card);
      str(start, p.city);
      str(start, p.state);
      p.date_time = time();
      str(start, p.extra);
      break;
    }
    case 1: {
      if (out.index() != 1) out.emplace<auction>();
      auto& a = std::get<auction>(out);
      a.id = u64(start);
      str(start, a.item_name);
      str(start, a.description);
      a.initial_bid = u64(start);
      a.reserve = u64(start);
      a.date_time = time();
      a.expires = time();
      a.seller = u64(start);
      a.category = u64(start);
      str(start, a.extra);
      break;
    }
    case 2: {
      if (out.index() != 2) out.emplace<bid>();
      auto& b = std::get<bid>(out);
      b.auction = u64(start);
      b.bidder = u64(start);
      b.price = u64(start);
      str(start, b.channel);
      str(start, b.url);
      b.date_time = time();
      str(start, b.extra);
      break;
    }
    default:
      fail(start, "malformed record: kind byte " + std::to_string(kind) +
                      " (expected 0 person, 1 auction or 2 bid)");
  }
  ++events_;
  return true;
}

}  // namespace nexmark
