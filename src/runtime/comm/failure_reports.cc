#include "runtime/comm/failure_reports.h"

#include <chrono>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

namespace motley {

Status ReportFailuresOf(const std::string& master_addr, int master_port, const std::vector<int>& ranks,
                        const std::string& why, double timeout_s) {
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(master_port);
    o.isServer = false;
    o.waitWorkers = false;
    o.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    c10d::TCPStore store(master_addr, o);
    for (int rank : ranks) {
      const std::string text = FailureText(rank, why);
      const int64_t n = store.add(FailuresKey(), 1);
      store.set(FailureKey(n), std::vector<uint8_t>(text.begin(), text.end()));
    }
    return Status::Ok();
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("could not report ranks' failure in the rendezvous store at {}:{}: {}",
                                       master_addr, master_port, e.what()));
  }
}

struct StoreServer::Impl {
  c10::intrusive_ptr<c10d::TCPStore> store;
};

Result<std::unique_ptr<StoreServer>> StoreServer::Start(int port) {
  std::unique_ptr<StoreServer> out(new StoreServer());
  try {
    c10d::TCPStoreOptions o;
    o.port = static_cast<uint16_t>(port);
    o.isServer = true;
    o.waitWorkers = false;
    out->impl_ = std::make_unique<Impl>();
    out->impl_->store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", o);
    out->port_ = out->impl_->store->getPort();
  } catch (const std::exception& e) {
    return Status::IoError(fmt::format("cannot host the rendezvous store on port {}: {}", port, e.what()));
  }
  return out;
}

StoreServer::~StoreServer() = default;

}  // namespace motley
