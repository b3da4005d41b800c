#!/usr/bin/env node
// Peer benchmark: graphile-worker (version pinned in package-lock.json),
// measured with the method of its own repository's perfTest/ (run.js,
// init.js, latencyTest.js), on the database named by DATABASE_URL (a
// database of its own on the bench cluster; scripts/lib/bench-peers.sh
// creates it).
//
//   node perf.js            all presets, then the latency test; prints
//                           `key<TAB>value` lines on stdout, the log on stderr
//   node perf.js stress     the held-snapshot stress of tests/benches/stress.rs
//   node perf.js drain P    (internal) one worker process of preset P that
//                           drains the queue like `graphile-worker --once`
//
// Throughput, as perfTest/run.js: time one worker process started on an
// empty queue (startup and shutdown), bulk-add N no-op jobs in one statement
// (add_jobs over generate_series: init.js's add_job per row in a DO block
// queues the same rows, only far slower), time PROCS worker processes
// draining them with --once semantics; jobs/s = N / (drain time - startup).
// Latency, as latencyTest.js: one worker (concurrency 1, LISTEN/NOTIFY),
// add a job, wait until its task starts, repeat; reports p50/p99.
//
// Equal work (preset equalwork.p1c4, the batched 1 x 4 configuration): each
// job is an event of RECIPIENTS (3) recipients, as the project's bench
// events are, and its task does, per recipient, what the project does
// durably per notification: commits a claim row (INSERT ... ON CONFLICT DO
// NOTHING on the (event, recipient, type) key, in a table shaped like
// booking_notification_sends: a uuid key and that unique key), makes a
// no-op send, then commits its outcome (UPDATE to SENT with a message id).
// Its figures are per notification (N jobs x RECIPIENTS), like the project's.
//
// Env: BENCH_PEER_JOBS (450000), BENCH_PEER_LATENCY_SAMPLES (1000, as
// latencyTest.js), BENCH_PEER_TIMEOUT_S (600: the whole run, and each worker
// process, is killed past it), BENCH_PEER_PRESETS (comma list, default all).
"use strict";

const { spawn } = require("child_process");
const { Client, Pool } = require("pg");
const { Logger, runOnce, runTaskList } = require("graphile-worker");

const env = (name, dflt) => {
  const v = parseInt(process.env[name] || "", 10);
  return Number.isFinite(v) && v > 0 ? v : dflt;
};
// 450,000: the size of graphile-worker's own perf runs, drains of 10 s
// and more, where startup and warm-up weigh little.
const JOBS = env("BENCH_PEER_JOBS", 450000);
const SAMPLES = env("BENCH_PEER_LATENCY_SAMPLES", 1000);
const TIMEOUT_MS = env("BENCH_PEER_TIMEOUT_S", 600) * 1000;
const DATABASE_URL = process.env.DATABASE_URL;

// Per-job mode is graphile-worker's default; batched is the configuration of
// its perfTest/graphile.config.js (local queue of 500, batched completions).
const PER_JOB = { localQueue: { size: -1 }, completeJobBatchDelay: -1, failJobBatchDelay: -1 };
const BATCHED = {
  localQueue: { size: 500, refetchDelay: { durationMs: 10 } },
  completeJobBatchDelay: 0,
  failJobBatchDelay: 0,
};
const RECIPIENTS = 3;
const PRESETS = {
  "perjob.c4": { procs: 1, concurrency: 4, worker: PER_JOB },
  "batched.p1c4": { procs: 1, concurrency: 4, worker: BATCHED },
  "equalwork.p1c4": { procs: 1, concurrency: 4, worker: BATCHED, task: "notify", recipients: RECIPIENTS },
  "batched.p4c24": { procs: 4, concurrency: 24, worker: BATCHED },
};

// The equal-work task's table: booking_notification_sends' shape, as far as
// the claim and the outcome write it (V1, V11).
const SENDS_TABLE = `create table if not exists bench_sends (
  id uuid primary key,
  event_id bigint not null,
  recipient text not null,
  event_type text not null,
  status text not null,
  provider_message_id text,
  claimed_at timestamptz not null default now(),
  completed_at timestamptz,
  unique (event_id, recipient, event_type))`;

// Per recipient, a claim committed before its send and its outcome after,
// as the project does, and batched as the project batches: one statement
// claims the job's recipients (each row committed before its send), the
// no-op sends run, one statement records their outcomes. (Before
// 2026-12-06 each recipient's claim and outcome was a statement of its own,
// the recipients at once on connections of the pool: 4,800-5,500/s here,
// about half the 10,300-12,900/s the issue measured for such a peer; this
// batched task is the stronger peer.)
async function notify(payload, helpers) {
  await helpers.withPgClient(async (c) => {
    const claimed = await c.query(
      `insert into bench_sends (id, event_id, recipient, event_type, status)
       select gen_random_uuid(), $1, r, 'BOOKING_CONFIRMED', 'CLAIMED' from unnest($2::text[]) r
       on conflict (event_id, recipient, event_type) do nothing returning id, recipient`,
      [payload.id, payload.recipients],
    );
    if (claimed.rowCount === 0) return; // claimed before: never sent again
    // The no-op sends, then their outcomes in one statement.
    const ids = claimed.rows.map((r) => r.id);
    const messageIds = claimed.rows.map((r) => `noop-${payload.id}-${r.recipient}`);
    await c.query(
      `update bench_sends s set status = 'SENT', provider_message_id = o.message_id, completed_at = now()
         from unnest($1::uuid[], $2::text[]) o(id, message_id)
        where s.id = o.id and s.status = 'CLAIMED'`,
      [ids, messageIds],
    );
  });
}

const log = (...args) => console.error("[peers]", ...args);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
// Warnings and errors only (the default logger prints every job).
const quietLogger = new Logger(() => (level, message) => {
  if (level === "error" || level === "warning") console.error(`[graphile-worker ${level}] ${message}`);
});

// The same rank as the project's bench (tests/benches/poller.rs).
function percentile(sorted, p) {
  return sorted[Math.round((sorted.length - 1) * p)];
}

// ---- child: one worker process, `--once` semantics -----------------------

async function drain(name) {
  const preset = PRESETS[name];
  if (!preset) throw new Error(`unknown preset ${name}`);
  // A child outlives nothing: killed with its parent's budget at the latest.
  setTimeout(() => {
    console.error(`[peers] worker ${name} exceeded ${TIMEOUT_MS} ms`);
    process.exit(2);
  }, TIMEOUT_MS).unref();
  let executed = 0;
  await runOnce({
    noHandleSignals: true,
    logger: quietLogger,
    taskList: {
      noop: async () => void executed++,
      notify: async (payload, helpers) => {
        await notify(payload, helpers);
        executed++;
      },
    },
    preset: {
      worker: {
        connectionString: DATABASE_URL,
        concurrentJobs: preset.concurrency,
        // As perfTest: -m CONCURRENCY + 1; the equal-work task holds a
        // connection per recipient at once.
        maxPoolSize: preset.concurrency * (preset.recipients || 1) + 1,
        ...preset.worker,
      },
    },
  });
  process.stdout.write(JSON.stringify({ executed }) + "\n");
}

// ---- parent ------------------------------------------------------------

const children = new Set();

// Runs `node perf.js drain NAME`; resolves with its report.
function spawnDrain(name) {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [__filename, "drain", name], {
      env: { ...process.env, NO_LOG_SUCCESS: "1" },
      stdio: ["ignore", "pipe", "inherit"],
      timeout: TIMEOUT_MS,
      killSignal: "SIGKILL",
    });
    children.add(child);
    let out = "";
    child.stdout.on("data", (d) => (out += d));
    child.on("error", reject);
    child.on("exit", (code, signal) => {
      children.delete(child);
      if (code === 0) resolve(JSON.parse(out.trim().split("\n").pop()));
      else reject(new Error(`worker ${name} exited with ${signal || code}`));
    });
  });
}

async function timed(fn) {
  const start = process.hrtime.bigint();
  const result = await fn();
  return [Number(process.hrtime.bigint() - start) / 1e6, result];
}

async function remainingJobs(pool) {
  const { rows } = await pool.query("select count(*)::int as n from graphile_worker._private_jobs");
  return rows[0].n;
}

// What the statements run in this database have cost so far, from
// pg_stat_statements (as the project's bench reads it, tests/src/bench.rs):
// statements, WAL records, WAL bytes; null when the cluster does not
// preload it.
let noWorkSaid = false;
async function dbWork(pool) {
  try {
    await pool.query("create extension if not exists pg_stat_statements");
    const { rows } = await pool.query(
      `select coalesce(sum(calls), 0)::float8 as statements, coalesce(sum(wal_records), 0)::float8 as records,
              coalesce(sum(wal_bytes), 0)::float8 as bytes
         from pg_stat_statements
        where dbid = (select oid from pg_database where datname = current_database()) and toplevel`,
    );
    return rows[0];
  } catch (e) {
    if (!noWorkSaid) log(`no statement costs: ${e.message} (the cluster must preload pg_stat_statements)`);
    noWorkSaid = true;
    return null;
  }
}

// `units` of work (notifications for the equal-work preset, jobs
// otherwise): JOBS / RECIPIENTS jobs of RECIPIENTS recipients each for the
// equal-work preset, so both sides do as many notifications.
async function throughput(pool, name, units = JOBS) {
  const preset = PRESETS[name];
  const per = preset.recipients || 1;
  const jobs = Math.floor(units / per);
  units = jobs * per;
  if ((await remainingJobs(pool)) !== 0) throw new Error("queue not empty before the run");
  const [startupMs] = await timed(() => spawnDrain(name));
  if (preset.task === "notify") {
    await pool.query(SENDS_TABLE);
    await pool.query("truncate bench_sends");
  }
  const [addMs] = await timed(() =>
    pool.query(
      `select count(*) from graphile_worker.add_jobs(array(
         select json_populate_record(null::graphile_worker.job_spec,
                  json_build_object('identifier', $2::text, 'payload',
                    json_build_object('id', i, 'recipients',
                      (select json_agg('r' || r || '-' || i || '@example.com') from generate_series(1, $3::int) r))))
           from generate_series(1, $1::int) i))`,
      [jobs, preset.task || "noop", per],
    ),
  );
  // As the project's bench does after seeding its outbox.
  await pool.query("vacuum analyze graphile_worker._private_jobs");
  const before = await dbWork(pool);
  const [drainMs, reports] = await timed(() =>
    Promise.all(Array.from({ length: preset.procs }, () => spawnDrain(name))),
  );
  const after = before && (await dbWork(pool));
  const executed = reports.reduce((sum, r) => sum + r.executed, 0);
  const left = await remainingJobs(pool);
  if (executed !== jobs || left !== 0) {
    throw new Error(`${name}: executed ${executed} of ${jobs} jobs, ${left} left in the queue`);
  }
  if (preset.task === "notify") {
    const { rows } = await pool.query("select count(*)::int as n from bench_sends where status = 'SENT'");
    if (rows[0].n !== units) throw new Error(`${name}: ${rows[0].n} of ${units} sends recorded SENT`);
  }
  const rate = (1000 * units) / (drainMs - startupMs);
  const unit = per > 1 ? `notifications/s (${jobs} jobs x ${per})` : "jobs/s";
  log(
    `${name}: ${preset.procs} process(es) x concurrency ${preset.concurrency}: add ${addMs.toFixed(0)} ms, ` +
      `drain ${drainMs.toFixed(0)} ms - startup ${startupMs.toFixed(0)} ms => ${rate.toFixed(0)} ${unit}`,
  );
  // Per unit: what the drain cost the database (its workers' statements).
  const work = after && {
    statements: (after.statements - before.statements) / units,
    records: (after.records - before.records) / units,
    bytes: (after.bytes - before.bytes) / units,
  };
  return [rate, (drainMs - startupMs) / 1000, work];
}

async function latency() {
  // A pool of its own, pg's default size, as latencyTest.js.
  const pool = new Pool({ connectionString: DATABASE_URL });
  const starts = new Map();
  const waiting = new Map();
  let latencies = [];
  const workerPool = runTaskList(
    { concurrency: 1, noHandleSignals: true, logger: quietLogger },
    {
      latency: async ({ id }) => {
        const t = starts.get(id);
        if (t !== undefined) latencies.push(Number(process.hrtime.bigint() - t) / 1e6);
        const done = waiting.get(id);
        if (done) done();
      },
    },
    pool,
  );
  const waitFor = (id) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`latency job ${id} not started within 10 s`)), 10000);
      waiting.set(id, () => (clearTimeout(timer), resolve()));
    });
  try {
    // Warm up, then let things settle, as latencyTest.js.
    await pool.query(
      "select graphile_worker.add_job('latency', json_build_object('id', -i)) from generate_series(1, 100) i",
    );
    while ((await remainingJobs(pool)) > 0) await sleep(100);
    latencies = [];
    await sleep(1000);
    const client = await pool.connect();
    try {
      for (let id = 0; id < SAMPLES; id++) {
        const started = waitFor(id);
        starts.set(id, process.hrtime.bigint());
        await client.query("select graphile_worker.add_job('latency', json_build_object('id', $1::int))", [id]);
        await started;
      }
    } finally {
      client.release();
    }
  } finally {
    await workerPool.gracefulShutdown();
    await pool.end();
  }
  if (latencies.length !== SAMPLES) throw new Error(`latency: ${latencies.length} of ${SAMPLES} samples`);
  latencies.sort((a, b) => a - b);
  const [p50, p99] = [percentile(latencies, 0.5), percentile(latencies, 0.99)];
  log(
    `latency (${SAMPLES} jobs, one at a time): min ${latencies[0].toFixed(2)} ms, p50 ${p50.toFixed(2)} ms, ` +
      `p99 ${p99.toFixed(2)} ms, max ${latencies[latencies.length - 1].toFixed(2)} ms`,
  );
  return [p50, p99];
}

// The same stress as the project's (tests/benches/stress.rs), on the batched
// 1 x 4 preset: jobs/s on a fresh queue; after BENCH_STRESS_HISTORY jobs
// finished and vacuumed (graphile-worker deletes a finished job, so its
// history is the dead rows vacuum removed); and with a REPEATABLE READ
// snapshot held open in the same database while BENCH_STRESS_CHURN jobs are
// worked through, then measured. Each measure: BENCH_STRESS_MEASURED jobs.
async function stress() {
  const name = "batched.p1c4";
  const measured = env("BENCH_STRESS_MEASURED", 60000);
  const pool = new Pool({ connectionString: DATABASE_URL, max: 4 });
  const emit = (key, value) => process.stdout.write(`${key}\t${value}\n`);
  let holder;
  try {
    await timed(() => spawnDrain(name)); // its schema, once
    const [fresh] = await throughput(pool, name, measured);
    emit("graphile.stress.fresh", fresh.toFixed(0));
    const history = env("BENCH_STRESS_HISTORY", 600000);
    const [churned] = await throughput(pool, name, history);
    await pool.query("vacuum analyze graphile_worker._private_jobs");
    const [after] = await throughput(pool, name, measured);
    log(`after ${history} jobs finished (${churned.toFixed(0)} jobs/s) and vacuumed: ${after.toFixed(0)} jobs/s`);
    emit("graphile.stress.history", after.toFixed(0));
    emit("graphile.stress.history_jobs", history);
    holder = new Client({ connectionString: DATABASE_URL, application_name: "bench-held-snapshot" });
    await holder.connect();
    await holder.query("BEGIN ISOLATION LEVEL REPEATABLE READ");
    await holder.query("SELECT count(*) FROM graphile_worker._private_jobs");
    const churn = env("BENCH_STRESS_CHURN", 600000);
    const [churnRate] = await throughput(pool, name, churn);
    emit("graphile.stress.held_churn", churnRate.toFixed(0));
    const [held] = await throughput(pool, name, measured);
    log(`snapshot held: ${churn} jobs churned at ${churnRate.toFixed(0)} jobs/s, then ${held.toFixed(0)} jobs/s`);
    emit("graphile.stress.held", held.toFixed(0));
    emit("graphile.stress.churn_jobs", churn);
  } finally {
    if (holder) await holder.end();
    await pool.end();
  }
}

async function main() {
  if (!DATABASE_URL) throw new Error("DATABASE_URL is not set");
  const watchdog = setTimeout(() => {
    log(`the peer benchmark exceeded ${TIMEOUT_MS} ms; stopping`);
    for (const c of children) c.kill("SIGKILL");
    process.exit(1);
  }, TIMEOUT_MS);
  watchdog.unref();
  const wanted = (process.env.BENCH_PEER_PRESETS || Object.keys(PRESETS).join(",")).split(",");
  const pool = new Pool({ connectionString: DATABASE_URL, max: 4 });
  const emit = (key, value) => process.stdout.write(`${key}\t${value}\n`);
  try {
    // Installs graphile-worker's schema (its migrations) once, before timing.
    const [schemaMs] = await timed(() => spawnDrain("perjob.c4"));
    log(`graphile-worker ${require("graphile-worker/package.json").version}: schema ready in ${schemaMs.toFixed(0)} ms; ${JOBS} jobs per preset`);
    emit("graphile.jobs", JOBS);
    for (const name of wanted) {
      const [rate, drainS, work] = await throughput(pool, name);
      emit(`graphile.${name}`, rate.toFixed(0));
      emit(`graphile.${name}.drain_s`, drainS.toFixed(2));
      if (work) {
        const unit = PRESETS[name].recipients ? "notification" : "job";
        log(`${name}: per ${unit} ${work.statements.toFixed(3)} statements, ${work.records.toFixed(2)} WAL records, ` +
          `${work.bytes.toFixed(0)} WAL bytes`);
        emit(`graphile.${name}.statements_each`, work.statements.toFixed(3));
        emit(`graphile.${name}.wal_records_each`, work.records.toFixed(3));
        emit(`graphile.${name}.wal_bytes_each`, work.bytes.toFixed(1));
      }
    }
    const [p50, p99] = await latency();
    emit("graphile.latency.p50_ms", p50.toFixed(2));
    emit("graphile.latency.p99_ms", p99.toFixed(2));
  } finally {
    await pool.end();
  }
}

const [mode, arg] = process.argv.slice(2);
(mode === "drain" ? drain(arg) : mode === "stress" ? stress() : main()).catch((e) => {
  console.error("[peers] failed:", e && e.stack ? e.stack : e);
  for (const c of children) c.kill("SIGKILL");
  process.exit(1);
});
