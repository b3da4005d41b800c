#!/usr/bin/env python3
"""A scheduled Lambda function's fleet, run locally from its real bootstrap.zip.

Python standard library only; the Lambda environment and the process
handling are scripts/lib/lambda-runtime.py's. What Lambda does with a
function on an EventBridge schedule, modelled:

  - The schedule fires every --period seconds (--streams schedules, evenly
    staggered). Each firing is one asynchronous invocation.
  - An invocation goes to an idle execution environment of the function if
    there is one (a warm start), else to a new one (a cold start: a fresh
    bootstrap process with a Runtime API of its own), unless --concurrency
    environments are busy already: then it is throttled and, with the
    template's MaximumRetryAttempts 0, dropped.
  - Its deadline (Lambda-Runtime-Deadline-Ms) is when the event is handed
    to the function plus --timeout. An invocation still running 0.2 s past
    its deadline is a timeout: the environment's process is killed, as
    Lambda does, and the environment is gone.

Writes one JSON line per thing that happened to --log:
  {"kind": "fired" | "dropped", "t": ...}
  {"kind": "invocation", "env": N, "cold": bool, "fired": t, "start": t,
   "end": t, "outcome": "response" | "error" | "timeout", "init_ms": ...,
   "response": {...}}
with t in Unix seconds (float). Runs for --duration seconds of firings, then
waits for the invocations in flight (each ends by its deadline) and stops
every process (SIGTERM, then SIGKILL). SIGTERM or SIGINT stop it early, the
same way.
"""
import argparse
import importlib.util
import itertools
import json
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from http.server import BaseHTTPRequestHandler

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("lambda_runtime", os.path.join(HERE, "lambda-runtime.py"))
rt = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rt)

API = rt.API
GRACE = 0.2  # past the deadline before the environment is killed


class Env:
    """One execution environment: a bootstrap process and its Runtime API."""

    def __init__(self, fleet, n, first):
        self.fleet, self.n = fleet, n
        self.events = queue.Queue()  # invocations handed to this environment
        self.current = None  # the invocation being served
        self.lock = threading.Lock()
        self.dead = False
        self.init_ms = None
        env = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def reply(self, code, body=b"", headers=()):
                rt.send_reply(self, code, body, headers)

            def do_GET(self):
                if self.path != f"{API}/invocation/next":
                    return self.reply(404, b'{"errorType":"NotFound"}')
                if env.init_ms is None:
                    env.init_ms = (time.time() - env.started) * 1000.0
                inv = env.events.get()
                if inv is None:  # stopping
                    self.close_connection = True
                    return self.reply(410, b'{"errorType":"Stopped"}')
                inv["start"] = time.time()
                inv["deadline"] = inv["start"] + fleet.timeout
                with env.lock:
                    env.current = inv
                trace = f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0"
                self.reply(200, fleet.event, [
                    ("Lambda-Runtime-Aws-Request-Id", inv["id"]),
                    ("Lambda-Runtime-Deadline-Ms", str(int(inv["deadline"] * 1000))),
                    ("Lambda-Runtime-Invoked-Function-Arn", fleet.arn),
                    ("Lambda-Runtime-Trace-Id", trace),
                ])

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if self.path == f"{API}/init/error":
                    fleet.say(f"environment {env.n}: init error: {body.decode(errors='replace')[:300]}")
                    self.reply(202, b'{"status":"OK"}')
                    env.kill()
                    return
                prefix = f"{API}/invocation/"
                if self.path.startswith(prefix) and self.path.endswith(("/response", "/error")):
                    request_id, _, kind = self.path[len(prefix):].rpartition("/")
                    with env.lock:
                        inv = env.current
                        if inv is None or inv["id"] != request_id:
                            return self.reply(400, b'{"errorType":"InvalidRequestID"}')
                        env.current = None
                    self.reply(202, b'{"status":"OK"}')
                    fleet.finish(env, inv, kind, body)
                    return
                self.reply(404, b'{"errorType":"NotFound"}')

        self.server = rt.QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        envvars = rt.lambda_env(fleet.function, fleet.task_root, address, fleet.region, fleet.memory, fleet.extra)
        self.events.put(first)
        self.started = time.time()
        self.proc = rt.subprocess.Popen([fleet.bootstrap], cwd=fleet.task_root, env=envvars,
                                        stdin=rt.subprocess.DEVNULL, stdout=fleet.output,
                                        stderr=rt.subprocess.STDOUT, start_new_session=True)

    def idle(self):
        with self.lock:
            return not self.dead and self.current is None and self.events.empty()

    def kill(self):
        with self.lock:
            self.dead = True
        self.events.put(None)
        rt.stop(self.proc, 0)
        self.server.shutdown()
        self.server.server_close()


class Fleet:
    def __init__(self, args, extra, bootstrap, task_root, output, log):
        self.function, self.region, self.memory = args.function, args.region, args.memory
        self.timeout, self.concurrency = args.timeout, args.concurrency
        self.arn = f"arn:aws:lambda:{args.region}:123456789012:function:{args.function}"
        self.event = json.dumps({"source": "aws.scheduler", "detail-type": "Scheduled Event", "detail": {}}).encode()
        self.extra, self.bootstrap, self.task_root, self.output = extra, bootstrap, task_root, output
        self.log = log
        self.envs = []
        self.numbers = itertools.count(1)
        self.lock = threading.Lock()
        self.quiet = args.quiet

    def say(self, msg):
        if not self.quiet:
            print(f"lambda-schedule: {msg}", file=sys.stderr, flush=True)

    def write(self, record):
        with self.lock:
            self.log.write(json.dumps(record) + "\n")
            self.log.flush()

    def fire(self):
        inv = {"id": str(uuid.uuid4()), "fired": time.time()}
        with self.lock:
            self.envs = [e for e in self.envs if not e.dead]
            warm = next((e for e in self.envs if e.idle()), None)
            if warm is None and len(self.envs) >= self.concurrency:
                busy = len(self.envs)
                warm = False
        if warm is False:
            self.write({"kind": "dropped", "t": inv["fired"], "busy": busy})
            self.say(f"throttled: {busy} environments busy; the invocation is dropped")
            return
        if warm is not None:
            inv["cold"] = False
            inv["env"] = warm.n
            warm.events.put(inv)
        else:
            inv["cold"] = True
            with self.lock:
                n = next(self.numbers)
                env = Env(self, n, inv)
                inv["env"] = n
                self.envs.append(env)
        self.write({"kind": "fired", "t": inv["fired"], "env": inv["env"], "cold": inv["cold"]})

    def ended(self, env, inv, outcome, response, at):
        self.write({"kind": "invocation", "env": env.n, "cold": inv["cold"], "fired": inv["fired"],
                    "start": inv["start"], "end": at, "outcome": outcome,
                    "init_ms": env.init_ms if inv["cold"] else None, "response": response})

    def finish(self, env, inv, kind, body):
        try:
            response = json.loads(body)
        except ValueError:
            response = body.decode(errors="replace")
        self.ended(env, inv, kind, response, time.time())

    def watch(self):
        """Kills environments whose invocation ran past its deadline."""
        now = time.time()
        with self.lock:
            envs = list(self.envs)
        for env in envs:
            with env.lock:
                inv = env.current
                late = inv is not None and now > inv["deadline"] + GRACE
                if late:
                    env.current = None
            if late:
                self.ended(env, inv, "timeout", None, now)
                self.say(f"environment {env.n}: timed out; killed")
                env.kill()
            elif not env.dead and env.proc.poll() is not None:
                self.say(f"environment {env.n}: the process exited ({env.proc.returncode})")
                with env.lock:
                    env.dead = True
                    inv, env.current = env.current, None
                # As Lambda reports a runtime that died mid-invocation.
                if inv is not None:
                    self.ended(env, inv, "error", f"Runtime exited ({env.proc.returncode})", now)

    def busy(self):
        with self.lock:
            return any(not e.dead and not e.idle() for e in self.envs)

    def stop(self):
        """Ends every environment; an invocation still running is logged
        as stopped, at this moment."""
        with self.lock:
            envs = list(self.envs)
        now = time.time()
        for env in envs:
            with env.lock:
                inv, env.current = env.current, None
            if inv is not None:
                self.ended(env, inv, "stopped", None, now)
            env.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--function", required=True)
    p.add_argument("--zip", required=True)
    p.add_argument("--env-file", help="the function's environment, KEY=VALUE lines")
    p.add_argument("--period", type=float, required=True, help="seconds between a schedule's firings")
    p.add_argument("--streams", type=int, default=1, help="schedules, staggered by period/streams")
    p.add_argument("--timeout", type=float, required=True, help="the function's timeout, seconds")
    p.add_argument("--concurrency", type=int, required=True, help="reserved concurrency")
    p.add_argument("--duration", type=float, required=True, help="seconds of firings")
    p.add_argument("--log", required=True, help="JSON lines of what happened")
    p.add_argument("--output", help="the functions' stdout and stderr (default: dropped)")
    p.add_argument("--region", default="us-east-1")
    p.add_argument("--memory", type=int, default=256)
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args()
    if args.period <= 0 or args.timeout <= 0 or args.streams < 1 or args.concurrency < 1:
        rt.fail("--period and --timeout must be positive, --streams and --concurrency at least 1")
    extra = rt.read_env_file(args.env_file) if args.env_file else {}
    workdir = tempfile.mkdtemp(prefix=f"schedule-{args.function}.")
    task_root = os.path.join(workdir, "task")
    with zipfile.ZipFile(args.zip) as z:
        if "bootstrap" not in z.namelist():
            rt.fail(f"{args.zip} has no bootstrap")
        z.extract("bootstrap", task_root)
    bootstrap = os.path.join(task_root, "bootstrap")
    os.chmod(bootstrap, 0o755)
    output = open(args.output, "ab") if args.output else open(os.devnull, "wb")
    stopping = threading.Event()

    def on_signal(signum, _frame):
        stopping.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with open(args.log, "a") as log:
        fleet = Fleet(args, extra, bootstrap, task_root, output, log)
        try:
            t0 = time.time()
            step = args.period / args.streams
            k = 0
            while not stopping.is_set() and k * step < args.duration:
                at = t0 + k * step
                while not stopping.is_set() and time.time() < at:
                    fleet.watch()
                    time.sleep(min(0.05, max(0.0, at - time.time())))
                if stopping.is_set():
                    break
                fleet.fire()
                k += 1
            # The invocations in flight end by their deadlines.
            end = time.time() + args.timeout + 2 * GRACE
            while not stopping.is_set() and fleet.busy() and time.time() < end:
                fleet.watch()
                time.sleep(0.05)
        finally:
            fleet.stop()
            output.close()
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
