"""Point a binary's C23 strtol/strtoul imports at the plain ones, so that Debian unstable's
Apptainer runs on Debian 12's glibc 2.36 (containers/install-apptainer.sh calls it).

    python3 containers/glibc_compat.py BINARY [BINARY ...]      # patch in place
    python3 containers/glibc_compat.py --check BINARY           # only say what it needs

glibc 2.38 added `__isoc23_strtol` and `__isoc23_strtoul` (C23's strtol/strtoul, which also
read a `0b` prefix); a program built against it imports them under version GLIBC_2.38.
Apptainer 1.4.5's two binaries need nothing else newer than 2.36, and they never parse a
`0b` number, so the plain functions (GLIBC_2.2.5) do their job. In the dynamic symbol
table each such import is renamed to its plain name (the string "strtol" already ends
"__isoc23_strtol": the name's offset moves 9 bytes on, nothing is rewritten) and
re-versioned to GLIBC_2.2.5; the GLIBC_2.38 requirement, then used by nothing, is renamed
to GLIBC_2.2.5 (its hash too), since the loader checks every requirement a binary lists.
Afterwards no requirement newer than the host's glibc may remain: one that does is an
error naming it (a newer Apptainer that needs more than these two, say).

Written by hand with `struct`, not with an ELF library: the change is three fields in
place, the standard library reads them, and patchelf cannot rename symbol versions.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

PLAIN = {b"__isoc23_strtol": b"strtol", b"__isoc23_strtoul": b"strtoul"}
PREFIX = len(b"__isoc23_")
OLD_ENOUGH = b"GLIBC_2.2.5"
SHT_DYNSYM, SHT_VERNEED, SHT_VERSYM = 11, 0x6FFFFFFE, 0x6FFFFFFF


class PatchError(Exception):
    """A binary this tool cannot make run on the host's glibc (one line, names why)."""


def elf_hash(name: bytes) -> int:
    h = 0
    for c in name:
        h = ((h << 4) + c) & 0xFFFFFFFF
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def version_key(name: str) -> tuple[int, ...]:
    """GLIBC_2.38 -> (2, 38)."""
    return tuple(int(p) for p in name.split("_", 1)[1].split("."))


@dataclass
class Need:
    offset: int  # of its Elf64_Vernaux in the file
    library: str
    name: str
    index: int  # the version index symbols carry (vna_other)


class Elf:
    def __init__(self, data: bytearray, path: str):
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            raise PatchError(f"{path}: not a 64-bit little-endian ELF file")
        self.data, self.path = data, path
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
        self.sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]

    def section(self, kind: int) -> tuple[int, ...]:
        found = [s for s in self.sections if s[1] == kind]
        if not found:
            raise PatchError(f"{self.path}: no section of type {kind:#x} (a static or stripped binary?)")
        return found[0]

    def string(self, strtab: tuple[int, ...], offset: int) -> bytes:
        start = strtab[4] + offset
        return bytes(self.data[start : self.data.index(b"\0", start)])

    def needs(self) -> list[Need]:
        verneed = self.section(SHT_VERNEED)
        strtab = self.sections[verneed[6]]
        out, at = [], verneed[4]
        for _ in range(verneed[7]):  # sh_info: the number of Elf64_Verneed entries
            _, count, file_, aux, nxt = struct.unpack_from("<HHIII", self.data, at)
            library = self.string(strtab, file_).decode()
            a = at + aux
            for _ in range(count):
                _, _, other, name, anext = struct.unpack_from("<IHHII", self.data, a)
                out.append(Need(a, library, self.string(strtab, name).decode(), other))
                a += anext
            at += nxt
        return out

    def symbols(self) -> list[tuple[int, bytes, int]]:
        """(index, name, version index) of every dynamic symbol."""
        dynsym, versym = self.section(SHT_DYNSYM), self.section(SHT_VERSYM)
        strtab = self.sections[dynsym[6]]
        out = []
        for i in range(dynsym[5] // 24):
            (name,) = struct.unpack_from("<I", self.data, dynsym[4] + 24 * i)
            (version,) = struct.unpack_from("<H", self.data, versym[4] + 2 * i)
            out.append((i, self.string(strtab, name), version & 0x7FFF))
        return out


def too_new(elf: Elf, host: tuple[int, ...]) -> list[Need]:
    return [n for n in elf.needs() if n.name.startswith("GLIBC_") and version_key(n.name) > host]


def patch(path: Path, host: tuple[int, ...]) -> list[str]:
    """Patch `path` in place (written whole: a temporary file renamed over it); returns what
    changed, [] when nothing needed to (a second call)."""
    data = bytearray(path.read_bytes())
    elf = Elf(data, str(path))
    needs = elf.needs()
    by_index = {n.index: n for n in needs}
    old = next((n for n in needs if n.library.startswith("libc.so") and n.name == OLD_ENOUGH.decode()), None)
    changed = []
    dynsym, versym = elf.section(SHT_DYNSYM), elf.section(SHT_VERSYM)
    for i, name, version in elf.symbols():
        need = by_index.get(version)
        if name not in PLAIN or need is None or version_key(need.name) <= host:
            continue
        if old is None:
            raise PatchError(
                f"{path}: imports {name.decode()} but nothing of {OLD_ENOUGH.decode()} to re-version it to"
            )
        at = dynsym[4] + 24 * i
        struct.pack_into("<I", data, at, struct.unpack_from("<I", data, at)[0] + PREFIX)
        hidden = struct.unpack_from("<H", data, versym[4] + 2 * i)[0] & 0x8000
        struct.pack_into("<H", data, versym[4] + 2 * i, hidden | old.index)
        changed.append(f"{name.decode()} ({need.name}) -> {PLAIN[name].decode()} ({old.name})")
    used = {v for _, _, v in elf.symbols()}
    for n in needs:
        if (
            n.name.startswith("GLIBC_")
            and version_key(n.name) > host
            and n.index not in used
            and old is not None
        ):
            name_at = struct.unpack_from("<I", data, old.offset + 8)[0]  # the old requirement's name string
            struct.pack_into("<IHHI", data, n.offset, elf_hash(OLD_ENOUGH), 0, n.index, name_at)
            changed.append(f"requirement {n.name} -> {old.name} (no symbol uses it)")
    left = too_new(Elf(data, str(path)), host)
    if left:
        needed = ", ".join(sorted({n.name for n in left}, key=version_key))
        users = sorted(
            name.decode() for _, name, v in Elf(data, str(path)).symbols() if v in {n.index for n in left}
        )
        raise PatchError(
            f"{path}: still needs {needed} (host glibc {'.'.join(map(str, host))}) for "
            f"{', '.join(users) or 'a requirement'}: this Apptainer cannot run here"
        )
    if changed:
        tmp = path.with_name(path.name + ".patching")
        tmp.write_bytes(data)
        os.chmod(tmp, path.stat().st_mode)
        os.replace(tmp, path)
    return changed


def host_glibc() -> tuple[int, ...]:
    return tuple(int(p) for p in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split("."))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("binaries", nargs="+", type=Path)
    p.add_argument("--check", action="store_true", help="only list what each needs beyond the host's glibc")
    p.add_argument("--glibc", help="the glibc to patch for (default: the host's), e.g. 2.36")
    args = p.parse_args(argv)
    host = tuple(int(x) for x in args.glibc.split(".")) if args.glibc else host_glibc()
    try:
        for path in args.binaries:
            if args.check:
                need = sorted(
                    {f"{n.name}" for n in too_new(Elf(bytearray(path.read_bytes()), str(path)), host)}
                )
                print(f"{path}: {', '.join(need) or 'nothing newer than the host'}")
                continue
            changed = patch(path, host)
            print(f"{path}: " + ("; ".join(changed) if changed else "nothing to change"))
    except (PatchError, OSError) as err:
        print(f"glibc_compat: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
