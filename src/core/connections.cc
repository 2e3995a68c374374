#include "core/connections.h"

#include <sched.h>
#include <time.h>

#include "bootstrap/peer_exchange.h"
#include "util/config.h"
#include "util/error.h"
#include "util/log.h"

namespace strata {
namespace {

constexpr uint32_t kConnSetupTag = 0x53540001;  // "ST" + 1: transport connection setup

int64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace

const std::map<std::string, TransportFactory>& transportFactories() {
  static const std::map<std::string, TransportFactory> factories = {
      {"shm", connectShm},
      {"tcp", connectTcp},
      {"ucx", connectUcx},
  };
  return factories;
}

ConnectionTable::ConnectionTable(int rank, const Config& config, PeerExchange& exchange, std::vector<bool> sameHost)
    : rank_(rank), config_(config), exchange_(exchange), sameHost_(std::move(sameHost)), conns_(sameHost_.size()) {}

std::string ConnectionTable::transportFor(int peer) const {
  // STRATA_TRANSPORT=auto or shm: peers on this host use shm and peers on other hosts STRATA_NET; any other
  // choice (tcp, ucx: the config table lists them) is that transport for every peer.
  if (config_.transport != "auto" && config_.transport != "shm") return config_.transport;
  return sameHost_[static_cast<size_t>(peer)] ? "shm" : config_.net;
}

void ConnectionTable::ensure(const std::vector<int>& links) {
  // Ascending links on every rank (channel-major, then peer) are consistent with one global order of the
  // connections (channel, min rank, max rank), so blocking pairwise set-ups cannot wait on each other in a cycle.
  const size_t nranks = sameHost_.size();
  for (int link : links) {
    const size_t at = static_cast<size_t>(link);
    if (at >= conns_.size()) conns_.resize((at / nranks + 1) * nranks);
    auto& conn = conns_[at];
    if (conn) continue;
    const int p = static_cast<int>(at % nranks), channel = static_cast<int>(at / nranks);
    const std::string kind = transportFor(p);
    STRATA_INFO(kLogNet, "rank %d: connecting to rank %d over %s%s", rank_, p, kind.c_str(),
                channel ? strprintf(" (channel %d)", channel).c_str() : "");
    auto factory = transportFactories().find(kind);
    if (factory == transportFactories().end())
      throw InternalError(strprintf("rank %d: no transport named '%s' for rank %d", rank_, kind.c_str(), p));
    // Each channel's set-up has its own tag, so the set-ups of two connections between one pair never mix.
    conn = factory->second(exchange_, config_, p, kConnSetupTag + 0x100u * static_cast<uint32_t>(channel));
  }
}

bool ConnectionTable::connectRequested(int peer) const {
  // Every transport's set-up starts with a message of the set-up tag from each side (transport.h).
  return exchange_.hasMessage(peer, kConnSetupTag);
}

bool ConnectionTable::progressAll() {
  bool moved = false;
  for (auto& c : conns_)
    if (c) moved |= c->progress();
  return moved;
}

bool ConnectionTable::addPollFds(const std::vector<int>& peers, std::vector<pollfd>& fds) const {
  for (int p : peers) {
    bool any = false;
    for (int ch = 0; ch < channels(); ++ch) {
      Connection* c = get(p, ch);
      if (!c) continue;
      if (!c->addPollFds(fds)) return false;
      any = true;
    }
    if (!any) return false;
  }
  // Bytes other links still have queued must keep moving too (see Progress::drive).
  for (auto& c : conns_)
    if (c && !c->flushed() && !c->addPollFds(fds)) return false;
  return true;
}

void ConnectionTable::closeAll(int64_t deadlineNs) {
  for (auto& c : conns_) {
    if (!c) continue;
    try {
      while (!c->flushed() && monotonicNs() < deadlineNs) {
        if (!c->progress()) sched_yield();
      }
    } catch (const Error&) {
      // The peer is gone; nothing left to deliver.
    }
  }
  conns_.clear();
}

std::string FlushWait::describeStall() const {
  std::string out;
  for (int p : stalledPeers()) out += strprintf("%ssends to rank %d not yet delivered", out.empty() ? "" : "; ", p);
  return out;
}

std::vector<int> FlushWait::stalledPeers() const {
  std::vector<int> peers;
  for (int p = 0; p < nranks_; ++p) {
    for (int ch = 0; ch < conns_.channels(); ++ch) {
      Connection* c = conns_.get(p, ch);
      if (c && !c->flushed()) {
        peers.push_back(p);
        break;
      }
    }
  }
  return peers;
}

}  // namespace strata
