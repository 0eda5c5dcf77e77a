"""py-spy flame graphs of chosen roles during a measured window.

py-spy attaches with ptrace (it works as root here); when it cannot, the case goes on
and the output says why for that role instead of a file. Profiles come from their
own pass of a case, never from the pass whose CPU figures are reported: sampling
pauses the process and would add to its CPU.

``gil`` (the default) samples only the thread holding the GIL: in these processes
that is the Python CPU, and it keeps out threads that are merely runnable — on a
loaded machine a thread woken from ``Condition.wait`` waits for a core long enough
for py-spy to count its wait as work. Native time without the GIL (gRPC core, the
kernel's side of syscalls) is what it leaves out; ``gil=False`` shows all threads."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from rocketcluster.ctl.bench.cpu.measure import Window


def py_spy() -> str | None:
    """py-spy from the venv this runs in, else from PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


@dataclass
class Profiler:
    """Records ``roles`` (names in the case's role -> pid map) into
    ``out_dir/flame-<case>-<role>-<stamp>.svg`` between the window's start and end."""

    out_dir: Path
    case: str
    stamp: str
    roles: tuple[str, ...]
    prefix: str = "flame"
    gil: bool = True
    files: dict[str, str] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    _running: dict[str, tuple[subprocess.Popen[str], Path]] = field(default_factory=dict)

    def window(self) -> Window:
        return Window(on_start=self.start, on_end=self.stop)

    def start(self, pids: dict[str, int]) -> None:
        binary = py_spy()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for role in self.roles:
            if binary is None:
                self.problems[role] = "py-spy is not installed (uv sync installs it as a dev tool)"
                continue
            if role not in pids:
                self.problems[role] = f"no {role} process in this case"
                continue
            path = self.out_dir / f"{self.prefix}-{self.case}-{role}-{self.stamp}.svg"
            argv = [binary, "record", "--pid", str(pids[role]), "-o", str(path)]
            argv += ["--format", "flamegraph", "--duration", "600"]
            argv += ["--gil"] if self.gil else []
            proc = subprocess.Popen(
                argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
            )
            self._running[role] = (proc, path)

    def stop(self, pids: dict[str, int]) -> None:
        for proc, _ in self._running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # py-spy writes its graph on Ctrl-C
        for role, (proc, path) in self._running.items():
            try:
                _, err = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                _, err = proc.communicate()
            if path.exists() and path.stat().st_size > 0:
                self.files[role] = str(path)
            else:
                self.problems[role] = f"py-spy wrote nothing (exit {proc.returncode}): {err[-400:]}"
        self._running.clear()
