cd /work/main
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
for l in 1 2; do for n in 2 4; do for mode in auto off; do
  mpirun -n $n --oversubscribe --bind-to none -x STRATA_SHM_SINGLE_COPY=$mode build/bin/strata-perf allreduce -d float -o sum -b 1M -e 64M -f 4 -n 10 -w 3 -c 1 -T 300 --baseline mpi --json OUT/v2_allreduce_n${n}_${mode}_l$l.json > OUT/v2_allreduce_n${n}_${mode}_l$l.txt 2>&1
done; done; done
echo ALLDONE
