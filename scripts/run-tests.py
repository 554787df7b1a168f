#!/usr/bin/env python3
"""Runs the workspace's test binaries several at a time (`cargo test` runs them one after
another, and most of their time is spent waiting on the servers they start), then the
doc tests. Each binary's output is printed whole when it ends; the summary lists every
binary with its time and result. Exit status 1 if any failed.

    scripts/run-tests.py [--jobs N] [--only NAME,NAME...] [-- TEST ARGS...]

--jobs: binaries at once (default: CDC_TEST_JOBS, else 3). --only: just the binaries of
these target names (e.g. pg_source_e2e,check), and no doc tests. Arguments after `--` go
to every binary (a test name filter, --nocapture, ...).

Binaries run with the package's directory as their working directory and the
environment `cargo test` gives them (CARGO_MANIFEST_DIR, CARGO_PKG_NAME). The ones that
took longest in the last run (kept in target/test-durations.json) start first.
"""
import json
import os
import subprocess
import sys
import threading
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jobs = int(os.environ.get("CDC_TEST_JOBS", "3"))
only = None
argv = sys.argv[1:]
args = []
while argv:
    a = argv.pop(0)
    if a == "--jobs":
        jobs = int(argv.pop(0))
    elif a == "--only":
        only = set(argv.pop(0).split(","))
    elif a == "--":
        args = argv
        break
    else:
        sys.exit(f"unknown argument {a!r} (test arguments go after --)")

build = subprocess.run(
    ["cargo", "test", "--workspace", "--locked", "--no-run", "--message-format=json-render-diagnostics"],
    cwd=root, stdout=subprocess.PIPE, check=False)
if build.returncode != 0:
    sys.exit(build.returncode)
binaries = []
for line in build.stdout.decode().splitlines():
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m.get("profile", {}).get("test"):
        continue
    t = m["target"]
    pkg_dir = os.path.dirname(m["manifest_path"])
    name = m["package_id"].split("#")[-1].split("@")[0].split("/")[-1]
    label = f"{os.path.basename(pkg_dir) if pkg_dir != root else 'root'}:{t['kind'][0]}:{t['name']}"
    if only is None or t["name"] in only:
        binaries.append((label, m["executable"], pkg_dir, name))
if only is not None and len({b[0].split(":")[-1] for b in binaries}) != len(only):
    sys.exit(f"--only: no test binary named {sorted(only - {b[0].split(':')[-1] for b in binaries})}")

durations_file = os.path.join(root, "target", "test-durations.json")
try:
    with open(durations_file) as f:
        last = json.load(f)
except (OSError, ValueError):
    last = {}
binaries.sort(key=lambda b: -last.get(b[0], 1e9))

lock = threading.Lock()
results = {}
queue = list(binaries)


def worker():
    while True:
        with lock:
            if not queue:
                return
            label, exe, pkg_dir, name = queue.pop(0)
        env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir, CARGO_PKG_NAME=name)
        start = time.time()
        p = subprocess.run([exe] + args, cwd=pkg_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        took = time.time() - start
        with lock:
            results[label] = (p.returncode, took)
            sys.stdout.write(f"\n----- {label} ({took:.0f} s, exit {p.returncode})\n")
            sys.stdout.write(p.stdout.decode(errors="replace"))
            sys.stdout.flush()


threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
for t in threads:
    t.start()
for t in threads:
    t.join()

if not args and only is None:
    with open(durations_file, "w") as f:
        json.dump({k: v[1] for k, v in results.items()}, f)

doc = subprocess.run(["cargo", "test", "--workspace", "--locked", "--doc", "--"] + args, cwd=root) \
    if only is None else subprocess.CompletedProcess([], 0)

print("\n===== test binaries")
failed = [k for k, (rc, _) in results.items() if rc != 0]
for label, (rc, took) in sorted(results.items(), key=lambda kv: -kv[1][1]):
    print(f"{'FAILED' if rc else 'ok    '} {took:7.1f} s  {label}")
if doc.returncode != 0:
    failed.append("doc tests")
print(f"{len(results)} binaries, {len(failed)} failed{': ' + ', '.join(failed) if failed else ''}")
sys.exit(1 if failed else 0)
