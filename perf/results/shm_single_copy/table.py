import json, glob, os, statistics, collections
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sorted(glob.glob(os.path.join(os.path.dirname(os.path.abspath(__file__)), '*_l*.json'))):
    coll, n, mode, l = f.split('/')[-1][:-5].split('_')
    for r in json.load(open(f))['results']:
        k = (coll, int(n[1:]), r['size'])
        m = r['baselines']['mpi']['busbw_gbps']
        rows[k][mode].append(r['out_of_place']['busbw_gbps'])
        rows[k][mode + '_ip'].append(r['in_place']['busbw_gbps'])
        rows[k]['mpi_' + mode].append(m)
        rows[k][mode + '_x'].append(r['out_of_place']['busbw_gbps'] / m)
med = statistics.median
print('| collective | ranks | size | on: oop / ip busbw | off: oop / ip busbw | MPI (on launches / off launches) | on x MPI | off x MPI |')
print('|---|---|---|---|---|---|---|---|')
for k in sorted(rows):
    d = rows[k]
    print(f"| {k[0]} | {k[1]} | {k[2]>>20} MiB | {med(d['auto']):.2f} / {med(d['auto_ip']):.2f} | {med(d['off']):.2f} / {med(d['off_ip']):.2f} | {med(d['mpi_auto']):.2f} / {med(d['mpi_off']):.2f} | {med(d['auto_x']):.2f} ({', '.join(f'{x:.2f}' for x in d['auto_x'])}) | {med(d['off_x']):.2f} ({', '.join(f'{x:.2f}' for x in d['off_x'])}) |")
