"""GPU claims (psrnn.gpus) without a GPU: the claims are lock files, so processes that
each claim one of N devices are real processes here, and the devices are only indices."""

import os
import signal
import subprocess
import sys
import time

import pytest

from psrnn import gpus
from psrnn.errors import UserError

CLAIM = (
    "import sys, time; from pathlib import Path; from psrnn import gpus; "
    "i = gpus.claim(int(sys.argv[1]), Path(sys.argv[2]), poll_s=0.05, per_device=int(sys.argv[4])); "
    "print(i, flush=True); time.sleep(float(sys.argv[3]))"
)


def claimer(count: int, locks, hold_s: float, per_device: int = 1) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CLAIM, str(count), str(locks), str(hold_s), str(per_device)],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_parallel_jobs_get_distinct_devices_and_a_killed_job_frees_its_own(tmp_path):
    a, b = claimer(2, tmp_path, 60), claimer(2, tmp_path, 60)
    ia, ib = int(a.stdout.readline()), int(b.stdout.readline())
    assert {ia, ib} == {0, 1}
    c = claimer(2, tmp_path, 0)  # both claimed: waits
    time.sleep(1.0)
    assert c.poll() is None
    a.send_signal(signal.SIGKILL)  # a crash releases the claim (flock dies with the process)
    a.wait()
    freed = int(c.stdout.readline())
    c.wait(timeout=30)
    assert freed == ia
    assert (tmp_path / f"gpu{ib}.lock").read_text() == f"{b.pid}\n"
    assert sorted(os.listdir(tmp_path)) == ["gpu0.lock", "gpu1.lock"]
    b.kill()
    b.wait()


def test_one_visible_device_claims_nothing(tmp_path):
    assert gpus.claim(1, tmp_path) is None and gpus.claim(0, tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_a_lock_folder_that_is_a_file_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    lock = tmp_path / "locks"
    lock.write_text("")
    monkeypatch.setenv(gpus.LOCKS_ENV, str(lock))
    with pytest.raises(UserError, match=r"^PSRNN_GPU_LOCKS=.*locks: is a file, not a folder"):
        gpus.claim(2)
    assert lock.read_text() == ""


def test_a_claim_is_held_until_released(tmp_path):
    assert gpus.claim(2, tmp_path) == 0
    assert gpus.claim(2, tmp_path) == 1  # a second job in this process gets the other
    gpus.release()
    assert gpus.claim(2, tmp_path) == 0
    gpus.release()


def test_shared_devices_fill_evenly_and_a_job_waits_when_every_slot_is_claimed(tmp_path):
    """Two slots on each of two devices: jobs spread over the devices before they stack;
    a fifth waits and takes the slot a killed job leaves."""
    jobs, placed = [], []
    for _ in range(4):  # one after the other, so the order is the placement rule's
        jobs.append(claimer(2, tmp_path, 60, per_device=2))
        placed.append(int(jobs[-1].stdout.readline()))
    assert placed == [0, 1, 0, 1]
    assert sorted(os.listdir(tmp_path)) == ["gpu0.1.lock", "gpu0.lock", "gpu1.1.lock", "gpu1.lock"]
    fifth = claimer(2, tmp_path, 0, per_device=2)
    time.sleep(1.0)
    assert fifth.poll() is None  # every slot is claimed
    jobs[3].send_signal(signal.SIGKILL)  # held gpu1's second slot
    jobs[3].wait()
    assert int(fifth.stdout.readline()) == 1
    fifth.wait(timeout=30)
    assert (tmp_path / "gpu1.1.lock").read_text() == f"{fifth.pid}\n"
    for job in jobs[:3]:
        job.kill()
        job.wait()


def test_shared_slots_in_one_process_and_one_visible_device_claims_nothing(tmp_path):
    assert [gpus.claim(2, tmp_path, per_device=3) for _ in range(4)] == [0, 1, 0, 1]
    gpus.release()
    assert gpus.claim(1, tmp_path / "one", per_device=4) is None  # nothing to choose
    assert not (tmp_path / "one").exists()


def test_jobs_per_gpu_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(gpus.JOBS_PER_GPU_ENV, raising=False)
    assert gpus.jobs_per_gpu() == 1  # started by hand: a GPU of its own
    monkeypatch.setenv(gpus.JOBS_PER_GPU_ENV, "4")
    assert gpus.jobs_per_gpu() == 4
    for bad in ("0", "x", "-2", "1.5"):
        monkeypatch.setenv(gpus.JOBS_PER_GPU_ENV, bad)
        with pytest.raises(UserError) as err:
            gpus.jobs_per_gpu()
        assert str(err.value) == f"PSRNN_JOBS_PER_GPU={bad!r}: expected an integer >= 1"


@pytest.mark.parametrize("visible, count", [("0,2", 2), ("3", 1), ("", 0), ("-1", 0)])
def test_host_gpus_follows_cuda_visible_devices(monkeypatch, visible, count):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert gpus.host_gpus() == count


def test_host_gpus_without_a_driver_is_zero(monkeypatch, tmp_path):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no nvidia-smi
    assert gpus.host_gpus() == 0
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: a)'\necho 'GPU 1: NVIDIA H100 (UUID: b)'\n")
    fake.chmod(0o755)
    assert gpus.host_gpus() == 2


def test_the_profile_and_docs_name_the_lock_folder_the_code_uses(monkeypatch):
    """The claims live in /tmp/psrnn-gpus-<numeric uid> (not $USER, which the default
    profile once said): every text that names the folder says the uid."""
    from pathlib import Path

    monkeypatch.delenv(gpus.LOCKS_ENV, raising=False)
    assert gpus.lock_dir() == Path(f"/tmp/psrnn-gpus-{os.getuid()}")
    root = Path(__file__).resolve().parents[1]
    for path in (root / "profiles" / "default" / "config.yaml", root / "docs" / "gpu.md"):
        named = [line for line in path.read_text().splitlines() if "/tmp/psrnn-gpus-" in line]
        assert named and all(("$(id -u)" in n or "<uid>" in n) and "$USER" not in n for n in named), path
