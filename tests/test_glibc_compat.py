"""containers/glibc_compat.py: Debian unstable's Apptainer binaries made to run on Debian 12's
glibc 2.36 (containers/install-apptainer.sh), on the pinned package's real binaries when
../shared/apptainer/ is beside the checkout (skipped otherwise)."""

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from psrnn.config import ROOT

sys.path.insert(0, str(ROOT / "containers"))
import glibc_compat as G  # noqa: E402

DEB = ROOT.parent / "shared" / "apptainer" / "apptainer_1.4.5-2_amd64.deb"
BINARIES = ("usr/bin/apptainer", "usr/lib/x86_64-linux-gnu/apptainer/bin/starter")


@pytest.fixture
def unpacked(tmp_path):
    if not DEB.exists() or not shutil.which("dpkg-deb"):
        pytest.skip(f"needs {DEB} and dpkg-deb")
    subprocess.run(["dpkg-deb", "-x", str(DEB), str(tmp_path)], check=True)
    return [tmp_path / b for b in BINARIES]


def glibc_versions(path: Path) -> set[str]:
    elf = G.Elf(bytearray(path.read_bytes()), str(path))
    return {n.name for n in elf.needs() if n.name.startswith("GLIBC_")}


def test_the_c23_imports_are_pointed_at_the_plain_ones_and_the_binary_runs(unpacked):
    apptainer, starter = unpacked
    assert "GLIBC_2.38" in glibc_versions(apptainer) and "GLIBC_2.38" in glibc_versions(starter)
    assert G.patch(apptainer, (2, 36)) == [
        "__isoc23_strtol (GLIBC_2.38) -> strtol (GLIBC_2.2.5)",
        "requirement GLIBC_2.38 -> GLIBC_2.2.5 (no symbol uses it)",
    ]
    assert len(G.patch(starter, (2, 36))) == 3  # strtoul, strtol, the requirement
    for binary in (apptainer, starter):
        assert max(glibc_versions(binary), key=G.version_key) == "GLIBC_2.34"
        symbols = {name: v for _, name, v in G.Elf(bytearray(binary.read_bytes()), str(binary)).symbols()}
        assert b"__isoc23_strtol" not in symbols and b"strtol" in symbols
        assert G.patch(binary, (2, 36)) == []  # a second call changes nothing
    if G.host_glibc() <= (2, 37):  # the point of it: the patched binary runs on this glibc
        out = subprocess.run([str(apptainer), "--version"], capture_output=True, text=True)
        assert out.stdout.strip() == "apptainer version 1.4.5", out.stderr


def test_a_binary_that_needs_more_of_glibc_is_refused_and_left_as_it_was(unpacked, capsys):
    starter = unpacked[1]
    before = hashlib.sha256(starter.read_bytes()).hexdigest()
    assert G.main(["--glibc", "2.31", str(starter)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"glibc_compat: {starter}: still needs GLIBC_2.32, GLIBC_2.33, GLIBC_2.34 (host glibc 2.31) for "
    )
    assert err.endswith(": this Apptainer cannot run here")
    assert hashlib.sha256(starter.read_bytes()).hexdigest() == before
    assert G.main(["--check", "--glibc", "2.36", str(starter)]) == 0
    assert capsys.readouterr().out.strip() == f"{starter}: GLIBC_2.38"


def test_a_file_that_is_not_an_elf_binary_is_one_line(tmp_path, capsys):
    text = tmp_path / "script.sh"
    text.write_text("#!/bin/sh\n")
    assert G.main([str(text)]) == 2
    assert capsys.readouterr().err.strip() == f"glibc_compat: {text}: not a 64-bit little-endian ELF file"


def test_the_elf_hash_is_the_loaders():
    # values objdump -p prints for these requirements (Version References of the binaries)
    assert G.elf_hash(b"GLIBC_2.2.5") == 0x09691A75 and G.elf_hash(b"GLIBC_2.34") == 0x069691B4
