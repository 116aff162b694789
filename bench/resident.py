#!/usr/bin/env python3
"""Where a running Berth binary's resident code and data come from, by crate.

    bench/resident.py PID            # e.g. an idle storage-ops started as bench/footprint.sh starts it

Reads /proc/PID/pagemap (root only) for every page of the process's own executable that is mapped
and present, and names each executable page after the crate whose symbols it holds (`nm -C`; a
generic function is named after the crate of its outermost path, so `core` collects many inlined
instantiations). Read-only data pages are counted together. The figures explain the file-backed part
of the idle RSS that bench/footprint.sh prints: those pages are the binary's page cache, shared by
every process running it, and the kernel maps up to 64 KiB around each page a process touches
(fault-around), so code used once at start stays resident.
"""

import bisect
import collections
import os
import re
import struct
import subprocess
import sys


def crate_of(name):
    match = re.search(r"([a-z_][a-z0-9_]*)::", name)
    if match:
        return match.group(1)
    if "sqlite" in name.lower():
        return "sqlite3 (C)"
    if "aws_lc" in name:
        return "aws-lc (C)"
    return "other C or unnamed"


def main():
    pid = int(sys.argv[1])
    binary = os.readlink(f"/proc/{pid}/exe")
    symbols = []
    nm = subprocess.run(["nm", "-S", "--defined-only", "-C", binary], capture_output=True, text=True)
    for line in nm.stdout.splitlines():
        parts = line.split(" ", 3)
        if len(parts) == 4 and parts[2] in "tTwW":
            symbols.append((int(parts[0], 16), int(parts[1], 16), parts[3]))
    symbols.sort()
    starts = [s[0] for s in symbols]
    # File offset -> virtual address, from the LOAD program headers.
    loads = []
    for line in subprocess.run(["readelf", "-lW", binary], capture_output=True, text=True).stdout.splitlines():
        fields = line.split()
        if fields and fields[0] == "LOAD":
            loads.append((int(fields[1], 16), int(fields[2], 16), int(fields[4], 16)))

    by_crate = collections.Counter()
    total = 0
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap, open(f"/proc/{pid}/maps") as maps:
        for mapping in maps:
            fields = mapping.split()
            if len(fields) < 6 or fields[5] != binary:
                continue
            low, high = (int(x, 16) for x in fields[0].split("-"))
            offset = int(fields[2], 16)
            for page in range(low, high, 4096):
                pagemap.seek(page // 4096 * 8)
                if not struct.unpack("<Q", pagemap.read(8))[0] >> 63 & 1:
                    continue
                total += 4
                if "x" not in fields[1]:
                    by_crate[f"[data, {fields[1]}]"] += 4
                    continue
                file_offset = page - low + offset
                vaddr = next((v + file_offset - o for o, v, size in loads if o <= file_offset < o + size), None)
                if vaddr is None:
                    by_crate["[unmapped]"] += 4
                    continue
                # The crate with the most symbols overlapping this page.
                names = collections.Counter()
                i = bisect.bisect_right(starts, vaddr + 4095) - 1
                while i >= 0 and symbols[i][0] + max(symbols[i][1], 1) > vaddr and len(names) < 32:
                    names[crate_of(symbols[i][2])] += 1
                    i -= 1
                by_crate[names.most_common(1)[0][0] if names else "[no symbol]"] += 4
    print(f"{binary}: {total} kB of it resident")
    for crate, kb in by_crate.most_common(25):
        print(f"{kb:8d} kB  {crate}")


if __name__ == "__main__":
    main()
