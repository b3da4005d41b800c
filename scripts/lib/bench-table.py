#!/usr/bin/env python3
"""Prints the comparison table of `make bench` from $BENCH_RESULTS.

$BENCH_RESULTS holds `key<TAB>value` lines written in one run on one
cluster: project.* and baseline.* by the Rust bench (tests/benches/poller.rs),
graphile.* by bench/peers/perf.js, sql.* by bench_api_sql
(scripts/lib/bench-peers.sh), listing.* by tests/benches/listing.rs (a
table of its own, after the comparison). A key written more than once (scripts/bench.sh
runs the 1-process comparison in interleaved rounds) counts with its best
value: the most per second, the fewest milliseconds, seconds or units of work
(keys ending `_each`). A missing
key prints as "-".

Every ratio of the comparison reads the same way: above 1 the project is
better (more per second, or fewer milliseconds). The listing table's
ratios are multiples of a baseline's latency: above 1 slower than it.
Usage: bench-table.py [RESULTS_FILE].
"""
import os
import sys


def load(path):
    results = {}
    with open(path) as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("\t")
            if sep and key.strip():
                try:
                    figure = float(value)
                except ValueError:
                    continue  # not a figure
                key = key.strip()
                fewer_is_better = key.endswith("_ms") or key.endswith("_s") or key.endswith("_each")
                best = min if fewer_is_better else max
                results[key] = best(results[key], figure) if key in results else figure
    return results


def fmt(value, unit):
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value:,.1f} ms" if value >= 10 else f"{value:,.2f} ms"
    if unit == "s":
        return f"{value:,.1f} s"
    if unit == "each":
        return f"{value:,.3f}" if value < 1 else f"{value:,.2f}"
    if unit == "B":
        return f"{value:,.0f} B"
    return f"{value:,.0f}/s"


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("BENCH_RESULTS", "")
    if not path or not os.path.exists(path):
        sys.exit("bench-table.py: no results file (set BENCH_RESULTS or pass a path)")
    r = load(path)
    get = r.get

    # (what, project key, project label, peer key, peer label, unit, note)
    # unit "/s": ratio project/peer; units "ms", "s", "each" and "B" (fewer
    # is better): ratio peer/project.
    rows = [
        # Equal work first: the peer commits a claim row before each
        # recipient's no-op send and its outcome after, as the project does.
        ("throughput, equal work", "project.poller1", "1 poller, notifications",
         "graphile.equalwork.p1c4", "graphile batched 1 x 4, claim + outcome", "/s", "target >= 2.50"),
        ("drain, equal work", "project.poller1.drain_s", "1 poller, 256/256, 4 in flight",
         "graphile.equalwork.p1c4.drain_s", "graphile batched 1 x 4, claim + outcome", "s", ""),
        ("statements, equal work", "project.poller1.statements_each", "per notification",
         "graphile.equalwork.p1c4.statements_each", "per notification", "each", ""),
        ("WAL records, equal work", "project.poller1.wal_records_each", "per notification",
         "graphile.equalwork.p1c4.wal_records_each", "per notification", "each", "target: project <= 13.6"),
        ("WAL bytes, equal work", "project.poller1.wal_bytes_each", "per notification",
         "graphile.equalwork.p1c4.wal_bytes_each", "per notification", "B", ""),
        # The no-op job comparison: read beside its per-unit work below.
        ("throughput, 1 process", "project.poller1", "1 poller, notifications",
         "graphile.batched.p1c4", "graphile batched, 1 proc x 4, no-op jobs", "/s", ""),
        ("drain, 1 process", "project.poller1.drain_s", "1 poller, 256/256, 4 in flight",
         "graphile.batched.p1c4.drain_s", "graphile batched, 1 proc x 4", "s", ""),
        # What the 1-process drains cost the database, per notification and
        # per job (pg_stat_statements: the statements' own WAL).
        ("statements, 1 process", "project.poller1.statements_each", "per notification",
         "graphile.batched.p1c4.statements_each", "per job", "each", ""),
        ("WAL records, 1 process", "project.poller1.wal_records_each", "per notification",
         "graphile.batched.p1c4.wal_records_each", "per job", "each", ""),
        ("WAL bytes, 1 process", "project.poller1.wal_bytes_each", "per notification",
         "graphile.batched.p1c4.wal_bytes_each", "per job", "B", ""),
        ("throughput, defaults", "project.poller1.defaults", "the template's defaults",
         "graphile.batched.p1c4", "graphile batched, 1 proc x 4", "/s", ""),
        ("drain, defaults", "project.poller1.defaults.drain_s", "the template's defaults",
         "graphile.batched.p1c4.drain_s", "graphile batched, 1 proc x 4", "s", ""),
        ("throughput, 4 processes", "project.poller4", "4 pollers, notifications",
         "graphile.batched.p4c24", "graphile batched, 4 procs x 24", "/s", ""),
        ("drain, 4 processes", "project.poller4.drain_s", "4 pollers, 256/256, 4 in flight",
         "graphile.batched.p4c24.drain_s", "graphile batched, 4 procs x 24", "s", ""),
        ("throughput, per-job mode", "project.poller1", "1 poller, notifications",
         "graphile.perjob.c4", "graphile per-job, 1 proc x 4", "/s", ""),
        ("latency p50", "project.latency.p50_ms", "commit-to-send",
         "graphile.latency.p50_ms", "graphile add-to-start", "ms", ""),
        ("latency p99", "project.latency.p99_ms", "commit-to-send",
         "graphile.latency.p99_ms", "graphile add-to-start", "ms", ""),
        ("API write, 8 clients", "project.api_write.c8", "POST /bookings",
         "sql.api_write.c8", "same SQL, pgbench", "/s", "target >= 0.80"),
        ("API write p99, 8 clients", "project.api_write.p99_ms", "POST /bookings",
         "sql.api_write.p99_ms", "same SQL, pgbench", "ms", ""),
        ("latency p50, no LISTEN", "project.latency_timed.p50_ms", "commit-to-send, idle wait 200ms",
         "project.latency.p50_ms", "the same with LISTEN", "ms", ""),
        ("baseline, 1 connection", "project.poller1", "1 poller, notifications",
         "baseline.insert1", "insert+commit", "/s", ""),
        ("baseline, 4 connections", "project.poller4", "4 pollers, notifications",
         "baseline.insert4", "insert+commit", "/s", ""),
        ("future reminders", "project.future_reminders.with", "future reminders due later",
         "project.future_reminders.without", "the same drain without them", "/s", "target >= 0.90"),
        ("languages", "project.languages.three", "rendered, fr + ja-JP + en-US",
         "project.languages.one", "rendered, nobody named one", "/s", "target >= 0.95"),
        # The held-snapshot stress (tests/benches/stress.rs; perf.js stress).
        ("stress: fresh", "project.stress.fresh", "1 poller, production defaults",
         "graphile.stress.fresh", "graphile batched, 1 proc x 4", "/s", ""),
        ("stress: after history", "project.stress.history", "after finished events, vacuumed",
         "graphile.stress.history", "after finished jobs, vacuumed", "/s", ""),
        ("stress: snapshot held", "project.stress.held", "held through the churn",
         "graphile.stress.held", "held through the churn", "/s", "target >= 1.00"),
        ("stress: churn, held", "project.stress.held_churn", "the churn itself",
         "graphile.stress.held_churn", "the churn itself", "/s", ""),
        ("stress: held / fresh", "project.stress.held", "snapshot held",
         "project.stress.fresh", "the project fresh", "/s", "target >= 0.50"),
        ("stress: history / fresh", "project.stress.history", "after finished events",
         "project.stress.fresh", "the project fresh", "/s", "target >= 0.90"),
        ("stress, peer: held / fresh", "graphile.stress.held", "graphile, snapshot held",
         "graphile.stress.fresh", "graphile fresh", "/s", ""),
    ]

    # Rows the project did not measure in this run (BENCH_ONLY) are left
    # out; so is the whole comparison when it measured none.
    rows = [row for row in rows if get(row[1]) is not None]
    if rows:
        comparison(get, rows)
    listing(get)


def comparison(get, rows):
    durable = os.environ.get("BENCH_DURABLE", "0") == "1"
    print()
    print("comparison, one cluster, one run (the 1-process rows: each side's best of the interleaved rounds): "
          + ("fsync=on (BENCH_DURABLE=1)" if durable
             else "fsync=off, synchronous_commit=off, full_page_writes=off (BENCH_DURABLE=1 for fsync=on)"))
    jobs = get("graphile.jobs")
    print("graphile-worker: its perfTest method, "
          + (f"{jobs:,.0f} no-op jobs per preset" if jobs else "no-op jobs")
          + "; latency one job at a time, LISTEN/NOTIFY. Project latency: LISTEN/NOTIFY (timed polls in the last row).")
    print("units: the project's are notifications (claim, send to an instant mailer, outcome); graphile's, in the "
          "equal-work rows, notifications too (jobs of 3 recipients; per recipient a claim row committed before a "
          "no-op send and its outcome after), elsewhere no-op jobs")
    print("ratio: above 1 the project is better (throughput project/peer; latency and work per unit peer/project)")
    if get("project.stress.churn_events") or get("graphile.stress.churn_jobs"):
        print(f"stress: the project {get('project.stress.history_events') or 0:,.0f} finished events of history, "
              f"{get('project.stress.churn_events') or 0:,.0f} events x 3 churned under the snapshot; graphile "
              f"{get('graphile.stress.history_jobs') or 0:,.0f} jobs of history, "
              f"{get('graphile.stress.churn_jobs') or 0:,.0f} jobs churned")
    header = ("measure", "project", "figure", "peer / baseline", "figure", "ratio", "")
    widths = (26, 31, 11, 31, 11, 6, 0)
    line = lambda cells: "  ".join(f"{c:<{w}}" if i < 2 or i == 3 else f"{c:>{w}}"
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(header))
    print(line(tuple("-" * w for w in widths[:-1]) + ("",)))
    for what, pkey, plabel, qkey, qlabel, unit, note in rows:
        p, q = get(pkey), get(qkey)
        ratio = "-"
        if p and q:
            value = p / q if unit == "/s" else q / p
            ratio = f"{value:.2f}"
            if note.startswith("target >= "):
                note += " ok" if value >= float(note.split()[-1]) else " BELOW TARGET"
        if p and note.startswith("target: project <= "):
            # The target is quoted to one decimal (13.6): so is the check.
            note += " ok" if round(p, 1) <= float(note.split()[-1]) else " ABOVE TARGET"
        print(line((what, plabel, fmt(p, unit), qlabel, fmt(q, unit), ratio, note)))
    print()


def listing(get):
    """GET /bookings with a full table (tests/benches/listing.rs): each
    measure's p50 and p99, and each as a multiple of the same percentile of
    GET /bookings/{id} and of the organizer page's bare SQL."""
    # (what, key)
    measures = [
        ("listing as organizer", "listing.organizer"),
        ("next page via the cursor", "listing.next_page"),
        ("listing as attendee", "listing.attendee"),
        ("GET /bookings/{id}", "listing.get_one"),
        ("organizer page, bare SQL", "listing.sql"),
    ]
    if all(get(f"{key}.p50_ms") is None and get(f"{key}.p99_ms") is None for _, key in measures):
        return
    bookings = get("listing.bookings")
    print()
    print("GET /bookings with " + (f"{bookings:,.0f}" if bookings else "?") + " bookings in the table, one request "
          "at a time through the handler (tests/benches/listing.rs)")
    print("baselines: GET /bookings/{id} through the same handler (a primary-key read), and the organizer page's "
          "statement alone (tokio-postgres, no handler)")
    print("ratio: a multiple of the baseline's latency at the same percentile (above 1 slower than the baseline)")
    header = ("measure", "p50", "p99", "p50 / get", "p99 / get", "p50 / SQL", "p99 / SQL")
    widths = (26, 10, 10, 9, 9, 9, 9)
    line = lambda cells: "  ".join(f"{c:<{w}}" if i == 0 else f"{c:>{w}}"
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(header))
    print(line(tuple("-" * w for w in widths)))
    ratio = lambda value, base: f"{value / base:.2f}" if value and base else "-"
    for what, key in measures:
        p50, p99 = get(f"{key}.p50_ms"), get(f"{key}.p99_ms")
        cells = [what, fmt(p50, "ms"), fmt(p99, "ms")]
        for base in ("listing.get_one", "listing.sql"):
            if key == base:
                cells += ["", ""]
            else:
                cells += [ratio(p50, get(f"{base}.p50_ms")), ratio(p99, get(f"{base}.p99_ms"))]
        print(line(tuple(cells)))
    print()


if __name__ == "__main__":
    main()
