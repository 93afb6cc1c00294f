"""Runs a benchmark script once per configuration of PyTorch's caching
allocator, each in a child process of its own, for the *_torch.py
benchmarks that compare PyTorch's default allocator with expandable
segments.

The allocator reads its configuration once, when CUDA is first used, so a
mode cannot change inside one process: the parent (which never imports
torch) starts `python3 SCRIPT --mode MODE ARGS...` for each mode with the
environment set, echoes the child's output and collects its csv lines.
PyTorch 2.9 and later read PYTORCH_ALLOC_CONF, older ones
PYTORCH_CUDA_ALLOC_CONF (still read by newer ones when the other is unset),
so both are set, to the same value, or both removed."""
import os
import subprocess
import sys

MODES = {"default": None, "expandable": "expandable_segments:True"}
CONF_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")


def child_env(mode):
    env = dict(os.environ)
    for var in CONF_VARS:
        env.pop(var, None)
        if MODES[mode] is not None:
            env[var] = MODES[mode]
    return env


def run_modes(script, args, timeout_s=3600):
    """Runs SCRIPT --mode MODE ARGS for every mode; returns ({mode: [csv
    fields after the kind]}, failed modes). A child that fails or hangs is
    reported and its mode left out, so the other mode still runs."""
    rows, failed = {}, []
    for mode in MODES:
        cmd = [sys.executable, script, "--mode", mode, *args]
        print(f"--- {mode}: {' '.join(cmd)}" + (f" with {CONF_VARS[0]}={MODES[mode]}" if MODES[mode] else ""),
              flush=True)
        try:
            done = subprocess.run(cmd, env=child_env(mode), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=timeout_s)
            text, rc = done.stdout, done.returncode
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout or b""  # bytes, whatever text= says
            text = out.decode(errors="replace") if isinstance(out, bytes) else out
            rc = f"timed out after {timeout_s} s"
        sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        rows[mode] = [line.strip().split(",")[2:] for line in text.splitlines() if line.startswith("csv,")]
        if rc != 0:
            print(f"--- {mode}: child failed ({rc})", flush=True)
            failed.append(mode)
    return rows, failed


def parse_mode(argv):
    """(mode, the other arguments) for a child invocation, (None, argv)
    for the parent's."""
    if len(argv) >= 2 and argv[0] == "--mode":
        if argv[1] not in MODES:
            sys.exit(f"unknown mode {argv[1]!r}; modes: {', '.join(MODES)}")
        return argv[1], argv[2:]
    return None, argv


def expandable_in_effect(torch):
    """Whether the allocator makes expandable segments, from a snapshot of
    one block it serves: True or False, or None where the snapshot does not
    say. Leaves the cache empty."""
    ptr = torch.cuda.caching_allocator_alloc(1 << 20)
    try:
        segments = torch.cuda.memory_snapshot()
    finally:
        torch.cuda.caching_allocator_delete(ptr)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    flags = [bool(s["is_expandable"]) for s in segments if isinstance(s, dict) and "is_expandable" in s]
    return any(flags) if flags else None


def check_mode(torch, mode):
    """Exits (status 3) where the allocator's configuration is not the
    mode's, so that a figure is never filed under the wrong mode."""
    seen = expandable_in_effect(torch)
    want = MODES[mode] is not None
    print(f"mode {mode}: PyTorch {torch.__version__}, expandable segments in effect: "
          f"{'unknown (the snapshot does not say)' if seen is None else seen}", flush=True)
    if seen is not None and seen != want:
        print(f"mode {mode}: the allocator's configuration is not this mode's; no figures", flush=True)
        sys.exit(3)
