"""The sandbox's added start-up per command: `bash -c true` plain vs inside bubblewrap, same run.

    .venv/bin/python benchmarks/bench_sandbox.py [--runs 200]

Runs are interleaved (plain, sandboxed, plain, ...) so load on a shared machine hits both
alike. Measured three ways:

1. the bare process: `subprocess.run(["bash", "-c", "true"])` against the full wrapped argv
   (`daemon.execution.sandbox.prepare`: namespaces, mounts, hidden paths, seccomp, and as root
   the pids cgroup; also measured without it: an ordinary user needs none) with the limits line;
2. through the runner: `daemon.execution.runner.run_command("true", ...)` without and with a policy
   (adds the allowlisted environment, redaction and the blocked check);
3. marat's `execute` (adds the cwd pipe) without and with a policy;
4. staged writes: a command that writes a tree, with its writes staged (lmd-stage's overlay,
   then reading the stage, judging and applying every write: daemon/execution/writes.py)
   against the same sandbox binding the tree writable directly (unstaged, as before staging),
   for one write and for 1,000 and 10,000 new files per command (Landlock off in both, so
   only staging differs).

Prints the medians, the added milliseconds and the ratio, and the CPU time the processes used
(wall time on a busy shared machine mostly measures waiting). Target: under 15 ms added
(median wall time).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from daemon.execution import sandbox  # noqa: E402
from daemon.execution.runner import run_command  # noqa: E402
from daemon.execution.sandbox.staging import new_stage  # noqa: E402
from daemon.execution.writes import settle  # noqa: E402
from plugins.marat.execute import execute  # noqa: E402


def policy_for(cwd: str) -> sandbox.Policy:
    home = os.path.expanduser("~")
    hidden = tuple(sandbox.hidden_paths(home, os.path.join(home, ".local/share/lmd")))
    return sandbox.Policy("read-only", cwd, home, hidden, limits=sandbox.Limits())


CPU: dict[str, list[float]] = {}  # CPU seconds of the child processes per run, by variant


def children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def bare(
    runs: int, cwd: str, pol: sandbox.Policy, found: sandbox.Availability, name: str
) -> tuple[list[float], list[float]]:
    plain, boxed = [], []
    cpu_plain, cpu_boxed = CPU.setdefault("plain", []), CPU.setdefault(name, [])
    env = sandbox.command_env(cwd)
    for _ in range(runs):
        start, cpu = time.perf_counter(), children_cpu()
        subprocess.run(["bash", "-c", "true"], cwd=cwd, env=env, check=True)
        plain.append(time.perf_counter() - start)
        cpu_plain.append(children_cpu() - cpu)
        start, cpu = time.perf_counter(), children_cpu()
        p = sandbox.prepare(pol, ["bash", "-c", sandbox.wrap_script(pol, "true")], found)
        subprocess.run(p.argv, cwd=cwd, env={**env, **p.env}, pass_fds=p.pass_fds, check=True)
        p.close()
        boxed.append(time.perf_counter() - start)
        cpu_boxed.append(children_cpu() - cpu)
    return plain, boxed


async def through(runs: int, cwd: str, pol: sandbox.Policy, fn) -> tuple[list[float], list[float]]:
    plain, boxed = [], []
    for _ in range(runs):
        start = time.perf_counter()
        r = await fn("true", cwd, 10, 2000)
        plain.append(time.perf_counter() - start)
        start = time.perf_counter()
        r = await fn("true", cwd, 10, 2000, sandbox=pol)
        boxed.append(time.perf_counter() - start)
        result = getattr(r, "result", r)
        assert result.exit_code == 0 and result.sandbox == "read-only", result
    return plain, boxed


def unstaged_argv(tree: str, found: sandbox.Availability, script: str) -> sandbox.Prepared:
    """The sandbox with `tree` bound writable directly (what workspace-write did before its
    writes were staged): the read-only sandbox's argv with one more bind."""
    pol = sandbox.Policy("read-only", tree, tree, limits=sandbox.Limits())
    p = sandbox.prepare(pol, ["bash", "-c", sandbox.wrap_script(pol, script)], found)
    at = p.argv.index("--chdir")
    p.argv[at:at] = ["--bind", tree, tree]
    return p


def staged_writes(
    runs: int, script: str, found: sandbox.Availability, cpu: dict[str, list[float]]
) -> tuple[list, list]:
    """(unstaged, staged) wall times of `script` writing a fresh tree, interleaved; lmd's
    own CPU time for each staged run (making the stage, reading, judging and applying it)
    goes to `cpu`. (The command's own processes are reaped inside the sandbox's pid
    namespace, so their CPU time is not reported to lmd.)"""
    unstaged, staged = [], []
    base = tempfile.mkdtemp(prefix="lmd-bench-staged-")
    os.chmod(base, 0o755)
    home = os.path.expanduser("~")
    for i in range(runs):
        for kind in ("unstaged", "staged"):
            tree = os.path.join(base, f"{kind}-{i}")
            os.mkdir(tree)
            if os.geteuid() == 0 and kind == "unstaged":
                os.chmod(tree, 0o777)  # as root the command runs as nobody: let it write
            env = sandbox.command_env(tree)
            start, used = time.perf_counter(), time.process_time()
            if kind == "unstaged":
                p = unstaged_argv(tree, found, script)
            else:
                limits, stages = sandbox.Limits(), f"{base}/stages"
                pol = sandbox.Policy("workspace-write", tree, home, writable=(tree,),
                                     limits=limits, stage_root=stages)  # fmt: skip
                stage = new_stage(tree, pol.stage_root)
                argv = ["bash", "-c", sandbox.wrap_script(pol, script)]
                p = sandbox.prepare(pol, argv, found, stage)
            subprocess.run(p.argv, cwd=tree, env={**env, **p.env}, pass_fds=p.pass_fds,
                           check=True, stdout=subprocess.DEVNULL)  # fmt: skip
            p.close()
            if kind == "staged":
                done = settle(stage, home)
                assert not done.held and not done.failed, done
            (staged if kind == "staged" else unstaged).append(time.perf_counter() - start)
            cpu.setdefault(kind, []).append(time.process_time() - used)
            subprocess.run(["rm", "-rf", tree], check=True)
    os.rmdir(os.path.join(base, "stages"))
    os.rmdir(base)
    return unstaged, staged


WORDS = ("plain", "sandboxed")


def report(name: str, plain: list[float], boxed: list[float], words: tuple = WORDS) -> float:
    p, b = statistics.median(plain) * 1000, statistics.median(boxed) * 1000
    print(
        f"  {name:<34} {words[0]} {p:6.2f} ms   {words[1]} {b:6.2f} ms   "
        f"added {b - p:6.2f} ms   x{b / p:.2f}"
    )
    return b - p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200, help="runs of each variant")
    args = ap.parse_args()
    found = sandbox.detect()
    if not found.available:
        print(f"No sandbox here: {found.reason} To get one, {found.remedy}.")
        sys.exit(1)
    print(found.sentence())
    cwd = tempfile.mkdtemp(prefix="lmd-bench-sandbox-")
    os.chmod(cwd, 0o755)  # as root, commands run as nobody, who must enter it
    pol = policy_for(cwd)
    for _ in range(5):  # warm the page cache and the binaries
        bare(1, cwd, pol, found, "warm")
    CPU.clear()
    print(f"median of {args.runs} interleaved runs of `true` (load {os.getloadavg()[0]:.1f}):")
    added = report("bash -c (subprocess.run)", *bare(args.runs, cwd, pol, found, "sandboxed"))
    if found.pids_cgroup:  # root: joining a pids cgroup is part of the cost
        no_cgroup = dataclasses.replace(found, pids_cgroup=None)
        report(
            "  same, without the pids cgroup",
            *bare(args.runs, cwd, pol, no_cgroup, "sandboxed, no cgroup"),
        )
    if found.landlock:  # the Landlock applier runs first inside the sandbox
        no_landlock = dataclasses.replace(found, landlock=None)
        report(
            "  same, without Landlock",
            *bare(args.runs, cwd, pol, no_landlock, "sandboxed, no Landlock"),
        )
    report(
        "daemon.execution.runner.run_command",
        *asyncio.run(through(args.runs, cwd, pol, run_command)),
    )
    report("marat execute", *asyncio.run(through(args.runs, cwd, pol, execute)))
    if found.stage:
        print("staged writes per command (median wall time; unstaged: the tree bound writable):")
        plain = dataclasses.replace(found, landlock=None)
        for name, script, runs in (
            ("one write", "echo x > out.txt", max(10, args.runs // 4)),
            ("1,000 new files", "seq -f 'f%04g' 1 1000 | xargs touch", 10),
            ("10,000 new files", "seq -f 'f%05g' 1 10000 | xargs touch", 3),
        ):
            cpu: dict[str, list[float]] = {}
            report(f"  {name}", *staged_writes(runs, script, plain, cpu), ("unstaged", "staged"))
            own = statistics.median(cpu["staged"]) * 1000
            print(f"    lmd's own CPU time to stage, judge and apply: {own:.1f} ms")
    else:
        print(f"no staged writes here: {found.stage_problem}")
    base = statistics.median(CPU["plain"]) * 1000
    print("CPU time of the processes per run (user + system, median; less sensitive to load):")
    for name, samples in CPU.items():
        print(f"  {name:<34} {statistics.median(samples) * 1000:6.2f} ms")
    print(f"  added by the sandbox: {statistics.median(CPU['sandboxed']) * 1000 - base:.2f} ms")
    verdict = "within" if added < 15 else "over"
    print(f"sandbox start-up added per command: {added:.2f} ms ({verdict} the 15 ms target)")
    os.rmdir(cwd)


if __name__ == "__main__":
    main()
