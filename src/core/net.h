// Small network helpers shared by the launcher, the ranks and the tests.
#pragma once

#include <string>
#include <vector>

namespace motley {

/// The machine (or network namespace) this process runs on, as a rank tells where it is.
struct ThisHost {
  std::string hostname;                // gethostname()
  std::vector<std::string> addresses;  // every address of its interfaces, IPv4 and IPv6, as text
  /// "name (10.0.0.2, ...)": for messages; the loopback addresses left out.
  std::string Describe() const;
};

ThisHost FindThisHost();

/// The address of this host that traffic to `host` (a name or address) leaves from — the one its
/// peers reach it at; "" when `host` does not resolve or no route leads there.
std::string LocalAddressToward(const std::string& host);

/// Whether `host` (a cluster file's node host: a name or an address) is this host: it is its
/// hostname (or the hostname's first label), one of its addresses, or a name that resolves to one.
bool IsThisHost(const std::string& host, const ThisHost& me);

/// A TCP port on the loopback interface that nobody listens on now.
int FreeTcpPort();

}  // namespace motley
