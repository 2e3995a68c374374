// Strata: a topology-aware collective communication library.
// C ABI. Types, values and argument orders follow NCCL's so that an NCCL shim is a rename.
//
// Conventions shared by the functions below; each function's comment names its own cases:
// - Results: a function returns strataSuccess or an error code, and an error records a message naming the rank,
//   the operation and the values involved, which strataGetLastError returns (STRATA_DEBUG=WARN also logs it).
// - Live handles: a strataComm_t is live from its creation until strataCommDestroy or strataCommAbort. A call on a
//   handle that is not live (NULL, destroyed, never created), or on one this process inherited through fork(),
//   returns strataInvalidUsage and touches nothing (strataCommDestroy and strataCommAbort of an inherited handle
//   only release it).
// - Failure: once a communicator has failed (an error while running one of its calls, other than
//   strataInvalidArgument; a timeout; a peer's death or failure heard through the bootstrap; strataCommRevoke),
//   every later collective, send/recv and split on it fails with the code of that first failure. Queries,
//   strataCommShrink, strataCommRevoke, destroy and abort still work.
// - Host and device buffers: with stream NULL and host buffers a call blocks until its result is in place and its
//   messages have left the process. With a CUDA stream, or device buffers and stream NULL (the legacy default
//   stream), it is enqueued on the stream and returns at once, as in NCCL; errors found later are asynchronous
//   (strataCommGetAsyncError). Without a usable CUDA driver and device such a call returns strataUnhandledCudaError.
// - Counts are in elements of the datatype, not bytes. A buffer may be NULL where the call reads or writes no
//   element of it (count 0, sendbuff of a non-root broadcast rank, recvbuff of a non-root reduce rank).
// - Threads: any thread may call any function. Calls on one communicator run one at a time, in the order they
//   reach it; the ranks must still issue the same collectives in the same order, which calls from several threads
//   on one communicator do not ensure unless the program orders them. Groups and the last error are per thread.
#ifndef STRATA_STRATA_H_
#define STRATA_STRATA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Major version of this header (the "0" of 0.1.0).
#define STRATA_MAJOR 0
/// Minor version of this header.
#define STRATA_MINOR 1
/// Patch version of this header.
#define STRATA_PATCH 0
/// Version as one integer: major * 10000 + minor * 100 + patch (NCCL's scheme). strataGetVersion returns the
/// loaded library's, which may differ from this header's.
#define STRATA_VERSION_CODE (STRATA_MAJOR * 10000 + STRATA_MINOR * 100 + STRATA_PATCH)

/// Size in bytes of a strataUniqueId (NCCL_UNIQUE_ID_BYTES).
#define STRATA_UNIQUE_ID_BYTES 128
/// Opaque rendezvous token: the root's address and a random secret. Made by strataGetUniqueId on one rank
/// and handed to every other rank out of band (MPI_Bcast, a file, an environment variable). It makes one
/// communicator: once that communicator is destroyed, the id is refused.
typedef struct {
  char internal[STRATA_UNIQUE_ID_BYTES];  ///< Encoded address, nonce and secret; copy it as bytes, do not interpret.
} strataUniqueId;

/// Handle of a communicator: this rank's membership in a group of ranks. Made by strataCommInitRank,
/// strataCommInitFromEnv, strataCommSplit or strataCommShrink; ended by strataCommDestroy or strataCommAbort.
typedef struct strataComm* strataComm_t;
/// A CUDA stream (cudaStream_t) for device buffers; NULL for host buffers.
typedef void* strataStream_t;

/// What a call returned (NCCL's ncclResult_t values).
typedef enum {
  strataSuccess = 0,             ///< The call succeeded.
  strataUnhandledCudaError = 1,  ///< CUDA cannot be used (no driver, device or CUDA build) or a CUDA call failed.
  strataSystemError = 2,         ///< A system call failed (sockets, shared memory, files) or memory ran out.
  strataInternalError = 3,       ///< An unexpected error inside Strata: a bug, please report it.
  strataInvalidArgument = 4,     ///< An argument is wrong: a NULL pointer, a datatype, op, root, peer, count or flag.
  strataInvalidUsage = 5,        ///< Not allowed now: a dead handle, a misused group, ranks calling different things.
  strataRemoteError = 6,         ///< Another rank died or failed, or the connection to it broke.
  strataInProgress = 7,          ///< Asynchronous work is still running (strataWorkWait); not an error.
  strataTimeout = 8,             ///< A wait passed its deadline (STRATA_TIMEOUT_MS).
  strataNumResults = 9           ///< The number of result codes; not a result.
} strataResult_t;

/// Element types (NCCL's ncclDataType_t values, aliases included).
typedef enum {
  strataInt8 = 0,         ///< int8_t.
  strataChar = 0,         ///< Same as strataInt8.
  strataUint8 = 1,        ///< uint8_t.
  strataInt32 = 2,        ///< int32_t.
  strataInt = 2,          ///< Same as strataInt32.
  strataUint32 = 3,       ///< uint32_t.
  strataInt64 = 4,        ///< int64_t.
  strataUint64 = 5,       ///< uint64_t.
  strataFloat16 = 6,      ///< IEEE 754 half precision.
  strataHalf = 6,         ///< Same as strataFloat16.
  strataFloat32 = 7,      ///< float.
  strataFloat = 7,        ///< Same as strataFloat32.
  strataFloat64 = 8,      ///< double.
  strataDouble = 8,       ///< Same as strataFloat64.
  strataBfloat16 = 9,     ///< bfloat16 (the upper half of a float32).
  strataFloat8e4m3 = 10,  ///< 8-bit float, 4 exponent and 3 mantissa bits (FP8 E4M3).
  strataFloat8e5m2 = 11,  ///< 8-bit float, 5 exponent and 2 mantissa bits (FP8 E5M2).
  strataNumTypes = 12     ///< The number of types; not a type.
} strataDataType_t;

/// Reduction operators (NCCL's ncclRedOp_t values).
typedef enum {
  strataSum = 0,   ///< Element-wise sum.
  strataProd = 1,  ///< Element-wise product.
  strataMax = 2,   ///< Element-wise maximum.
  strataMin = 3,   ///< Element-wise minimum.
  /// Sum divided by the number of ranks. Floating types pre-multiply each input by 1/nranks (into a private
  /// copy: sendbuff is not modified); integer types sum, then divide, truncating.
  strataAvg = 4,
  /// The number of built-in operators. Operators made by strataRedOpCreatePreMulSum take values from here up.
  strataNumOps = 5,
  /// The largest value an operator may take (keeps the type 32 bits wide, as NCCL's ncclMaxRedOp).
  strataMaxRedOp = 0x7fffffff
} strataRedOp_t;

/// Where the scalar of strataRedOpCreatePreMulSum lives (NCCL's ncclScalarResidence_t values).
typedef enum {
  /// NCCL's device-resident scalar. Not supported: strataRedOpCreatePreMulSum refuses it (strataInvalidArgument).
  strataScalarDevice = 0,
  /// The scalar is a host pointer, read when the op is created.
  strataScalarHostImmediate = 1
} strataScalarResidence_t;

/// Human-readable name of a result code ("unknown result code" for a value that is none). The string is
/// static. Never fails; thread-safe.
const char* strataGetErrorString(strataResult_t result);
/// The message of the last error recorded on the calling thread, or of the last error a call on comm recorded
/// (on any thread) when that one is newer; "" if none. comm may be NULL or not live: then the calling thread's.
/// The string belongs to the calling thread and stays valid until its next call of a Strata function. Never
/// fails; thread-safe.
const char* strataGetLastError(strataComm_t comm);
/// Writes STRATA_VERSION_CODE of the loaded library to *version. strataInvalidArgument if version is NULL.
/// Thread-safe.
strataResult_t strataGetVersion(int* version);

/// Creates a rendezvous token in *uniqueId and starts the bootstrap root service in this process (settings
/// from the STRATA_* environment), which then serves the communicator made with the id. The calling process
/// hosts the root: once it has ended, what needs the root (a split, a shrink, a first connection to a peer)
/// fails, saying so, and strataCommShrink cannot exclude it. Returns strataInvalidArgument if uniqueId is NULL or a
/// STRATA_* variable is malformed, strataSystemError if the service cannot listen. Thread-safe.
strataResult_t strataGetUniqueId(strataUniqueId* uniqueId);
/// Collective: every rank of the new communicator calls it with the same id and nranks, and its own rank in
/// [0, nranks); it returns in *comm once all nranks ranks have met (within STRATA_TIMEOUT_MS).
/// A communicator belongs to the process that created it: in a child made by fork() every call on it is
/// refused with strataInvalidUsage, and strataCommDestroy/Abort there only release the handle.
/// Returns strataInvalidArgument for comm NULL, nranks < 1, rank out of range or a malformed STRATA_*
/// variable; strataInvalidUsage for an id whose communicator was destroyed (ids are single-use);
/// strataTimeout if the ranks do not all arrive in time; strataRemoteError or strataSystemError if the root
/// cannot be reached or refuses. Thread-safe: one thread may create one rank while others create others.
strataResult_t strataCommInitRank(strataComm_t* comm, int nranks, strataUniqueId commId, int rank);
/// An int field of strataConfig_t that is not set (NCCL's NCCL_CONFIG_UNDEF_INT).
#define STRATA_CONFIG_UNDEF_INT (-2147483647 - 1)
/// strataConfig_t.magic: says the struct was initialised with STRATA_CONFIG_INITIALIZER.
#define STRATA_CONFIG_MAGIC 0x53544346u
/// Settings of one communicator, for strataCommInitRankConfig, strataCommSplit and strataCommShrink (NCCL's
/// ncclConfig_t): start from STRATA_CONFIG_INITIALIZER, then set the fields wanted. A field left unset
/// (STRATA_CONFIG_UNDEF_INT, NULL) keeps the value of the STRATA_* variable it stands for (creation from an id) or
/// of the parent communicator (split, shrink). Each set field is checked as its variable is: a value the variable
/// would not accept is refused with strataInvalidArgument naming the field. The library reads the struct by its
/// size and version: a caller compiled against an older header passes fewer fields, which count as unset. Strings
/// are copied; the struct may be freed once the call returns. Ranks that will talk to each other must agree on
/// transport, nslots and pieceBytes (connection set-up refuses peers that differ, naming both values).
typedef struct {
  size_t size;           ///< sizeof(strataConfig_t) as the caller compiled it.
  unsigned int magic;    ///< STRATA_CONFIG_MAGIC.
  unsigned int version;  ///< STRATA_VERSION_CODE of the caller's header.
  /// 1 (the default): creation returns once the communicator is ready or has failed. 0: strataCommInitRankConfig
  /// returns strataInProgress at once with a handle in *comm, and strataCommGetAsyncError reports strataInProgress
  /// until the communicator is ready (then strataSuccess) or the creation's error; any other call on the handle
  /// meanwhile first waits for the creation to end. Split and shrink are collectives ordered with comm's other
  /// calls, so they always complete before returning (strataSuccess), whatever this says.
  int blocking;
  int timeoutMs;          ///< Deadline of every wait of this communicator, in ms (STRATA_TIMEOUT_MS).
  const char* commName;   ///< A name for the communicator, shown in its flight recorder's dumps; NULL: none.
  const char* algo;       ///< Forced algorithms as STRATA_ALGO spells them ("allreduce:ring,..."); "" forces none.
  const char* transport;  ///< "auto", "shm", "tcp" or "ucx" (STRATA_TRANSPORT).
  int nslots;             ///< FIFO slots per connection direction (STRATA_NSLOTS).
  int pieceBytes;         ///< Bytes per transport message (STRATA_PIECE_BYTES).
} strataConfig_t;
/// A strataConfig_t with every setting unset (and blocking).
#define STRATA_CONFIG_INITIALIZER                                                                   \
  {                                                                                                 \
    sizeof(strataConfig_t), STRATA_CONFIG_MAGIC, STRATA_VERSION_CODE, STRATA_CONFIG_UNDEF_INT,      \
        STRATA_CONFIG_UNDEF_INT, NULL, NULL, NULL, STRATA_CONFIG_UNDEF_INT, STRATA_CONFIG_UNDEF_INT \
  }
/// strataCommInitRank with the settings of config (NULL: as strataCommInitRank). Returns as strataCommInitRank, and
/// strataInvalidArgument for a config whose size, magic or fields are wrong (naming which); with config->blocking
/// 0, strataInProgress and a handle in *comm whose creation goes on (strataCommGetAsyncError).
strataResult_t strataCommInitRankConfig(strataComm_t* comm, int nranks, strataUniqueId commId, int rank,
                                        const strataConfig_t* config);
/// Creates a communicator in *comm from the launcher's environment: strata-run/torchrun (RANK, WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, SLURM_NTASKS); without
/// any of them, a world of one rank. Collective over the launched ranks; rank 0 hosts the bootstrap root.
/// Returns as strataCommInitRank (strataInvalidArgument also for an inconsistent launcher environment).
/// Thread-safe.
strataResult_t strataCommInitFromEnv(strataComm_t* comm);
/// The color that makes strataCommSplit return no communicator for the calling rank.
#define STRATA_SPLIT_NOCOLOR (-1)
/// Collective over comm: ranks with the same color form a new communicator, ordered by key then by old
/// rank, returned in *newcomm. color = STRATA_SPLIT_NOCOLOR returns *newcomm = NULL. config: the new
/// communicator's settings (strataConfig_t; NULL or unset fields: comm's). Runs after comm's earlier work. Returns
/// strataInvalidArgument for newcomm NULL, a wrong config or a negative color other than STRATA_SPLIT_NOCOLOR;
/// strataInvalidUsage if comm is not live; a failed comm's failure code; errors of the rendezvous as
/// strataCommInitRank. comm stays valid. Thread-safe (see the conventions above).
strataResult_t strataCommSplit(strataComm_t comm, int color, int key, strataComm_t* newcomm,
                               const strataConfig_t* config);
/// strataCommShrink flag: wait for comm's outstanding work to end (after a failure it ends at once).
#define STRATA_SHRINK_DEFAULT 0x00
/// strataCommShrink flag: revoke comm first (strataCommRevoke), then shrink.
#define STRATA_SHRINK_ABORT 0x01
/// Collective over the ranks of comm that remain: a new communicator in *newcomm of every rank of comm except
/// the excludeCount ranks listed in excludeRanks (ranks of comm; every remaining rank passes the same list, and
/// an excluded rank does not call it), in the same order, without a new rendezvous, as NCCL's ncclCommShrink. It
/// is how the survivors of a failure go on: it works on a communicator that has failed, and the new one does not
/// hear of the failures of comm's ranks that it excludes (only its own members' deaths and failures stop it).
/// flags: STRATA_SHRINK_DEFAULT waits for comm's outstanding work to end (after a failure it ends at once);
/// STRATA_SHRINK_ABORT revokes comm first (strataCommRevoke). config: the new communicator's settings
/// (strataConfig_t; NULL or unset fields: comm's). comm stays
/// valid and must still be destroyed or aborted. The rank hosting the bootstrap root (the process that called
/// strataGetUniqueId, or rank 0 of an environment launch) cannot be lost: without it, this fails, saying so.
/// Returns strataInvalidArgument for newcomm NULL, a wrong config, other flags, excludeCount outside
/// [0, nranks), excludeRanks NULL with excludeCount > 0, a listed rank out of range or the caller itself listed;
/// strataInvalidUsage if comm is not live or the remaining ranks passed different lists (each of them fails,
/// naming both lists); errors of the exchange among the remaining ranks (strataRemoteError, strataTimeout).
/// Thread-safe: it waits for calls of other threads in comm to end.
strataResult_t strataCommShrink(strataComm_t comm, const int* excludeRanks, int excludeCount, strataComm_t* newcomm,
                                const strataConfig_t* config, int flags);
/// The only flags value of strataCommRevoke.
#define STRATA_REVOKE_DEFAULT 0x00
/// Stops comm's work, as NCCL's ncclCommRevoke: queued work fails, calls blocked in comm (on any thread) return
/// strataInvalidUsage naming the revoke, later calls are refused, and the other ranks' calls in comm end with
/// strataRemoteError naming this rank (no other communicator is affected). Returns once no call of this
/// process is inside comm; comm can then be shrunk (strataCommShrink), destroyed or aborted. flags must be 0.
/// Returns strataInvalidArgument for other flags, strataInvalidUsage if comm is not live; revoking twice is
/// not an error. Thread-safe: any thread may call it, also while other threads are blocked in comm.
strataResult_t strataCommRevoke(strataComm_t comm, int flags);
/// Waits for outstanding work, then frees the communicator and the handle. Calls of other threads inside comm
/// are not interrupted: it waits until they finish or time out. Committed messages may leave first (for up to
/// STRATA_TIMEOUT_MS, at most 10 s; not after a failure). Collective when comm used the CUDA IPC path (a
/// barrier, so no peer still reads buffers being freed). Returns strataInvalidUsage if comm is not live
/// (NULL, already destroyed or aborted), else strataSuccess or the error of the teardown (the handle is freed
/// all the same). In a process forked from comm's creator it only releases the handle. Thread-safe: of two
/// threads destroying one handle, one gets strataInvalidUsage.
strataResult_t strataCommDestroy(strataComm_t comm);
/// Stops outstanding work without waiting for peers and frees the communicator. From any thread (a watchdog):
/// queued work fails, every call blocked in comm on any thread returns an error naming the abort, and nothing
/// is freed until they have left. Returns as strataCommDestroy. Thread-safe.
strataResult_t strataCommAbort(strataComm_t comm);
/// Writes the communicator's flight recorder (its last STRATA_FLIGHT_RECORDER_ENTRIES operations, their state and
/// times) as JSON to `dir`/strata-flight-<comm id>-rank<rank>.json (dir NULL: STRATA_FLIGHT_RECORDER_DIR),
/// replacing an earlier dump. `strata-doctor DIR` reads the dumps of all ranks. Also written on its own, when
/// STRATA_FLIGHT_RECORDER_DIR is set, on a timeout, a failure (this rank's or a peer's), an abort, and SIGUSR1.
/// Local; works on a failed communicator. Returns strataInvalidArgument when dir is NULL and
/// STRATA_FLIGHT_RECORDER_DIR is not set, strataSystemError when the file cannot be written, strataInvalidUsage
/// if comm is not live. Thread-safe: any thread may dump while others run collectives.
strataResult_t strataCommDumpFlightRecorder(strataComm_t comm, const char* dir);
/// Writes to *asyncError the first error that made comm unusable (its own, a peer's death or failure, a
/// revoke), strataSuccess if none: how errors of device work, found after the call returned, are seen; after an
/// error strataGetLastError(comm) gives its message. Local.
/// Returns strataInvalidArgument if asyncError is NULL, strataInvalidUsage if comm is not live. Thread-safe.
strataResult_t strataCommGetAsyncError(strataComm_t comm, strataResult_t* asyncError);
/// Writes the number of ranks of comm to *count. Local; works on a failed communicator. Returns
/// strataInvalidArgument if count is NULL, strataInvalidUsage if comm is not live. Thread-safe.
strataResult_t strataCommCount(const strataComm_t comm, int* count);
/// Writes the calling rank's rank in comm, in [0, count), to *rank. Local; works on a failed communicator.
/// Returns strataInvalidArgument if rank is NULL, strataInvalidUsage if comm is not live. Thread-safe.
strataResult_t strataCommUserRank(const strataComm_t comm, int* rank);

/// Creates in *op an operator for comm: op = sum over ranks of (scalar x input), NCCL's PreMulSum. scalar
/// points to one host value of `datatype`; each rank may pass its own. Integer types multiply in the type
/// (wrapping). Use the op only with collectives of `datatype` on comm. It is valid
/// until strataRedOpDestroy (its value may then be reused). Local. Returns strataInvalidArgument for op or
/// scalar NULL, an invalid datatype, or residence other than strataScalarHostImmediate; strataInvalidUsage if
/// comm is not live. Thread-safe.
strataResult_t strataRedOpCreatePreMulSum(strataRedOp_t* op, void* scalar, strataDataType_t datatype,
                                          strataScalarResidence_t residence, strataComm_t comm);
/// Destroys an operator made by strataRedOpCreatePreMulSum on comm. Work issued with it that has not run yet
/// (queued asynchronous work, device work staged through host memory) fails with strataInvalidArgument when it
/// runs, so destroy the op once such work has completed.
/// Local. Returns strataInvalidArgument if op is not a live operator of comm (a built-in one included),
/// strataInvalidUsage if comm is not live. Thread-safe.
strataResult_t strataRedOpDestroy(strataRedOp_t op, strataComm_t comm);

/// Collective: recvbuff (count elements) gets the reduction with op of every rank's sendbuff (count
/// elements). In place when sendbuff == recvbuff; other overlap of the two is refused. sendbuff is never
/// modified. Returns strataInvalidArgument for an invalid datatype or op, a NULL buffer with count > 0, a
/// count whose bytes overflow, or buffers that overlap but are not in place; strataInvalidUsage if comm is not
/// live; a failed comm's failure code; strataRemoteError, strataTimeout or strataInvalidUsage (ranks calling
/// different collectives) when the exchange fails. Thread-safe (see the conventions above).
strataResult_t strataAllReduce(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                               strataRedOp_t op, strataComm_t comm, strataStream_t stream);
/// Collective: recvbuff gets block `rank` (recvcount elements) of the reduction with op of every rank's
/// sendbuff (nranks * recvcount elements). In place when recvbuff == sendbuff + rank * recvcount; other
/// overlap is refused. Returns as strataAllReduce. Thread-safe (see the conventions above).
strataResult_t strataReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, strataDataType_t datatype,
                                   strataRedOp_t op, strataComm_t comm, strataStream_t stream);
/// Collective: recvbuff (nranks * sendcount elements) gets every rank's sendbuff (sendcount elements) in rank
/// order. In place when sendbuff == recvbuff + rank * sendcount; other overlap is refused. Returns as
/// strataAllReduce (no op to check). Thread-safe (see the conventions above).
strataResult_t strataAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, strataDataType_t datatype,
                               strataComm_t comm, strataStream_t stream);
/// Collective: every rank's recvbuff (count elements) gets root's sendbuff; sendbuff is read on root only. In
/// place when sendbuff == recvbuff on root; other overlap there is refused. Returns as strataAllReduce, and
/// strataInvalidArgument for a root out of range. Thread-safe (see the conventions above).
strataResult_t strataBroadcast(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype, int root,
                               strataComm_t comm, strataStream_t stream);
/// Collective: root's recvbuff (count elements) gets the reduction with op of every rank's sendbuff; recvbuff
/// is only used on root. In place when sendbuff == recvbuff on root; other overlap there is refused. Returns as
/// strataAllReduce, and strataInvalidArgument for a root out of range. Thread-safe (see the conventions above).
strataResult_t strataReduce(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                            strataRedOp_t op, int root, strataComm_t comm, strataStream_t stream);
/// Collective: block j (count elements) of sendbuff (nranks * count) goes to rank j, which stores it as its
/// block `rank` of recvbuff (nranks * count). In place when sendbuff == recvbuff; other overlap is refused.
/// Returns as strataAllReduce (no op to check). Thread-safe (see the conventions above).
strataResult_t strataAllToAll(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                              strataComm_t comm, strataStream_t stream);
/// Sends count elements of sendbuff to rank peer, matched by that peer's strataRecv from this rank (the n-th
/// send to a peer meets its n-th receive from this rank; the two may name different types of the same byte
/// count). Outside a group it returns once its data has left this process. Inside a group, a send whose buffer a
/// receive of the same group overwrites is sent from a copy taken first, and a send to this rank itself meets
/// the group's receive from itself. Returns as strataAllReduce, with strataInvalidArgument for a peer out of
/// range, and strataInvalidUsage for a send of count > 0 to itself outside a group. Thread-safe (see the
/// conventions above).
strataResult_t strataSend(const void* sendbuff, size_t count, strataDataType_t datatype, int peer, strataComm_t comm,
                          strataStream_t stream);
/// Receives count elements from rank peer into recvbuff, matched by that peer's strataSend to this rank (see
/// strataSend). Returns as strataSend, with strataInvalidUsage for a receive of count > 0 from itself outside
/// a group. Thread-safe (see the conventions above).
strataResult_t strataRecv(void* recvbuff, size_t count, strataDataType_t datatype, int peer, strataComm_t comm,
                          strataStream_t stream);
/// Receives count elements into recvbuff from whichever other rank's send to this rank arrives first (MPI's
/// MPI_ANY_SOURCE, torch's recv without src) and stores that rank in *source. The sender calls an ordinary
/// strataSend; the receive takes the send that is that rank's next one to this rank in the order strataSend and
/// strataRecv match (so it counts as that rank's next receive from it), never a message of a collective from a rank
/// that is ahead, and no message is consumed before one is chosen. When several have arrived, the rank after the
/// previous any-source receive's comes first, so no sender starves another. A rank that never sends is never waited
/// on (its connection is set up when its first send to this rank asks for it). Sends of 0 elements carry no message
/// and cannot be matched. Host memory only: device buffers give strataInvalidUsage, because a device call is
/// enqueued with its peers fixed while this receive's peer is known only once a message has arrived. It must
/// be alone in its group (strataInvalidUsage at strataGroupEnd otherwise); in a group ended by strataGroupEndAsync,
/// *source is written when the work completes, so source must stay valid until then. Returns as strataRecv, with
/// strataInvalidArgument for a NULL source or count 0, strataInvalidUsage on a 1-rank communicator and when the
/// matched send's byte count differs from count x the size of datatype (the message names both sizes and the rank),
/// and strataTimeout when no send arrives within STRATA_TIMEOUT_MS. Thread-safe (see the conventions above).
strataResult_t strataRecvAny(void* recvbuff, size_t count, strataDataType_t datatype, int* source, strataComm_t comm,
                             strataStream_t stream);
/// Collective (a Strata extension): returns once every rank of comm has called it (with a stream: enqueued,
/// as other device calls). Returns strataInvalidUsage if comm is not live, a failed comm's failure code, or
/// the errors of the exchange. Thread-safe (see the conventions above).
strataResult_t strataBarrier(strataComm_t comm, strataStream_t stream);

/// Opens a group on the calling thread; groups nest, and only the outermost end runs them. Collectives and
/// send/recv issued until then are checked when issued (each call's own result says whether it was taken) and
/// run together at the outermost strataGroupEnd. Always returns strataSuccess. Thread safety: the group
/// belongs to the calling thread; calls of other threads are not part of it.
strataResult_t strataGroupStart(void);
/// Ends one level of the calling thread's group; an inner level returns strataSuccess at once. The outermost
/// runs the group's calls, one batch per communicator in issue order: host calls of one communicator on the
/// calling thread, of several on their communicators' worker threads side by side; device calls are enqueued
/// on their stream. Returns once the host calls' results are in place: strataSuccess, or the code of the first
/// failed batch (its message via strataGetLastError). Returns strataInvalidUsage without a strataGroupStart,
/// or when one communicator's calls mix host and device buffers. The group is closed even when it fails.
/// Thread safety: ends the calling thread's group only.
strataResult_t strataGroupEnd(void);

/// Handle of asynchronous work (a Strata extension): the host calls of a group ended by strataGroupEndAsync.
/// The caller owns it until strataWorkFree; a freed handle is refused with strataInvalidUsage.
typedef struct strataWork* strataWork_t;
/// Ends the calling thread's outermost group without waiting and returns a handle in *work; the group's host
/// calls run in the background on their communicators' worker threads, in issue order per communicator (after
/// its earlier work), while the caller computes. Device calls of the group are enqueued on their streams and
/// are not tracked by the handle. Buffers must stay valid (and send buffers unchanged) until the work
/// completes. Returns strataInvalidArgument if work is NULL; strataInvalidUsage outside a group or in an
/// inner level (the group then stays open, *work = NULL), or when one communicator's calls mix host and
/// device buffers. Thread safety: ends the calling thread's group only.
strataResult_t strataGroupEndAsync(strataWork_t* work);
/// Waits up to timeoutMs for all of the work (one deadline; < 0: no limit). Returns strataInProgress if it is
/// still running then (nothing is recorded), else the work's result: strataSuccess or the code of its first
/// failed call, whose message strataGetLastError returns. strataInvalidArgument if work is NULL,
/// strataInvalidUsage if it was freed or never returned by strataGroupEndAsync. Thread-safe: several threads
/// may wait on one handle, and a wait in progress keeps the work alive if another thread frees the handle.
strataResult_t strataWorkWait(strataWork_t work, int64_t timeoutMs);
/// Polls: *done = 1 when all of the work has completed (then the work's result is returned, as
/// strataWorkWait; a failure is recorded for strataGetLastError on the first poll that sees it), 0 otherwise
/// (strataSuccess returned). Returns strataInvalidArgument if work or done is NULL, strataInvalidUsage if the
/// handle was freed or never returned by strataGroupEndAsync. Never blocks; thread-safe.
strataResult_t strataWorkTest(strataWork_t work, int* done);
/// The error message of the work's first failed call ("" if none has failed, or for a NULL, freed or unknown
/// handle). Valid until strataWorkFree. Records nothing; thread-safe.
const char* strataWorkError(strataWork_t work);
/// Frees the handle (NULL: nothing to do); the work itself still completes, and its buffers must stay valid
/// until then (a later blocking call on the same communicator returns after it: work runs in issue order).
/// Later calls on the freed handle return strataInvalidUsage (strataWorkError: ""). Returns strataInvalidUsage
/// for a handle already freed or never returned by strataGroupEndAsync. Thread-safe.
strataResult_t strataWorkFree(strataWork_t work);

/// The collective strataCommExplain asks about (a Strata extension).
typedef enum {
  strataCollAllReduce = 0,      ///< strataAllReduce.
  strataCollReduceScatter = 1,  ///< strataReduceScatter.
  strataCollAllGather = 2,      ///< strataAllGather.
  strataCollBroadcast = 3,      ///< strataBroadcast.
  strataCollReduce = 4,         ///< strataReduce.
  strataCollAllToAll = 5,       ///< strataAllToAll.
} strataCollective_t;
/// Algorithm choice (a Strata extension): which algorithm a collective of `count` elements (the count
/// argument of that collective's call) would use on this communicator, STRATA_ALGO included, and the
/// cost model's predicted time in microseconds (0 where the model has none). Local: no communication.
/// The name is written to algorithm (algorithmLen bytes, NUL-terminated, truncated to fit) and the time to
/// *predictedUs; either may be NULL to skip it. Returns strataInvalidArgument for an invalid collective or
/// datatype, or algorithmLen 0 with algorithm not NULL; strataInvalidUsage if comm is not live. Thread-safe.
strataResult_t strataCommExplain(strataComm_t comm, strataCollective_t collective, size_t count,
                                 strataDataType_t datatype, char* algorithm, size_t algorithmLen, double* predictedUs);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // STRATA_STRATA_H_
