#!/usr/bin/env python3
"""Fails when a function in src/ (tests aside) is longer than .clang-tidy's LineThreshold.

Runs clang-tidy's readability-function-size over every src/ source the build compiled. A
function's length depends only on its own file's text, so a file's verdict is cached under
~/.cache/motley/function-size keyed by the file, .clang-tidy and clang-tidy's version: a run
after a small change re-checks only the files it touched (the whole tree takes ~6 minutes on
2 cores, a cached run seconds).

  scripts/check-function-size.py [--build build] [--jobs 2]

clang-tidy parses with clang, which trips over libtorch 1.13's headers under C++20 (c10::IValue
"incomplete"): those errors are in torch's templates, not in our functions, and the check still
sees every function body, so compiler errors are ignored here (g++ is the compiler that judges
the code). The PCH flags CMake adds for g++ are stripped: clang cannot read g++'s PCH.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARNING = re.compile(r"^(\S+?):(\d+):\d+: warning: function '([^']+)' exceeds recommended size")
LINES = re.compile(r"note: (\d+) lines including whitespace and comments \(threshold (\d+)\)")


def checked_sources(build):
    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        sys.exit(f"{db}: not found; configure first (cmake -S . -B {build})")
    entries, seen = [], set()
    for e in json.load(open(db)):
        rel = os.path.relpath(e["file"], ROOT)
        if not rel.startswith("src/") or rel.endswith("_test.cc") or rel in seen:
            continue
        seen.add(rel)
        command = re.sub(r" -Winvalid-pch -include \S+cmake_pch\.hxx", "", e["command"])
        entries.append(dict(e, command=command.replace(" -Werror", "")))
    return entries


def run_one(tidy, db_dir, entry, cache_dir, salt):
    text = open(entry["file"], "rb").read()
    key = hashlib.sha256(salt + text).hexdigest()
    cached = os.path.join(cache_dir, key)
    if os.path.exists(cached):
        return entry["file"], json.load(open(cached))
    out = subprocess.run([tidy, "-p", db_dir, "--quiet", entry["file"]], capture_output=True, text=True).stdout
    found, pending = [], None
    for line in out.splitlines():
        m = WARNING.match(line)
        if m and os.path.abspath(m.group(1)) == os.path.abspath(entry["file"]):
            pending = [int(m.group(2)), m.group(3)]
            continue
        n = LINES.search(line)
        if n and pending:
            found.append(pending + [int(n.group(1)), int(n.group(2))])
            pending = None
    os.makedirs(cache_dir, exist_ok=True)
    json.dump(found, open(cached, "w"))
    return entry["file"], found


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = parser.parse_args()
    tidy = "clang-tidy"
    if shutil.which(tidy) is None:
        sys.exit("clang-tidy: not found; scripts/setup.sh installs it (Debian's clang-tidy)")
    version = subprocess.run([tidy, "--version"], capture_output=True, text=True).stdout
    salt = (version + open(os.path.join(ROOT, ".clang-tidy")).read()).encode()
    cache_dir = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "motley",
                             "function-size")
    entries = checked_sources(args.build)
    bad = []
    with tempfile.TemporaryDirectory() as db_dir:
        json.dump(entries, open(os.path.join(db_dir, "compile_commands.json"), "w"))
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            jobs = [pool.submit(run_one, tidy, db_dir, e, cache_dir, salt) for e in entries]
            for job in jobs:
                file, found = job.result()
                bad += [(os.path.relpath(file, ROOT), *f) for f in found]
    for file, line, name, lines, limit in sorted(bad):
        print(f"{file}:{line}: function '{name}' is {lines} lines (limit {limit}, .clang-tidy): "
              "split it into named phases")
    print(f"{len(entries)} sources checked; {len(bad)} functions over the limit")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
