"""File-system situations the tests put a database in. Those that need a mount (root and
the right to mount) skip where they cannot have one, and fail under CI (helpers/system.py)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers.system import unavailable


@contextmanager
def read_only_path(target: Path) -> Iterator[None]:
    """`target` (a file or a directory) read-only for this process, for real: by its mode
    for an ordinary user; for root, whom modes do not stop, by a read-only bind mount."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        mode = target.stat().st_mode & 0o7777
        target.chmod(0o555 if target.is_dir() else 0o444)
        try:
            yield
        finally:
            target.chmod(mode)
        return
    bound = subprocess.run(["mount", "--bind", str(target), str(target)], capture_output=True)
    if bound.returncode != 0:
        unavailable(f"root, and no bind mount possible: {bound.stderr.decode().strip()}")
    try:
        ro = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(target)], capture_output=True, check=False
        )
        if ro.returncode != 0:
            unavailable(f"cannot remount read-only: {ro.stderr.decode().strip()}")
        yield
    finally:
        if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(target)], capture_output=True, check=False)


@contextmanager
def tmpfs(mount_point: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` (as mount's `size=` takes it: 600k, 1m) mounted at `mount_point`
    (created), unmounted afterwards: a small disk to fill. Skips where it cannot mount
    (not root, no mount permission), fails so under CI."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        unavailable("mounting a tmpfs needs root")
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        unavailable(f"cannot mount a tmpfs: {done.stderr.strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        result = subprocess.run(["umount", str(mount_point)], capture_output=True, check=False)
        if result.returncode != 0:
            subprocess.run(["umount", "-l", str(mount_point)], capture_output=True, check=False)


def without_file_mode_override() -> list[str]:
    """A command prefix under which file modes stop this user, as they stop an ordinary
    one: nothing for an ordinary user; for root, setpriv dropping the capabilities that
    let root ignore modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH) from the bounding set,
    so the command runs as root but meets EACCES where a user would. Skips where that is
    not possible (no setpriv, or no right to change the bounding set), fails so under CI."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--"]
    try:
        probe = subprocess.run([*prefix, "true"], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        unavailable("root, and no setpriv to drop CAP_DAC_OVERRIDE")
    if probe.returncode != 0:
        unavailable(f"root, and setpriv cannot drop CAP_DAC_OVERRIDE: {probe.stderr.strip()}")
    return prefix
