// enrichment_service — the HTTP enrichment service on loopback, as a program: the
// command line around rill::svc::enrichment_service (tests/support/enrichment_service.hpp).
//
//   enrichment_service [--port 0] [--latency 100] [--fault 5xx:0.1] [--fault drop:first=4]
//
// Prints "listening on http://127.0.0.1:PORT/enrich" on stdout once it accepts
// connections, then serves until SIGINT/SIGTERM. POST /enrich: JSON array of keys
// ("443/tcp", "10.0.0.1") -> array of values; GET /stats: what it saw (JSON).
#include <CLI/CLI.hpp>

#include <csignal>
#include <iostream>

#include "cli_checks.hpp"
#include "enrichment_service.hpp"

int main(int argc, char** argv) {
  CLI::App app{"rill enrichment service: POST /enrich, GET /stats"};
  rill::svc::service_options o;
  int latency_ms = 0;
  std::vector<std::string> faults;
  app.add_option("--address", o.address, "address to bind (default 127.0.0.1)");
  // Numeric options: rill_examples checks (the message names the value and the range).
  app.add_option("--port", o.port, "port (0 = ephemeral, printed)")
      ->check(rill_examples::whole_number(0, 65535, "0 = ephemeral"));
  app.add_option("--latency", latency_ms, "artificial latency per request, ms")
      ->check(rill_examples::whole_number(0, 3'600'000));
  app.add_option("--threads", o.threads, "server threads")->check(rill_examples::whole_number(1, 256));
  app.add_option("--services-file", o.services_file, "services(5) file (netbase)");
  app.add_option("--fault", faults,
                 "KIND:RATE or KIND:first=N, KIND in 5xx, drop, malformed, wrong_length, stall");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints help or the error
    return code == 0 ? 0 : 2;      // bad arguments: 2, as for --fault
  }
  o.latency = std::chrono::milliseconds{latency_ms};
  for (const auto& f : faults) {
    const auto colon = f.find(':');
    auto kind = rill::svc::parse_fault_kind(f.substr(0, colon));
    if (!kind || colon == std::string::npos) {
      std::cerr << "enrichment_service: --fault \"" << f << "\": expected KIND:RATE or KIND:first=N\n";
      return 2;
    }
    rill::svc::fault_rule r{*kind};
    const auto arg = f.substr(colon + 1);
    try {
      if (arg.rfind("first=", 0) == 0) {
        // a count of requests (whole_number): std::stoul took "-1" as 2^64 - 1
        std::string count_text = arg.substr(6);
        if (const auto why = rill_examples::whole_number(0, 1'000'000'000, "a count of requests")(count_text);
            !why.empty()) {
          std::cerr << "enrichment_service: --fault \"" << f << "\": first= " << why << '\n';
          return 2;
        }
        r.first = std::stoul(count_text);
      } else {
        // a rate is a fraction of the requests: 0..1 (1.5 or -1 used to be taken)
        std::string rate_text = arg;
        if (const auto why = rill_examples::number_in(0, 1, false, "a fraction of the requests")(rate_text);
            !why.empty()) {
          std::cerr << "enrichment_service: --fault \"" << f << "\": rate " << why << '\n';
          return 2;
        }
        r.rate = std::stod(arg);
      }
    } catch (const std::exception&) {
      std::cerr << "enrichment_service: --fault \"" << f << "\": bad number \"" << arg << "\"\n";
      return 2;
    }
    o.faults.push_back(r);
  }
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);  // server threads inherit the mask
  rill::svc::enrichment_service s{o};
  try {
    s.start();
  } catch (const std::exception& e) {
    std::cerr << "enrichment_service: " << e.what() << '\n';
    return 2;
  }
  std::cout << "listening on " << s.url() << std::endl;
  int sig = 0;
  sigwait(&set, &sig);
  std::cerr << "enrichment_service: stats " << s.stats().to_json().dump() << '\n';
  s.stop();
  return 0;
}
