#!/usr/bin/env python3
"""Writes the small hand-made seed inputs of the fuzz targets into fuzz/corpus/<target>/.

Each seed is built here from the formats' definitions (pcap: libpcap's file format;
pcapng: the IETF draft-ietf-opsawg-pcapng; Ethernet/IPv4/IPv6/UDP/TCP/ICMP headers;
netflow's 64-byte Kafka value, examples/netflow/packet_codec.hpp), so the corpus holds
no copy of a capture. Run again after changing a format; the files are committed.
"""
import os
import struct
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def ipv4(src, dst, proto, payload, frag=0):
    hdr = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 1, frag, 64, proto, 0, bytes(src), bytes(dst))
    return hdr + payload


def ipv6(src, dst, nh, payload):
    return struct.pack("!IHBB16s16s", 0x60000000, len(payload), nh, 64, bytes(src), bytes(dst)) + payload


def udp(sp, dp, body=b"abcd"):
    return struct.pack("!HHHH", sp, dp, 8 + len(body), 0) + body


def tcp(sp, dp):
    return struct.pack("!HHIIBBHHH", sp, dp, 1, 0, 0x50, 0x02, 1024, 0, 0)


def eth(ethertype, payload):
    return b"\x00\x11\x22\x33\x44\x55" + b"\x66\x77\x88\x99\xaa\xbb" + struct.pack("!H", ethertype) + payload


def vlan(vid, ethertype, payload):
    return struct.pack("!HH", vid, ethertype) + payload


a4, b4 = [192, 168, 1, 10], [10, 0, 0, 2]
a6 = [0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [1]
b6 = [0x20, 0x01, 0x0d, 0xb8] + [0] * 11 + [2]
frames = {
    "eth_ipv4_udp": eth(0x0800, ipv4(a4, b4, 17, udp(5000, 53))),
    "eth_ipv4_tcp": eth(0x0800, ipv4(a4, b4, 6, tcp(40000, 80))),
    "eth_ipv4_icmp": eth(0x0800, ipv4(a4, b4, 1, b"\x08\x00\x00\x00\x00\x01\x00\x01")),
    "eth_ipv4_fragment": eth(0x0800, ipv4(a4, b4, 17, b"12345678", frag=0x0001)),
    "eth_vlan_ipv6_udp": b"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\x81\x00"
    + vlan(100, 0x86DD, ipv6(a6, b6, 17, udp(1000, 2000))),
    "eth_ipv6_hbh_tcp": eth(0x86DD, ipv6(a6, b6, 0, bytes([6, 0, 1, 4, 0, 0, 0, 0]) + tcp(1, 2))),
    "eth_arp": eth(0x0806, b"\x00\x01\x08\x00\x06\x04\x00\x01" + bytes(20)),
}
# fuzz_packet_decode: byte 0 = link type index (0 = Ethernet, 1 = raw IP ...), 2 bytes of
# extra wire length, then the frame.
for name, f in frames.items():
    put("packet_decode", name, b"\x00\x00\x00" + f)
put("packet_decode", "raw_ipv4_udp", b"\x01\x00\x00" + ipv4(a4, b4, 17, udp(5000, 53)))
put("packet_decode", "sll_ipv4_tcp", b"\x03\x00\x00" + struct.pack("!HHH8sH", 0, 1, 6, bytes(8), 0x0800)
    + ipv4(a4, b4, 6, tcp(1, 2)))


def pcap(recs, nano=False, linktype=1):
    out = struct.pack("<IHHiIII", 0xA1B23C4D if nano else 0xA1B2C3D4, 2, 4, 0, 0, 262144, linktype)
    for sec, frac, data, orig in recs:
        out += struct.pack("<IIII", sec, frac, len(data), orig) + data
    return out


def block(btype, body):
    body += bytes((4 - len(body) % 4) % 4)
    n = 12 + len(body)
    return struct.pack("<II", btype, n) + body + struct.pack("<I", n)


def pcapng(epbs, tsresol=None):
    shb = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    opts = b"" if tsresol is None else struct.pack("<HHB3x", 9, 1, tsresol) + struct.pack("<I", 0)
    idb = block(1, struct.pack("<HHI", 1, 0, 262144) + opts)
    out = shb + idb
    for ts, data in epbs:
        out += block(6, struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, len(data), len(data)) + data)
    return out


f1, f2 = frames["eth_ipv4_udp"], frames["eth_ipv4_tcp"]
put("pcap_file", "classic_us", pcap([(1700000000, 1, f1, len(f1)), (1700000001, 999999, f2, len(f2))]))
put("pcap_file", "classic_ns", pcap([(1700000000, 999999999, f1, len(f1))], nano=True))
put("pcap_file", "classic_truncated_record", pcap([(1700000000, 1, f1, 1514)])[:-10])
# A fraction field over 1 s and one read as negative (sign-extended): both readers carry it.
put("pcap_file", "classic_odd_fraction", pcap([(1700000000, 0x9A000000, f1, len(f1)), (1700000000, 2000000, f2, len(f2))]))
put("pcap_file", "pcapng_us", pcapng([(1700000000123456, f1), (1700000000123457, f2)]))
put("pcap_file", "pcapng_ns", pcapng([(1700000000123456789, f1)], tsresol=9))
put("pcap_file", "pcapng_pow2", pcapng([(1700000000 * 1024 + 512, f1)], tsresol=0x8A))


def value(time_ns=1704067200 * 10**9, wire=60, cap=60, proto=1, version=4, flags=16 | 32,
          ap=5000, bp=53, a=(10, 0, 0, 1), b=(10, 0, 0, 2)):
    return (struct.pack("<qIIBBBxHHHH", time_ns, wire, cap, proto, version, flags, ap, bp, 0, 0)
            + bytes(a) + bytes(16 - len(a)) + bytes(b) + bytes(16 - len(b)) + b"RP1\x00")


put("packet_codec", "udp", value())
put("packet_codec", "tcp_v6", value(proto=0, version=6, a=a6, b=b6))
put("packet_codec", "icmp", value(proto=2, flags=0, ap=0, bp=0))
put("packet_codec", "non_ip", value(proto=5, version=0, flags=0, ap=0, bp=0, a=(), b=()))

# fuzz_framing: byte 0 bit 0 = fixed, byte 1 = chunking seed, then record bytes.
put("framing", "length_prefixed", b"\x00\x05" + bytes([3]) + b"abc" + bytes([0]) + bytes([10]) + b"0123456789")
put("framing", "fixed8", b"\x0f\x01" + b"01234567" * 3)
put("framing", "bad_length", b"\x00\x02" + b"\xff\xff\xff\xff" + b"xyz")

for name, text in {"seconds": "10s", "millis": "500ms", "bare": "3", "minutes": "2m", "spaces": " 7 h ",
                   "too_big": "999999999999999999h", "workers": "4096", "negative": "-1"}.items():
    put("cli_parsers", name, text.encode())

if __name__ == "__main__":
    print(f"seeds written under {root}", file=sys.stderr)
