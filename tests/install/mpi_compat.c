/* An independent program written only against the installed strata.h and libstrata.so: launched by
 * mpirun, it passes the unique id with MPI_Bcast and compares Strata's results with Open MPI's on random
 * collectives, dtypes, ops, sizes and roots. Integer-valued data keeps every result exact, so the
 * comparison is bitwise. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <strata/strata.h>
#include <string.h>

#define CHECK(call)                                                                                              \
  do {                                                                                                           \
    strataResult_t r_ = (call);                                                                                  \
    if (r_ != strataSuccess) {                                                                                   \
      fprintf(stderr, "rank %d: %s: %s: %s\n", rank, #call, strataGetErrorString(r_), strataGetLastError(comm)); \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                                              \
    }                                                                                                            \
  } while (0)

static int rank, size;
static strataComm_t comm;

typedef struct {
  strataDataType_t st;
  MPI_Datatype mt;
  size_t bytes;
  int is_float, is_unsigned;
  const char* name;
} Type;

static const Type kTypes[] = {
    {strataInt8, MPI_INT8_T, 1, 0, 0, "int8"},      {strataUint8, MPI_UINT8_T, 1, 0, 1, "uint8"},
    {strataInt32, MPI_INT32_T, 4, 0, 0, "int32"},   {strataUint32, MPI_UINT32_T, 4, 0, 1, "uint32"},
    {strataInt64, MPI_INT64_T, 8, 0, 0, "int64"},   {strataUint64, MPI_UINT64_T, 8, 0, 1, "uint64"},
    {strataFloat32, MPI_FLOAT, 4, 1, 0, "float32"}, {strataFloat64, MPI_DOUBLE, 8, 1, 0, "float64"},
};
static const strataRedOp_t kOps[] = {strataSum, strataProd, strataMax, strataMin};
static MPI_Op mpiOp(strataRedOp_t op) {
  switch (op) {
    case strataSum: return MPI_SUM;
    case strataProd: return MPI_PROD;
    case strataMax: return MPI_MAX;
    default: return MPI_MIN;
  }
}

/* Small integers: products stay tiny (values in {1, 2, -1}), sums stay exact. */
static void fill(void* buf, size_t n, const Type* t, strataRedOp_t op, unsigned seed) {
  for (size_t i = 0; i < n; ++i) {
    unsigned h = (unsigned)(seed * 2654435761u + i * 40503u + (unsigned)rank * 9973u);
    long v;
    if (op == strataProd) v = (h % 7 == 0) ? 2 : ((h % 5 == 0 && !t->is_unsigned) ? -1 : 1);
    else v = (long)(h % 9) - (t->is_unsigned ? 0 : 4);
    switch (t->st) {
      case strataInt8: ((int8_t*)buf)[i] = (int8_t)v; break;
      case strataUint8: ((uint8_t*)buf)[i] = (uint8_t)(v < 0 ? -v : v); break;
      case strataInt32: ((int32_t*)buf)[i] = (int32_t)v; break;
      case strataUint32: ((uint32_t*)buf)[i] = (uint32_t)(v < 0 ? -v : v); break;
      case strataInt64: ((int64_t*)buf)[i] = v; break;
      case strataUint64: ((uint64_t*)buf)[i] = (uint64_t)(v < 0 ? -v : v); break;
      case strataFloat32: ((float*)buf)[i] = (float)v; break;
      default: ((double*)buf)[i] = (double)v; break;
    }
  }
}

static long mismatches = 0;
static void compare(const char* what, const Type* t, const void* a, const void* b, size_t n) {
  if (n && memcmp(a, b, n * t->bytes) != 0) {
    size_t i = 0;
    while (i < n && memcmp((const char*)a + i * t->bytes, (const char*)b + i * t->bytes, t->bytes) == 0) ++i;
    fprintf(stderr, "rank %d: %s %s count %zu: first difference at element %zu\n", rank, what, t->name, n, i);
    ++mismatches;
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int iters = argc > 1 ? atoi(argv[1]) : 60;
  strataUniqueId id;
  if (rank == 0 && strataGetUniqueId(&id) != strataSuccess) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  CHECK(strataCommInitRank(&comm, size, id, rank));

  unsigned seed = 12345;
  long checks = 0;
  for (int it = 0; it < iters; ++it) {
    /* Every rank draws the same random choices from the same seed. */
    seed = seed * 1103515245u + 12345u;
    const int coll = (int)((seed >> 8) % 7);
    const Type* t = &kTypes[(seed >> 12) % (sizeof(kTypes) / sizeof(kTypes[0]))];
    strataRedOp_t op = kOps[(seed >> 16) % 4];
    const int root = (int)((seed >> 20) % (unsigned)size);
    const int inplace = (int)((seed >> 24) & 1);
    size_t count = ((seed >> 4) % 5 == 0) ? 0 : (size_t)((seed * 7u) % 70000u) + 1;
    const size_t n = (size_t)size, tb = t->bytes;
    char* send = malloc(n * (count + 1) * tb + 64);
    char* sres = malloc(n * (count + 1) * tb + 64);
    char* mres = malloc(n * (count + 1) * tb + 64);
    char* msend = malloc(n * (count + 1) * tb + 64);
    fill(send, n * count, t, op, seed);
    memcpy(msend, send, n * count * tb);
    memset(sres, 0, n * count * tb + 1);
    memset(mres, 0, n * count * tb + 1);
    const char* name = "";
    switch (coll) {
      case 0:
        name = "allreduce";
        if (inplace) {
          memcpy(sres, send, count * tb);
          CHECK(strataAllReduce(sres, sres, count, t->st, op, comm, NULL));
        } else CHECK(strataAllReduce(send, sres, count, t->st, op, comm, NULL));
        MPI_Allreduce(msend, mres, (int)count, t->mt, mpiOp(op), MPI_COMM_WORLD);
        compare(name, t, sres, mres, count);
        break;
      case 1:
        name = "reducescatter";
        if (inplace) {
          memcpy(sres, send, n * count * tb);
          CHECK(strataReduceScatter(sres, sres + (size_t)rank * count * tb, count, t->st, op, comm, NULL));
          memmove(sres, sres + (size_t)rank * count * tb, count * tb);
        } else {
          CHECK(strataReduceScatter(send, sres, count, t->st, op, comm, NULL));
        }
        MPI_Reduce_scatter_block(msend, mres, (int)count, t->mt, mpiOp(op), MPI_COMM_WORLD);
        compare(name, t, sres, mres, count);
        break;
      case 2:
        name = "allgather";
        if (inplace) {
          memcpy(sres + (size_t)rank * count * tb, send, count * tb);
          CHECK(strataAllGather(sres + (size_t)rank * count * tb, sres, count, t->st, comm, NULL));
        } else {
          CHECK(strataAllGather(send, sres, count, t->st, comm, NULL));
        }
        MPI_Allgather(msend, (int)count, t->mt, mres, (int)count, t->mt, MPI_COMM_WORLD);
        compare(name, t, sres, mres, n * count);
        break;
      case 3:
        name = "broadcast";
        if (inplace) {
          memcpy(sres, send, count * tb);
          CHECK(strataBroadcast(sres, sres, count, t->st, root, comm, NULL));
        } else CHECK(strataBroadcast(send, sres, count, t->st, root, comm, NULL));
        memcpy(mres, msend, count * tb);
        MPI_Bcast(mres, (int)count, t->mt, root, MPI_COMM_WORLD);
        compare(name, t, sres, mres, count);
        break;
      case 4:
        name = "reduce";
        if (inplace) {
          memcpy(sres, send, count * tb);
          CHECK(strataReduce(sres, sres, count, t->st, op, root, comm, NULL));
        } else CHECK(strataReduce(send, sres, count, t->st, op, root, comm, NULL));
        MPI_Reduce(msend, mres, (int)count, t->mt, mpiOp(op), root, MPI_COMM_WORLD);
        if (rank == root) compare(name, t, sres, mres, count);
        break;
      case 5:
        name = "alltoall";
        CHECK(strataAllToAll(send, sres, count, t->st, comm, NULL));
        MPI_Alltoall(msend, (int)count, t->mt, mres, (int)count, t->mt, MPI_COMM_WORLD);
        compare(name, t, sres, mres, n * count);
        break;
      default: {
        name = "sendrecv";
        const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
        if (size > 1) {
          CHECK(strataGroupStart());
          CHECK(strataSend(send, count, t->st, next, comm, NULL));
          CHECK(strataRecv(sres, count, t->st, prev, comm, NULL));
          CHECK(strataGroupEnd());
          MPI_Sendrecv(msend, (int)count, t->mt, next, 7, mres, (int)count, t->mt, prev, 7, MPI_COMM_WORLD,
                       MPI_STATUS_IGNORE);
          compare(name, t, sres, mres, count);
        }
        break;
      }
    }
    ++checks;
    free(send);
    free(sres);
    free(mres);
    free(msend);
  }
  long total = 0;
  MPI_Allreduce(&mismatches, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("mpi_compat: %d ranks, %ld random collectives, %ld mismatches against Open MPI\n", size, checks, total);
  CHECK(strataCommDestroy(comm));
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
