// Every STRATA_* environment variable, read once into one Config object that is passed down.
// Tests build Configs directly, so two communicators in one process can run different settings.
// Each variable is declared once, in the table of util/config_table.h (rows in config.cc): its name, default,
// accepted values and one-line doc. Config() sets every field to the default declared there, fromEnv() parses
// the environment with it and describe() lists it. The comments below say what each field means.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace strata {

struct Config {
  /// Every field at the default its table row declares.
  Config();

  /// STRATA_TIMEOUT_MS: deadline of every wait, in milliseconds.
  int64_t timeoutMs;
  /// STRATA_TRANSPORT: auto | shm | tcp | ucx. auto = shm between ranks of one host, STRATA_NET between
  /// hosts; tcp or ucx forces that transport everywhere (so every path is testable on one machine).
  std::string transport;
  /// STRATA_NET: tcp | ucx, the transport between hosts when STRATA_TRANSPORT=auto.
  std::string net;
  /// STRATA_TOPO_FILE: a topology JSON file (strata-topo --json writes one) used instead of discovery.
  std::string topoFile;
  /// STRATA_TUNE: model | probe. model = link figures from the topology; probe = measured at init.
  std::string tune;
  /// STRATA_SOCKET_IFNAME: network interface whose address ranks advertise. Unset: the interface that
  /// routes to the bootstrap root, else the first non-loopback one, else loopback.
  std::string socketIfname;
  /// STRATA_HOSTID: overrides host identity (hostname + boot id); ranks with equal ids share a host.
  std::string hostId;
  /// STRATA_ALGO: forced algorithms per collective, e.g. "allreduce:ring,allgather:ring". Unset: none.
  std::map<std::string, std::string> algo;
  /// STRATA_PLANS: algorithm files (MSCCL's XML, Strata's plan files) or folders of them, comma-separated.
  std::string plans;
  /// STRATA_PIECE_BYTES: size of one transport message (a FIFO slot).
  size_t pieceBytes;
  /// STRATA_NSLOTS: slots per connection direction; a connection buffers nslots * pieceBytes.
  int nslots;
  /// STRATA_SHM_SINGLE_COPY: auto | off. auto = between processes of one host that may read each other's memory
  /// (process_vm_readv; probed at connection set-up, both ranks must agree), a large piece that a plan sends
  /// unchanged travels as a reference to the sender's buffer, which the receiver reads straight into its
  /// destination: one copy instead of two. off = every piece goes through the FIFO.
  std::string shmSingleCopy;
  /// STRATA_SHM_SINGLE_COPY_BYTES: smallest piece sent as a reference (pieces are at most STRATA_PIECE_BYTES).
  size_t shmSingleCopyBytes;
  /// STRATA_NSOCKS: TCP sockets per peer connection.
  int nsocks;
  /// STRATA_SPIN_US: how long a wait spins before it yields (then, after 50 ms idle, sleeps). Ignored when
  /// ranks outnumber this host's cores: then waits yield at once.
  int spinUs;
  /// STRATA_GPU_DIRECT_BYTES: size of the CUDA IPC regions for device all-reduces between ranks of one host
  /// (peers' device buffers read by kernels): an all-reduce up to this size is one call, a larger one runs in
  /// two-shot rounds of this size. 0: no CUDA IPC, every device all-reduce is staged through host memory. Each
  /// rank allocates 4x this on its GPU at the first such call.
  size_t gpuDirectMaxBytes;
  /// STRATA_GPU_ONESHOT_BYTES: up to this size a CUDA IPC all-reduce is one-shot (every rank reduces every
  /// input), above it two-shot (each reduces a slice, then all gather).
  size_t gpuOneShotMaxBytes;
  /// STRATA_GPU_STAGE_CHUNK_BYTES: a device all-reduce staged through host memory that is larger than twice
  /// this runs in chunks of this size, so copies to and from the GPU overlap the transfer (0: one piece).
  size_t gpuStageChunkBytes;
  /// STRATA_GPU_EXECUTOR: 1 runs device collectives between ranks of one host in the device executor (one kernel
  /// per call over CUDA IPC FIFOs, src/device/); 0 (default, until it has run on a GPU): the direct and staged paths.
  size_t gpuExecutor;
  /// STRATA_GPU_CHANNELS: the most channels of a device executor call (ring, chain and pairwise plans run as that
  /// many copies of themselves on parts of the data, each a thread block with FIFOs of its own per peer); a call
  /// takes one per 64 KiB of its size up to this.
  size_t gpuChannels;
  /// STRATA_GPU_LL128: auto | on | off: whether the device executor carries mid-sized ops (over LL's 16 KiB, up to
  /// 512 KiB) in the LL128 protocol; auto: where every GPU pair of each host has NVLink (allGpusOnNvlink).
  std::string gpuLL128;
  /// STRATA_GPU_PROTO: auto | simple | ll | ll128: auto chooses the executor's protocol per op by its size (LL up to
  /// 16 KiB, LL128 up to 512 KiB where STRATA_GPU_LL128 allows, Simple above); the others force one for every op
  /// (ll: up to a piece, 128 KiB, Simple above), to measure where they cross (perf/gpu_check.sh), as NCCL_PROTO.
  std::string gpuProto;
  /// STRATA_FLIGHT_RECORDER_ENTRIES: operations each communicator's flight recorder keeps (0: none).
  int flightRecorderEntries = 2000;
  /// STRATA_FLIGHT_RECORDER_DIR: where the flight recorder's dumps are written on a timeout, a failure, an
  /// abort or SIGUSR1 (empty: only strataCommDumpFlightRecorder with a directory writes one).
  std::string flightRecorderDir;

  /// Reads every variable from the environment; throws InvalidArgument naming a malformed one.
  static Config fromEnv();
  /// Bytes a connection direction can hold; plans keep each rank at most this far ahead of a peer.
  size_t connectionCapacity() const { return pieceBytes * static_cast<size_t>(nslots); }

  /// Name, current value and documentation of every variable, in table order (those read by other modules
  /// with an empty value). No tool prints it yet (tests/unit/test_config.cc checks it); the README's table of
  /// variables is written by hand.
  struct Entry {
    std::string name, value, doc;
  };
  std::vector<Entry> describe() const;
};

/// Parses "coll:algo,coll:algo" into a map; throws InvalidArgument on a malformed item.
std::map<std::string, std::string> parseAlgoSpec(const std::string& spec);

}  // namespace strata
