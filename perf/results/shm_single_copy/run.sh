#!/bin/bash
# Usage: [BUILD=build] perf/results/shm_single_copy/run.sh OUTDIR LAUNCH: one launch of every (ranks, collective,
# STRATA_SHM_SINGLE_COPY); the tables came from LAUNCH=1,2,3 in turn, then table.py (medians of the three).
out=$1; l=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
b=${BUILD:-build}/bin
for n in 2 4; do for coll in allgather allreduce; do for mode in auto off; do
  f=$out/${coll}_n${n}_${mode}_l${l}
  cmd=(mpirun -n $n --oversubscribe --bind-to none -x STRATA_SHM_SINGLE_COPY=$mode $b/strata-perf $coll -d float -o sum
       -b 1M -e 256M -f 4 -n 10 -w 3 -c 1 -T 300 --baseline mpi --json $f.json)
  echo "\$ ${cmd[*]}" > $f.txt
  nice -n 19 "${cmd[@]}" >> $f.txt 2>&1
done; done; done
