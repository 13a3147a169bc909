#!/usr/bin/python3
"""trace_check.py -- validates a Chrome trace written by `ampprof export --format=chrome`
against the Trace Event Format (the JSON object form) and the rules ampkit's traces keep:

  * the top level: "traceEvents" (a list), "displayTimeUnit", "otherData.format_version";
  * every event: a non-empty "name" and "cat", a known "ph", integer "pid"; "tid" on every
    event but process metadata; "ts" (microseconds, >= 0) on every event but metadata;
    "X" events a "dur" >= 0; counters ("C") a non-empty "args" of finite numbers;
    metadata ("M") a known name and, for process_name / thread_name, a string args.name;
  * every pid has process_name, every (pid, tid) with events has thread_name;
  * complete events on one thread nest: two slices of a thread either follow each other or
    one holds the other (times compared in integer nanoseconds).

  trace_check.py TRACE.json [--expect-threads N]

Prints one line per problem (at most 20) and exits 1 if there is any, else prints a summary
and exits 0.
"""
import json
import math
import sys

PHASES = {"X", "B", "E", "i", "I", "C", "M", "b", "e", "n", "s", "t", "f"}
META = {"process_name", "thread_name", "process_sort_index", "thread_sort_index",
        "process_labels"}


def ns(us):
    return round(us * 1000)


def check(doc, expect_threads=None):
    errors = []
    if not isinstance(doc, dict):
        return ["top level is not an object"]
    events = doc.get("traceEvents")
    if not isinstance(events, list):
        return ["no traceEvents list"]
    if doc.get("displayTimeUnit") not in ("ms", "ns"):
        errors.append("displayTimeUnit is not 'ms' or 'ns'")
    od = doc.get("otherData")
    if not isinstance(od, dict) or not isinstance(od.get("format_version"), int):
        errors.append("otherData.format_version missing")
    proc_names, thread_names = set(), set()
    used_pids, used_threads = set(), set()
    slices = {}
    for i, e in enumerate(events):
        where = "event %d (%s)" % (i, json.dumps(e)[:120])
        if not isinstance(e, dict):
            errors.append(where + ": not an object")
            continue
        ph = e.get("ph")
        if ph not in PHASES:
            errors.append(where + ": unknown ph")
            continue
        for key in ("name", "cat"):
            if not isinstance(e.get(key), str) or not e[key]:
                errors.append(where + ": no %s" % key)
        pid, tid = e.get("pid"), e.get("tid")
        if not isinstance(pid, int) or isinstance(pid, bool):
            errors.append(where + ": pid is not an integer")
            continue
        needs_tid = not (ph == "M" and e.get("name", "").startswith("process_")) and ph != "C"
        if needs_tid and (not isinstance(tid, int) or isinstance(tid, bool)):
            errors.append(where + ": tid is not an integer")
            continue
        if "args" in e and not isinstance(e["args"], dict):
            errors.append(where + ": args is not an object")
        if ph == "M":
            if e.get("name") not in META:
                errors.append(where + ": unknown metadata name")
            elif e["name"] in ("process_name", "thread_name"):
                if not isinstance(e.get("args", {}).get("name"), str):
                    errors.append(where + ": no args.name")
                elif e["name"] == "process_name":
                    proc_names.add(pid)
                else:
                    thread_names.add((pid, tid))
            continue
        ts = e.get("ts")
        if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not ts >= 0:
            errors.append(where + ": ts is not a number >= 0")
            continue
        used_pids.add(pid)
        if ph == "C":
            args = e.get("args")
            if not isinstance(args, dict) or not args or not all(
                    isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                    for v in args.values()):
                errors.append(where + ": a counter needs args of finite numbers")
            continue
        used_threads.add((pid, tid))
        if ph == "X":
            dur = e.get("dur")
            if not isinstance(dur, (int, float)) or isinstance(dur, bool) or not dur >= 0:
                errors.append(where + ": dur is not a number >= 0")
                continue
            slices.setdefault((pid, tid), []).append((ns(ts), ns(ts) + ns(dur), i, e["name"]))
    for pid in sorted(used_pids - proc_names):
        errors.append("pid %d has no process_name" % pid)
    for pt in sorted(used_threads - thread_names):
        errors.append("thread pid %d tid %d has no thread_name" % pt)
    for (pid, tid), lst in sorted(slices.items()):
        lst.sort(key=lambda s: (s[0], -(s[1] - s[0]), s[2]))
        stack = []
        for b, end, i, name in lst:
            while stack and stack[-1][1] <= b:
                stack.pop()
            if stack and end > stack[-1][1]:
                top = stack[-1]
                errors.append("pid %d tid %d: '%s' [%d, %d] ns overlaps '%s' [%d, %d] ns by %d ns"
                              % (pid, tid, name, b, end, top[3], top[0], top[1], top[1] - b))
                continue
            stack.append((b, end, i, name))
    if expect_threads is not None and len(thread_names) != expect_threads:
        errors.append("%d thread_name tracks, expected %d" % (len(thread_names), expect_threads))
    return errors


def main(argv):
    if len(argv) < 2:
        print("usage: trace_check.py TRACE.json [--expect-threads N]", file=sys.stderr)
        return 2
    expect = None
    if len(argv) == 4 and argv[2] == "--expect-threads":
        expect = int(argv[3])
    try:
        with open(argv[1], encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError) as err:
        print("trace_check: %s: %s" % (argv[1], err))
        return 1
    errors = check(doc, expect)
    for line in errors[:20]:
        print("trace_check: " + line)
    if errors:
        print("trace_check: %d problem(s)" % len(errors))
        return 1
    n = len(doc["traceEvents"])
    print("trace_check: %d events ok" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
