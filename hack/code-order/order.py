#!/usr/bin/env python3
"""Write the code order list from the pages touched (hack/code-order.sh).

Usage: order.py MEASURED_BINARY OUT PAGES_FILE...

MEASURED_BINARY was built with every function aligned to a page, so a touched
page (a file offset in a PAGES_FILE, written by shim.so) is a function that
ran. OUT gets those functions' (mangled) names in address order: the list LLD
lays out first (--symbol-ordering-file)."""
import re, subprocess, sys

binary, out, files = sys.argv[1], sys.argv[2], sys.argv[3:]
segs = []
for line in subprocess.check_output(['readelf', '-lW', binary]).decode().splitlines():
    p = line.split()
    if p and p[0] == 'LOAD':
        segs.append((int(p[1], 16), int(p[2], 16), int(p[4], 16)))
pages = set()
for fn in files:
    with open(fn) as f:
        for line in f:
            off = int(line, 16)
            seg = next(s for s in segs if s[0] <= off < s[0] + s[2])
            pages.add((off - seg[0] + seg[1]) // 4096)
syms = []
for line in subprocess.check_output(['nm', '-S', binary]).decode(errors='replace').splitlines():
    m = re.match(r'([0-9a-f]+) ([0-9a-f]+) [tTwW] (.*)', line)
    if m and int(m.group(2), 16) > 0:
        syms.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3)))
syms.sort()
chosen, seen, size = [], set(), 0
for a, sz, name in syms:
    if name not in seen and any(p in pages for p in range(a // 4096, (a + sz - 1) // 4096 + 1)):
        chosen.append(name)
        seen.add(name)
        size += sz
with open(out, 'w') as f:
    f.write(''.join(n + '\n' for n in chosen))
print(f'{len(pages)} pages touched; {len(chosen)} of {len(syms)} functions ran, '
      f'{size / 1e6:.2f} MB of code', file=sys.stderr)
