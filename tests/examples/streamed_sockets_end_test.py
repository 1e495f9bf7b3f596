#!/usr/bin/env python3
"""streamed_sockets: how a generator's run ends.

1. The chain ends when the generator's answers are in before the processor has read its
   whole input.

   generator --out--> this test (holds the stream) --> processor --out--> this test (drain)
        ^                                                  |
        +------------------ answers (--back) --------------+

   The generator sends 8 MiB at full speed with one real request (--real-rate 1: only
   the first record is real), then closes. This test reads all of it, hands the processor
   the hello and the real request only, and waits until the generator has exited or 2 s
   passed. Then it sends the rest in two parts 0.3 s apart and closes. The drain reads
   64 KiB every 2 ms, so the processor's output backs up and it pauses its input now and
   then (the pause is when its loop sees the answer connection's state).

   The processor has its answer by then. A generator that left at that point made the
   processor see its answer connection lost while input was still coming. The processor
   held that input for a reconnect that never came, and neither it nor the chain behind it
   ever ended. Expected, from the roles' contract (the generator ends after the processor
   closed the answer connection):
     - both exit 0 within 20 s of the last byte;
     - the generator reports 1 real request, answered;
     - the drain receives the processor's hello and every record, unchanged;
     - the generator was still running when the 2 s wait ended.

2. A chain that does not read: the generator's output goes to a socket this test never
   reads, its answer connection is this test's. With --stall-timeout 1 and 64 MiB (far
   more than the socket buffers hold) it ends within 10 s with exit status 1, saying that
   no record left for 1 s, and how many did.

3. Answers that never come: this test reads the whole output (8 MiB, one real request)
   and keeps the answer connection open without answering. With --stall-timeout 1 the
   generator ends within 10 s of its last record with exit status 1, saying that 1 of 1
   real requests is unanswered and that the processor has not closed the answer
   connection.

4. A slow rate is not a stall: 3 records at 10 B/s (one every 3.2 s) with --stall-timeout
   1, read and answered by this test: exit status 0 after about 6.4 s.

usage: streamed_sockets_end_test.py STREAMED_SOCKETS
"""
import socket
import subprocess
import sys
import threading
import time

RECORD = 32
HELLO = 16  # rill::tcp_hello: "RILLSEQ1" + first sequence number
RECORDS = 262144


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listener():
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    s.settimeout(20)
    return s, s.getsockname()[1]


def read_all(conn):
    chunks = []
    while True:
        b = conn.recv(1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def connect_retrying(port, seconds=10):
    end = time.monotonic() + seconds
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=20)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.02)


def generator_alone(binary, out_port, back_port, nbytes, extra, rate="0"):
    return subprocess.Popen(
        [binary, "--role", "generator", "--out", f"connect:127.0.0.1:{out_port}",
         "--back", f"listen:127.0.0.1:{back_port}", "--bytes", str(nbytes), "--rate", rate]
        + extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ends_within(p, seconds, name):
    try:
        p.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        p.kill()
    out, err = p.communicate()
    print(f"--- {name} (exit {p.returncode})\n{out}{err}", file=sys.stderr)
    return p.returncode, out, err


def chain_that_does_not_read(binary):
    sink, sink_port = listener()  # never accepted, never read
    back = free_port()
    g = generator_alone(binary, sink_port, back, 64 << 20, ["--stall-timeout", "1"])
    answers = connect_retrying(back)  # so that the generator starts at once
    rc, out, err = ends_within(g, 10, "generator, chain not reading")
    answers.close()
    sink.close()
    check(rc == 1, f"stalled generator: exit status {rc}, expected 1")
    check("generator: no record left for 1 s (" in err and "the indexer does not read" in err,
          "stalled generator: no message naming the stall")


def answers_that_never_come(binary):
    into_test, into_port = listener()
    back = free_port()
    g = generator_alone(binary, into_port, back, RECORDS * RECORD,
                        ["--real-rate", "1", "--stall-timeout", "1"])
    answers = connect_retrying(back)
    conn, _ = into_test.accept()
    conn.settimeout(60)
    stream = read_all(conn)
    sent_all = time.monotonic()
    rc, out, err = ends_within(g, 10, "generator, no answers")
    waited = time.monotonic() - sent_all
    conn.close()
    answers.close()
    into_test.close()
    check(len(stream) == HELLO + RECORDS * RECORD, f"no-answers run sent {len(stream)} bytes")
    check(rc == 1, f"unanswered generator: exit status {rc}, expected 1")
    check("1 of 1 real requests are unanswered and the processor has not closed the answer "
          "connection" in err, "unanswered generator: no message naming what is missing")
    check("real requests 1, answered 0" in out, "unanswered generator's answer line: " + out)
    check(waited < 10, f"unanswered generator took {waited:.1f} s after its last record")


def slow_rate_is_not_a_stall(binary):
    into_test, into_port = listener()
    back = free_port()
    start = time.monotonic()
    g = generator_alone(binary, into_port, back, 3 * RECORD,
                        ["--real-rate", "1", "--stall-timeout", "1"], rate="0.00000001")
    answers = connect_retrying(back)
    answers.sendall(b"RILLSEQ1" + (0).to_bytes(8, "little"))  # the hello of a rill sink
    conn, _ = into_test.accept()
    conn.settimeout(60)
    stream = read_all(conn)
    conn.close()
    try:
        for i in range((len(stream) - HELLO) // RECORD):  # answer the real requests, then end
            r = stream[HELLO + i * RECORD:HELLO + (i + 1) * RECORD]
            if r[8] == 1:
                answers.sendall(r)
        answers.shutdown(socket.SHUT_WR)
    except OSError as e:
        check(False, f"slow-rate generator closed its answer connection early: {e}")
    rc, out, err = ends_within(g, 30, "generator, slow rate")
    took = time.monotonic() - start
    answers.close()
    into_test.close()
    check(len(stream) == HELLO + 3 * RECORD, f"slow-rate run sent {len(stream)} bytes")
    check(rc == 0, f"slow-rate generator: exit status {rc}, expected 0")
    check("no record left" not in err, "slow-rate generator taken for a stall")
    check(took >= 5, f"slow-rate run took {took:.1f} s, expected >= 5 (3 records at 10 B/s)")


def held_input_after_the_answer(binary):
    into_test, into_port = listener()   # the generator's --out
    drain, drain_port = listener()      # the processor's --out
    processor_in, generator_back = free_port(), free_port()
    drained = {}

    def drain_all():  # slowly: the processor's output backs up, so it pauses its input
        conn, _ = drain.accept()
        conn.settimeout(60)
        chunks = []
        while b := conn.recv(64 << 10):
            chunks.append(b)
            time.sleep(0.002)
        drained["bytes"] = b"".join(chunks)
        conn.close()

    drainer = threading.Thread(target=drain_all, daemon=True)
    drainer.start()
    processor = subprocess.Popen(
        [binary, "--role", "processor", "--in", f"listen:127.0.0.1:{processor_in}",
         "--out", f"connect:127.0.0.1:{drain_port}",
         "--back", f"connect:127.0.0.1:{generator_back}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    generator = generator_alone(binary, into_port, generator_back, RECORDS * RECORD,
                                ["--real-rate", "1"])
    try:
        conn, _ = into_test.accept()
        conn.settimeout(60)
        stream = read_all(conn)  # the generator closes once everything is sent
        conn.close()
        check(len(stream) == HELLO + RECORDS * RECORD,
              f"the generator sent {len(stream)} bytes, expected {HELLO + RECORDS * RECORD}")
        real = [i for i in range(RECORDS) if stream[HELLO + i * RECORD + 8] == 1]
        check(real == [0], f"real requests at records {real[:5]}, expected only record 0")
        head = HELLO + RECORD  # the hello and the real request
        out = socket.create_connection(("127.0.0.1", processor_in), timeout=20)
        out.sendall(stream[:head])
        try:
            generator.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
        check(generator.poll() is None,
              "the generator exited before the processor closed the answer connection")
        half = head + (len(stream) - head) // 2 // RECORD * RECORD
        out.sendall(stream[head:half])
        time.sleep(0.3)
        out.sendall(stream[half:])
        out.shutdown(socket.SHUT_WR)
        try:
            p_rc = processor.wait(timeout=20)
            g_rc = generator.wait(timeout=20)
        except subprocess.TimeoutExpired:
            check(False, "a role did not end within 20 s of the last byte "
                  f"(processor {processor.poll()}, generator {generator.poll()})")
            p_rc, g_rc = processor.poll(), generator.poll()
        out.close()
        check(p_rc == 0, f"processor exit status {p_rc}")
        check(g_rc == 0, f"generator exit status {g_rc}")
        drainer.join(timeout=20)
        got = drained.get("bytes", b"")
        check(got[HELLO:] == stream[HELLO:],
              f"the drain got {len(got)} bytes, not the processor's hello and every record")
        check(got[:8] == b"RILLSEQ1", "the drain's stream does not start with a hello")
    finally:
        for p in (processor, generator):
            if p.poll() is None:
                p.kill()
            o, e = p.communicate()
            print(f"--- {p.args[2]} (exit {p.returncode})\n{o}{e}", file=sys.stderr)
            if p is generator:
                check("real requests 1, answered 1" in o, "the generator's answer line: " + o)


def main():
    binary = sys.argv[1]
    held_input_after_the_answer(binary)
    chain_that_does_not_read(binary)
    answers_that_never_come(binary)
    slow_rate_is_not_a_stall(binary)
    if failures:
        sys.exit(1)
    print("ok: the chain ended, every record reached the drain; a stalled and an unanswered "
          "run each ended with exit status 1 and a message; a slow rate ran to its end")


if __name__ == "__main__":
    main()
