// Strata: a topology-aware collective communication library.
// C ABI. Types, values and argument orders follow NCCL's so that an NCCL shim is a rename.
#ifndef STRATA_STRATA_H_
#define STRATA_STRATA_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_MAJOR 0
#define STRATA_MINOR 1
#define STRATA_PATCH 0
/// Version as one integer: major * 10000 + minor * 100 + patch (NCCL's scheme).
#define STRATA_VERSION_CODE (STRATA_MAJOR * 10000 + STRATA_MINOR * 100 + STRATA_PATCH)

#define STRATA_UNIQUE_ID_BYTES 128
/// Opaque rendezvous token: the root's address and a random secret. Made by strataGetUniqueId on one rank
/// and handed to every other rank out of band (MPI_Bcast, a file, an environment variable).
typedef struct {
  char internal[STRATA_UNIQUE_ID_BYTES];
} strataUniqueId;

typedef struct strataComm* strataComm_t;
/// A CUDA stream (cudaStream_t) for device buffers; NULL for host buffers.
typedef void* strataStream_t;

typedef enum {
  strataSuccess = 0,
  strataUnhandledCudaError = 1,
  strataSystemError = 2,
  strataInternalError = 3,
  strataInvalidArgument = 4,
  strataInvalidUsage = 5,
  strataRemoteError = 6,
  strataInProgress = 7,
  strataTimeout = 8,
  strataNumResults = 9
} strataResult_t;

typedef enum {
  strataInt8 = 0,
  strataChar = 0,
  strataUint8 = 1,
  strataInt32 = 2,
  strataInt = 2,
  strataUint32 = 3,
  strataInt64 = 4,
  strataUint64 = 5,
  strataFloat16 = 6,
  strataHalf = 6,
  strataFloat32 = 7,
  strataFloat = 7,
  strataFloat64 = 8,
  strataDouble = 8,
  strataBfloat16 = 9,
  strataFloat8e4m3 = 10,
  strataFloat8e5m2 = 11,
  strataNumTypes = 12
} strataDataType_t;

typedef enum {
  strataSum = 0,
  strataProd = 1,
  strataMax = 2,
  strataMin = 3,
  strataAvg = 4,
  strataNumOps = 5,
  /// Operators made by strataRedOpCreatePreMulSum take values from here up.
  strataMaxRedOp = 0x7fffffff
} strataRedOp_t;

typedef enum {
  /// The scalar is a device pointer (read when the collective runs; device buffers only).
  strataScalarDevice = 0,
  /// The scalar is a host pointer, read when the op is created.
  strataScalarHostImmediate = 1
} strataScalarResidence_t;

/// Human-readable name of a result code.
const char* strataGetErrorString(strataResult_t result);
/// The message of the last error on this thread for comm (or the process when comm is NULL); "" if none.
const char* strataGetLastError(strataComm_t comm);
/// Writes STRATA_VERSION_CODE of the loaded library.
strataResult_t strataGetVersion(int* version);

/// Creates a rendezvous token and starts the bootstrap root service in this process.
strataResult_t strataGetUniqueId(strataUniqueId* uniqueId);
/// Collective: every rank of the new communicator calls it with the same id and nranks.
/// A communicator belongs to the process that created it: in a child made by fork() every call on it is
/// refused with strataInvalidUsage, and strataCommDestroy/Abort there only release the handle.
strataResult_t strataCommInitRank(strataComm_t* comm, int nranks, strataUniqueId commId, int rank);
/// Creates a communicator from the launcher's environment: strata-run/torchrun (RANK, WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT), Open MPI (OMPI_COMM_WORLD_*) or Slurm (SLURM_PROCID, SLURM_NTASKS).
strataResult_t strataCommInitFromEnv(strataComm_t* comm);
/// Collective over comm: ranks with the same color form a new communicator, ordered by key then by old
/// rank. color = STRATA_SPLIT_NOCOLOR returns *newcomm = NULL. config is reserved and must be NULL.
#define STRATA_SPLIT_NOCOLOR (-1)
strataResult_t strataCommSplit(strataComm_t comm, int color, int key, strataComm_t* newcomm, void* config);
/// Collective over the ranks of comm that remain: a new communicator of every rank of comm except the
/// excludeCount ranks listed in excludeRanks (ranks of comm; every remaining rank passes the same list, and an
/// excluded rank does not call it), in the same order, without a new rendezvous, as NCCL's ncclCommShrink. It is
/// how the survivors of a failure go on: it works on a communicator that has failed, and the new one does not
/// hear of the failures of comm's ranks that it excludes (only its own members' deaths and failures stop it).
/// flags: STRATA_SHRINK_DEFAULT waits for comm's outstanding work to end (after a failure it ends at once);
/// STRATA_SHRINK_ABORT revokes comm first (strataCommRevoke). config is reserved and must be NULL. comm stays
/// valid and must still be destroyed or aborted. The rank hosting the bootstrap root (the process that called
/// strataGetUniqueId, or rank 0 of an environment launch) cannot be lost: without it, this fails, saying so.
#define STRATA_SHRINK_DEFAULT 0x00
#define STRATA_SHRINK_ABORT 0x01
strataResult_t strataCommShrink(strataComm_t comm, const int* excludeRanks, int excludeCount, strataComm_t* newcomm,
                                void* config, int flags);
/// Stops comm's work, as NCCL's ncclCommRevoke: queued work fails, calls blocked in comm (on any thread) return
/// strataInvalidUsage naming the revoke, later calls are refused, and the other ranks' calls in comm end with
/// strataRemoteError naming this rank (no other communicator is affected). Returns once no call of this
/// process is inside comm; comm can then be shrunk (strataCommShrink), destroyed or aborted. flags must be 0.
#define STRATA_REVOKE_DEFAULT 0x00
strataResult_t strataCommRevoke(strataComm_t comm, int flags);
/// Waits for outstanding work, then frees the communicator.
strataResult_t strataCommDestroy(strataComm_t comm);
/// Stops outstanding work without waiting for peers and frees the communicator.
strataResult_t strataCommAbort(strataComm_t comm);
/// Writes the communicator's flight recorder (its last STRATA_FLIGHT_RECORDER_ENTRIES operations, their state and
/// times) as JSON to `dir`/strata-flight-<comm id>-rank<rank>.json (dir NULL: STRATA_FLIGHT_RECORDER_DIR).
/// `strata-doctor DIR` reads the dumps of all ranks. Also written on its own, when STRATA_FLIGHT_RECORDER_DIR is
/// set, on a timeout, a failure (this rank's or a peer's), an abort, and SIGUSR1.
strataResult_t strataCommDumpFlightRecorder(strataComm_t comm, const char* dir);
/// The first asynchronous error the communicator has seen (strataSuccess if none).
strataResult_t strataCommGetAsyncError(strataComm_t comm, strataResult_t* asyncError);
strataResult_t strataCommCount(const strataComm_t comm, int* count);
strataResult_t strataCommUserRank(const strataComm_t comm, int* rank);

/// op = sum over ranks of (scalar x input). The returned op is valid for comm until destroyed.
strataResult_t strataRedOpCreatePreMulSum(strataRedOp_t* op, void* scalar, strataDataType_t datatype,
                                          strataScalarResidence_t residence, strataComm_t comm);
strataResult_t strataRedOpDestroy(strataRedOp_t op, strataComm_t comm);

strataResult_t strataAllReduce(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                               strataRedOp_t op, strataComm_t comm, strataStream_t stream);
/// recvbuff gets block `rank` (recvcount elements) of the reduction of every rank's sendbuff
/// (nranks * recvcount elements). In place when recvbuff == sendbuff + rank * recvcount.
strataResult_t strataReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, strataDataType_t datatype,
                                   strataRedOp_t op, strataComm_t comm, strataStream_t stream);
/// recvbuff (nranks * sendcount) gets every rank's sendbuff in rank order. In place when
/// sendbuff == recvbuff + rank * sendcount.
strataResult_t strataAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, strataDataType_t datatype,
                               strataComm_t comm, strataStream_t stream);
strataResult_t strataBroadcast(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype, int root,
                               strataComm_t comm, strataStream_t stream);
/// recvbuff is only used on root.
strataResult_t strataReduce(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                            strataRedOp_t op, int root, strataComm_t comm, strataStream_t stream);
/// Block j (count elements) of sendbuff goes to rank j, which stores it as its block `rank` of recvbuff.
strataResult_t strataAllToAll(const void* sendbuff, void* recvbuff, size_t count, strataDataType_t datatype,
                              strataComm_t comm, strataStream_t stream);
strataResult_t strataSend(const void* sendbuff, size_t count, strataDataType_t datatype, int peer, strataComm_t comm,
                          strataStream_t stream);
strataResult_t strataRecv(void* recvbuff, size_t count, strataDataType_t datatype, int peer, strataComm_t comm,
                          strataStream_t stream);
strataResult_t strataBarrier(strataComm_t comm, strataStream_t stream);

/// Operations issued between GroupStart and GroupEnd run together and complete at GroupEnd.
strataResult_t strataGroupStart(void);
strataResult_t strataGroupEnd(void);

/// Asynchronous work (a Strata extension): strataGroupEndAsync ends the outermost group without waiting
/// and returns a handle; the group's operations run in the background, in issue order per communicator,
/// while the caller computes. Buffers must stay valid until the work completes.
typedef struct strataWork* strataWork_t;
strataResult_t strataGroupEndAsync(strataWork_t* work);
/// Waits up to timeoutMs (< 0: no limit). strataInProgress if still running, else the work's result.
strataResult_t strataWorkWait(strataWork_t work, int64_t timeoutMs);
/// *done = 1 when complete (then the result is returned), 0 otherwise (strataSuccess returned).
strataResult_t strataWorkTest(strataWork_t work, int* done);
/// The error message of failed work ("" if none). Valid until strataWorkFree.
const char* strataWorkError(strataWork_t work);
/// Frees the handle (NULL: nothing to do); the work itself still completes. Calls on a freed handle return
/// strataInvalidUsage.
strataResult_t strataWorkFree(strataWork_t work);

/// Algorithm choice (a Strata extension): which algorithm a collective of `count` elements (the count
/// argument of that collective's call) would use on this communicator, STRATA_ALGO included, and the
/// cost model's predicted time in microseconds (0 where the model has none). Local: no communication.
typedef enum {
  strataCollAllReduce = 0,
  strataCollReduceScatter = 1,
  strataCollAllGather = 2,
  strataCollBroadcast = 3,
  strataCollReduce = 4,
  strataCollAllToAll = 5,
} strataCollective_t;
strataResult_t strataCommExplain(strataComm_t comm, strataCollective_t collective, size_t count,
                                 strataDataType_t datatype, char* algorithm, size_t algorithmLen, double* predictedUs);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // STRATA_STRATA_H_
