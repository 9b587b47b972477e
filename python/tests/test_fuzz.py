"""The Python API fuzz test (issue 12, "must exist" item 5): fuzz_api.py in a child process, so
that a crash (a segfault, an abort inside the library) fails this test with the seed and the case
that killed it instead of killing the pytest run.

    FA4_FUZZ_SEED=S      reproduce a run (default: a fresh random seed, printed)
    FA4_FUZZ_CASES=N     cases per run (default 300: about 2 s)
    FA4_FUZZ_SECONDS=T   run for T seconds instead (e.g. 600 for a long soak)
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_fuzz_public_api():
    seed = int(os.environ.get("FA4_FUZZ_SEED") or int.from_bytes(os.urandom(4), "little"))
    cases = int(os.environ.get("FA4_FUZZ_CASES", "300"))
    seconds = float(os.environ.get("FA4_FUZZ_SECONDS", "0"))
    cmd = [sys.executable, os.path.join(HERE, "fuzz_api.py"), "--seed", str(seed), "--cases", str(cases)]
    if seconds > 0:
        cmd += ["--seconds", str(seconds)]
    print(f"seed={seed}")
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=max(600.0, 2 * seconds + 60), cwd=HERE)
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-15:])
    how = f"killed by signal {-r.returncode}" if r.returncode < 0 else f"exit {r.returncode}"
    assert r.returncode == 0, (f"fuzz {how} (reproduce: FA4_FUZZ_SEED={seed} FA4_FUZZ_CASES={cases} "
                               f"python {cmd[1]} --seed {seed} --cases {cases})\n{tail}")
    summary = r.stdout.strip().splitlines()[-1]
    assert summary.startswith("fuzz: ") and f"seed={seed}" in summary, tail
    print(summary)
