#include "core/net.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace motley {

int FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

namespace {

std::string AddressText(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, text, sizeof text);
  else if (a->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, text, sizeof text);
  return text;
}

bool Loopback(const std::string& address) { return address.starts_with("127.") || address == "::1"; }

}  // namespace

std::string ThisHost::Describe() const {
  std::vector<std::string> shown;
  for (const std::string& a : addresses)
    if (!Loopback(a) && !a.starts_with("fe80:")) shown.push_back(a);
  return shown.empty() ? hostname : fmt::format("{} ({})", hostname, fmt::join(shown, ", "));
}

ThisHost FindThisHost() {
  ThisHost me;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) me.hostname = name;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i != nullptr; i = i->ifa_next)
      if (i->ifa_addr != nullptr &&
          (i->ifa_addr->sa_family == AF_INET || i->ifa_addr->sa_family == AF_INET6)) {
        const std::string a = AddressText(i->ifa_addr);
        if (!a.empty() && std::find(me.addresses.begin(), me.addresses.end(), a) == me.addresses.end())
          me.addresses.push_back(a);
      }
    ::freeifaddrs(list);
  }
  return me;
}

std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return "";
  std::string out;
  for (addrinfo* a = found; a != nullptr && out.empty(); a = a->ai_next) {
    // A UDP socket "connected" to the host sends nothing, but the kernel picks its route and source.
    const int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0)
      out = AddressText(reinterpret_cast<const sockaddr*>(&local));
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return out;
}

bool IsThisHost(const std::string& host, const ThisHost& me) {
  if (host.empty()) return false;
  const auto mine = [&](const std::string& a) {
    return std::find(me.addresses.begin(), me.addresses.end(), a) != me.addresses.end();
  };
  if (host == me.hostname || host == me.hostname.substr(0, me.hostname.find('.')) || mine(host)) return true;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool match = false;
  for (addrinfo* a = found; a != nullptr && !match; a = a->ai_next) {
    const std::string text = AddressText(a->ai_addr);
    // A name that resolves to loopback ("localhost") is every host: only an exact address counts.
    match = mine(text) && !Loopback(text);
  }
  ::freeaddrinfo(found);
  return match;
}

}  // namespace motley
