#!/usr/bin/env python3
"""Which code of a running binary is resident (BENCHMARKS.md, "Tenth step").

Usage (as root, for /proc/PID/pagemap): hack/resident-code.py PID [ROWS]

Prints how much of each of the binary's file mappings is resident, and the
resident bytes of its .text by crate (the first path segment of each symbol,
from `nm -S -C`; a generic function counts for the crate that defines it).
A diagnostic: not part of the tests or the bench."""
import sys, re, struct, subprocess, bisect, collections
pid = sys.argv[1]
exe = subprocess.check_output(['readlink', f'/proc/{pid}/exe']).decode().strip()
segs = []
for line in subprocess.check_output(['readelf', '-lW', exe]).decode().splitlines():
    p = line.split()
    if p and p[0] == 'LOAD':
        off, va, fsz = int(p[1], 16), int(p[2], 16), int(p[4], 16)
        segs.append((off, va, fsz, p[6]))
maps = []
for line in open(f'/proc/{pid}/maps'):
    p = line.split()
    if len(p) >= 6 and p[5] == exe:
        s, e = (int(x, 16) for x in p[0].split('-'))
        maps.append((s, e, p[1], int(p[2], 16)))
pm = open(f'/proc/{pid}/pagemap', 'rb')
resident = collections.defaultdict(list)  # perms -> list of vaddr pages
for s, e, perms, off in maps:
    seg = next((g for g in segs if g[0] // 4096 * 4096 <= off < g[0] + g[2]), None)
    delta = (seg[1] - seg[0]) if seg else 0
    base = s - off - delta
    pm.seek(s // 4096 * 8)
    data = pm.read((e - s) // 4096 * 8)
    for i in range(len(data) // 8):
        (v,) = struct.unpack_from('<Q', data, i * 8)
        if v >> 63 & 1:
            resident[perms].append(s + i * 4096 - base)
syms = []
for line in subprocess.check_output(['nm', '-S', '-C', exe], stderr=subprocess.DEVNULL).decode(errors='replace').splitlines():
    m = re.match(r'([0-9a-f]+) ([0-9a-f]+) ([tT]) (.*)', line)
    if m:
        syms.append((int(m.group(1), 16), int(m.group(2), 16), m.group(4)))
syms.sort()
starts = [s[0] for s in syms]
def crate(name):
    m = re.match(r'[<&\s]*(?:dyn |impl )?([A-Za-z_][A-Za-z0-9_]*)', name)
    return m.group(1) if m else '?'
by = collections.Counter(); total = collections.Counter()
for a, sz, name in syms:
    total[crate(name)] += sz
for v in resident.get('r-xp', []):
    i = bisect.bisect_right(starts, v + 4096) - 1
    while i >= 0 and syms[i][0] + syms[i][1] > v - 200000:
        a, sz, name = syms[i]
        lo, hi = max(a, v), min(a + sz, v + 4096)
        if hi > lo:
            by[crate(name)] += hi - lo
        if a < v - 200000: break
        i -= 1
for perms, pages in sorted(resident.items()):
    print(f'{perms}: {len(pages) * 4 / 1024:.1f} MiB resident')
print(f'text symbols resident {sum(by.values())/1e6:.2f} MB of {sum(total.values())/1e6:.2f} MB')
for c, b in by.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 30):
    print(f'{b/1e6:7.3f} MB of {total[c]/1e6:7.3f} MB  {c}')
