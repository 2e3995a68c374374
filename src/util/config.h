// Every STRATA_* environment variable, read once into one Config object that is passed down.
// Tests build Configs directly, so two communicators in one process can run different settings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata {

struct Config {
  /// STRATA_TIMEOUT_MS: deadline of every wait, in milliseconds. Default 600000 (10 minutes).
  int64_t timeoutMs = 600000;
  /// STRATA_TRANSPORT: auto | shm | tcp | ucx. auto = shm between ranks of one host, STRATA_NET between
  /// hosts; tcp or ucx forces that transport everywhere (so every path is testable on one machine).
  /// Default auto.
  std::string transport = "auto";
  /// STRATA_NET: tcp | ucx, the transport between hosts when STRATA_TRANSPORT=auto. Default tcp.
  std::string net = "tcp";
  /// STRATA_TOPO_FILE: a topology JSON file (strata-topo --json writes one) used instead of discovery.
  std::string topoFile;
  /// STRATA_TUNE: model | probe. model = link figures from the topology; probe = measured at init.
  /// Default model.
  std::string tune = "model";
  /// STRATA_SOCKET_IFNAME: network interface whose address ranks advertise. Default: the interface
  /// that routes to the bootstrap root, else the first non-loopback one, else loopback.
  std::string socketIfname;
  /// STRATA_HOSTID: overrides host identity (hostname + boot id); ranks with equal ids share a host.
  std::string hostId;
  /// STRATA_ALGO: forced algorithms per collective, e.g. "allreduce:ring,allgather:ring". Default none.
  std::map<std::string, std::string> algo;
  /// STRATA_PIECE_BYTES: size of one transport message (a FIFO slot). Default 131072 (128 KiB).
  size_t pieceBytes = 128 * 1024;
  /// STRATA_NSLOTS: slots per connection direction; a connection buffers nslots * pieceBytes. Default 8.
  int nslots = 8;
  /// STRATA_NSOCKS: TCP sockets per peer connection. Default 2.
  int nsocks = 2;
  /// STRATA_SPIN_US: how long a wait spins before it yields (then, after 50 ms idle, sleeps). Ignored when
  /// ranks outnumber this host's cores: then waits yield at once. Default 5.
  int spinUs = 5;
  /// STRATA_GPU_DIRECT_BYTES: size of the CUDA IPC regions for device all-reduces between ranks of one host
  /// (peers' device buffers read by kernels): an all-reduce up to this size is one call, a larger one runs in
  /// two-shot rounds of this size. 0: no CUDA IPC, every device all-reduce is staged through host memory. Each
  /// rank allocates 4x this on its GPU at the first such call. Default 4 MiB.
  size_t gpuDirectMaxBytes = size_t{4} << 20;
  /// STRATA_GPU_ONESHOT_BYTES: up to this size a CUDA IPC all-reduce is one-shot (every rank reduces every
  /// input), above it two-shot (each reduces a slice, then all gather). Default 256 KiB.
  size_t gpuOneShotMaxBytes = size_t{256} << 10;
  /// STRATA_GPU_STAGE_CHUNK_BYTES: a device all-reduce staged through host memory that is larger than twice
  /// this runs in chunks of this size, so copies to and from the GPU overlap the transfer (0: one piece).
  /// Default 4 MiB.
  size_t gpuStageChunkBytes = size_t{4} << 20;

  /// Reads every variable from the environment; throws InvalidArgument naming a malformed one.
  static Config fromEnv();
  /// Bytes a connection direction can hold; plans keep each rank at most this far ahead of a peer.
  size_t connectionCapacity() const { return pieceBytes * static_cast<size_t>(nslots); }

  /// Name, current value and documentation of every variable (for strata-info and the README).
  struct Entry {
    std::string name, value, doc;
  };
  std::vector<Entry> describe() const;
};

/// Parses "coll:algo,coll:algo" into a map; throws InvalidArgument on a malformed item.
std::map<std::string, std::string> parseAlgoSpec(const std::string& spec);

}  // namespace strata
