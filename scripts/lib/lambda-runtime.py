#!/usr/bin/env python3
"""A local Lambda Runtime API, and the measurements of scripts/measure-functions.sh.

Python standard library only. Two commands:

  measure  runs one release `bootstrap` (unzipped from its bootstrap.zip)
           against a Runtime API emulator served here on 127.0.0.1, RUNS
           times, each time as a fresh process (a cold start):
             - init: from just before the exec of `bootstrap` to its first
               GET /2018-06-01/runtime/invocation/next;
             - the last run also gets one invocation (--event): its
               response (or error) is recorded, and the process's peak RSS
               (VmHWM in /proc/PID/status) is read the moment the response
               arrives, before the process is stopped.
           Writes one JSON object (--out). Every wait has a timeout; the
           function process is stopped (SIGTERM, then SIGKILL to its
           process group) after each run, and on any exit of this script.
  table    prints the table of one or more `measure` results, and with
           --results FILE appends `key<TAB>value` lines to FILE.

The emulator serves GET .../invocation/next (one event per run, then the
call is held, as Lambda holds it until the next event), POST
.../invocation/ID/response, POST .../invocation/ID/error, POST
/2018-06-01/runtime/init/error, and PUT /cfn-response/... for a
CloudFormation custom resource's pre-signed ResponseURL. In an event file,
{{RUNTIME_API}} becomes the emulator's HOST:PORT (so a ResponseURL can be
http://{{RUNTIME_API}}/cfn-response/...).

The process gets a clean environment: what Lambda sets (AWS_LAMBDA_*,
AWS_REGION, _HANDLER, LAMBDA_TASK_ROOT, TZ...) plus --env-file (KEY=VALUE
lines), and nothing from this shell.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

API = "/2018-06-01/runtime"


def fail(msg):
    print(f"lambda-runtime.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


class Run:
    """The state of one cold start: what the emulator saw, when."""

    def __init__(self, event, deadline_secs, function_arn):
        self.pid = None  # set once the process is started
        self.event = event  # bytes, or None for an init-only run
        self.deadline_secs = deadline_secs
        self.function_arn = function_arn
        self.request_id = str(uuid.uuid4())
        self.next_seen = threading.Event()
        self.invoke_done = threading.Event()
        self.init_failed = threading.Event()
        self.finished = threading.Event()  # releases held /next calls
        self.t_next = None
        self.served = False
        self.outcome = None  # "response" | "error"
        self.payload = None
        self.rss_kib = None
        self.rss_now_kib = None
        self.init_error = None
        self.lock = threading.Lock()


class QuietServer(ThreadingHTTPServer):
    """A stopped function's keep-alive connection resets: not an error."""

    def handle_error(self, request, client_address):
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def send_reply(handler, code, body=b"", headers=()):
    """One JSON answer on a BaseHTTPRequestHandler; a peer that went away
    closes the connection, nothing more."""
    try:
        handler.send_response(code)
        for k, v in headers:
            handler.send_header(k, v)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
    except OSError:
        handler.close_connection = True


class Emulator:
    def __init__(self):
        self.run = None
        self.cfn_responses = []
        self.lock = threading.Lock()
        emulator = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def read_body(self):
                if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
                    chunks = []
                    while True:
                        line = self.rfile.readline(65537)
                        size = int(line.split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            break
                        chunks.append(self.rfile.read(size))
                        self.rfile.readline(65537)
                    return b"".join(chunks)
                n = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(n) if n else b""

            def reply(self, code, body=b"", headers=()):
                send_reply(self, code, body, headers)

            def do_GET(self):
                now = time.perf_counter()
                run = emulator.run
                if self.path != f"{API}/invocation/next" or run is None:
                    return self.reply(404, b'{"errorType":"NotFound"}')
                with run.lock:
                    first = run.t_next is None
                    if first:
                        run.t_next = now
                    serve = run.event is not None and not run.served
                    if serve:
                        run.served = True
                run.next_seen.set()
                if serve:
                    deadline_ms = int((time.time() + run.deadline_secs) * 1000)
                    trace = f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0"
                    return self.reply(200, run.event, [
                        ("Lambda-Runtime-Aws-Request-Id", run.request_id),
                        ("Lambda-Runtime-Deadline-Ms", str(deadline_ms)),
                        ("Lambda-Runtime-Invoked-Function-Arn", run.function_arn),
                        ("Lambda-Runtime-Trace-Id", trace),
                    ])
                # No (more) events: hold the call, as Lambda does, until the
                # run is over and the process stopped.
                run.finished.wait(600)
                self.close_connection = True
                self.reply(410, b'{"errorType":"RunOver"}')

            def do_POST(self):
                body = self.read_body()
                run = emulator.run
                if run is None:
                    return self.reply(404, b'{"errorType":"NotFound"}')
                if self.path == f"{API}/init/error":
                    run.init_error = body.decode(errors="replace")
                    run.init_failed.set()
                    return self.reply(202, b'{"status":"OK"}')
                prefix = f"{API}/invocation/"
                if self.path.startswith(prefix) and self.path.endswith(("/response", "/error")):
                    request_id, _, kind = self.path[len(prefix):].rpartition("/")
                    if request_id != run.request_id:
                        return self.reply(400, b'{"errorType":"InvalidRequestID"}')
                    # The peak RSS, now: the response is in, the process
                    # still alive (waiting for this answer).
                    run.rss_kib = status_kib(run.pid, "VmHWM")
                    run.rss_now_kib = status_kib(run.pid, "VmRSS")
                    run.outcome = kind
                    run.payload = body.decode(errors="replace")
                    self.reply(202, b'{"status":"OK"}')
                    run.invoke_done.set()
                    return
                self.reply(404, b'{"errorType":"NotFound"}')

            def do_PUT(self):
                body = self.read_body()
                if not self.path.startswith("/cfn-response/"):
                    return self.reply(404, b"")
                with emulator.lock:
                    emulator.cfn_responses.append(body.decode(errors="replace"))
                self.reply(200, b"")

        self.server = QuietServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self.thread.start()

    def close(self):
        if self.run:
            self.run.finished.set()
        self.server.shutdown()
        self.server.server_close()


def status_kib(pid, field):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except (OSError, ValueError, TypeError):
        return None
    return None


def read_env_file(path):
    env = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                fail(f"{path}:{n}: not KEY=VALUE: {line!r}")
            env[key.strip()] = value
    return env


def lambda_env(function, task_root, runtime_api, region, memory_mb, extra):
    # What the Lambda service sets for a provided.al2023 function.
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "TZ": ":UTC",
        "HOME": task_root,
        "_HANDLER": "bootstrap",
        "LAMBDA_TASK_ROOT": task_root,
        "LAMBDA_RUNTIME_DIR": task_root,
        "AWS_EXECUTION_ENV": "AWS_Lambda_provided.al2023",
        "AWS_LAMBDA_RUNTIME_API": runtime_api,
        "AWS_LAMBDA_FUNCTION_NAME": function,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(memory_mb),
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/aws/lambda/{function}",
        "AWS_LAMBDA_LOG_STREAM_NAME": time.strftime("%Y/%m/%d/[$LATEST]") + uuid.uuid4().hex,
        "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand",
        "AWS_REGION": region,
        "AWS_DEFAULT_REGION": region,
    }
    env.update(extra)
    return env


def stop(proc, grace):
    """SIGTERM to the process group, then SIGKILL after `grace` seconds."""
    if proc is None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # anything it left in its group
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


def tail(path, n=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def wait_for(flag, proc, timeout, *also):
    """True once `flag` is set; False if the process exits (or an `also`
    flag is set) first, or after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if flag.wait(0.02):
            return True
        if proc.poll() is not None or any(a.is_set() for a in also):
            return flag.is_set()
    return flag.is_set()


def measure(args):
    if args.runs < 1:
        fail("--runs must be 1 or more")
    extra = read_env_file(args.env_file) if args.env_file else {}
    zip_bytes = os.path.getsize(args.zip)
    current = {"proc": None}
    emulator = Emulator()
    workdir = tempfile.mkdtemp(prefix=f"measure-{args.function}.")
    log_path = args.log or os.path.join(workdir, "function.log")

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)
    result = {"function": args.function, "zip_bytes": zip_bytes, "init_ms": [], "rss_kib": None, "label": args.label}
    try:
        task_root = os.path.join(workdir, "task")
        with zipfile.ZipFile(args.zip) as z:
            if "bootstrap" not in z.namelist():
                fail(f"{args.zip} has no bootstrap")
            z.extract("bootstrap", task_root)
        bootstrap = os.path.join(task_root, "bootstrap")
        os.chmod(bootstrap, 0o755)
        event = None
        if args.event:
            with open(args.event) as f:
                event = f.read().replace("{{RUNTIME_API}}", emulator.address).encode()
            json.loads(event)  # must be JSON
        arn = f"arn:aws:lambda:{args.region}:123456789012:function:{args.function}"
        log = open(log_path, "ab")
        for i in range(args.runs):
            invoke = event is not None and i == args.runs - 1
            run = Run(event if invoke else None, args.deadline_secs, arn)
            emulator.run = run
            env = lambda_env(args.function, task_root, emulator.address, args.region, args.memory, extra)
            log.write(f"\n===== run {i + 1}/{args.runs}{' (with one invocation)' if invoke else ''}\n".encode())
            log.flush()
            t0 = time.perf_counter()
            current["proc"] = subprocess.Popen([bootstrap], cwd=task_root, env=env, stdin=subprocess.DEVNULL,
                                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            proc = current["proc"]
            run.pid = proc.pid
            try:
                if not wait_for(run.next_seen, proc, args.init_timeout, run.init_failed):
                    why = (f"exited with status {proc.returncode}" if proc.poll() is not None
                           else "reported an init error" if run.init_failed.is_set()
                           else f"did not call /invocation/next within {args.init_timeout:g}s")
                    detail = f"\n  init error: {run.init_error}" if run.init_error else ""
                    fail(f"{args.function} (run {i + 1}): the bootstrap {why} before its first "
                         f"/invocation/next{detail}\n--- {log_path} (tail)\n{tail(log_path)}")
                result["init_ms"].append((run.t_next - t0) * 1000.0)
                if invoke:
                    limit = args.deadline_secs + args.invoke_grace
                    if not wait_for(run.invoke_done, proc, limit):
                        why = (f"exited with status {proc.returncode}" if proc.poll() is not None
                               else f"did not answer within {limit:g}s")
                        fail(f"{args.function}: the invocation {why}\n--- {log_path} (tail)\n{tail(log_path)}")
                    result["rss_kib"] = run.rss_kib
                    result["rss_at_response_kib"] = run.rss_now_kib
                    result["outcome"] = run.outcome
                    try:
                        result["response"] = json.loads(run.payload)
                    except ValueError:
                        result["response"] = run.payload
            finally:
                run.finished.set()
                stop(proc, 3)
                current["proc"] = None
        # A CloudFormation answer is PUT before the function returns.
        result["cfn_responses"] = []
        for body in emulator.cfn_responses:
            try:
                result["cfn_responses"].append(json.loads(body))
            except ValueError:
                result["cfn_responses"].append(body)
        check(args, result, log_path)
        with open(args.out, "w") as f:
            json.dump(result, f)
    finally:
        stop(current["proc"], 1)
        emulator.close()
        if not args.log:
            try:
                os.remove(log_path)
            except OSError:
                pass
        shutil.rmtree(workdir, ignore_errors=True)


def check(args, result, log_path):
    """What the invocation must have produced (--expect-*)."""
    if not args.event:
        return
    where = f"\n--- {log_path} (tail)\n{tail(log_path)}"
    response = result.get("response")
    if args.expect_error is not None:
        if result.get("outcome") != "error" or args.expect_error not in json.dumps(response):
            fail(f"{args.function}: expected an invocation error with {args.expect_error!r}, "
                 f"got {result.get('outcome')}: {json.dumps(response)[:500]}{where}")
        return
    if result.get("outcome") != "response":
        fail(f"{args.function}: the invocation failed: {json.dumps(response)[:500]}{where}")
    if args.expect_status is not None:
        status = response.get("statusCode") if isinstance(response, dict) else None
        if status != args.expect_status:
            fail(f"{args.function}: expected HTTP {args.expect_status}, got {status}: {json.dumps(response)[:500]}{where}")
    if args.expect_cfn is not None:
        answers = [r for r in result["cfn_responses"] if isinstance(r, dict)]
        if not answers:
            fail(f"{args.function}: no CloudFormation answer was PUT to the ResponseURL{where}")
        if answers[-1].get("Status") != args.expect_cfn:
            fail(f"{args.function}: CloudFormation answer {answers[-1].get('Status')} "
                 f"(expected {args.expect_cfn}): {answers[-1].get('Reason')}{where}")


def describe(r):
    """One short phrase: what the invocation was (--label) and what it did."""
    resp = r.get("response")
    answers = [a for a in r.get("cfn_responses") or [] if isinstance(a, dict)]
    if answers:
        applied = len((answers[-1].get("Data") or {}).get("Applied") or [])
        detail = f"{answers[-1].get('Status')}, {applied} migration(s) applied"
    elif r.get("outcome") == "error" and isinstance(resp, dict):
        detail = f"error: {resp.get('errorMessage') or resp.get('errorType')}"
    elif isinstance(resp, dict) and "statusCode" in resp:
        detail = f"HTTP {resp['statusCode']}"
    elif isinstance(resp, dict) and isinstance(resp.get("summary"), dict):
        s = resp["summary"]
        parts = [f"{k} {v}" for k, v in s.items() if k != "batch_duration_ms_max" and v not in (0, False, None)]
        detail = ", ".join(parts) if parts else "nothing due"
    elif isinstance(resp, dict):
        # A report (the sweeper's counts, ses-events' outcome): what is not
        # zero; else the variant it names ({"Recorded": {"Recorded": {...}}}).
        def flat(value, path):
            if isinstance(value, dict) and value:
                for k, v in value.items():
                    yield from flat(v, path + [str(k)])
            else:
                yield path, value
        items = list(flat(resp, []))
        parts = [f"{'.'.join(p)} {v}" for p, v in items if v not in (0, 0.0, False, None, "", [], {})]
        variant = max((p[:-1] for p, _ in items), key=len, default=[]) if len(resp) == 1 else []
        detail = ", ".join(parts) if parts else ".".join(variant) if variant else "nothing to do"
    else:
        detail = json.dumps(resp, separators=(",", ":"))
    if len(detail) > 70:
        detail = detail[:67] + "..."
    return f"{r['label']}: {detail}" if r.get("label") else detail


def table(args):
    results = []
    for path in args.files:
        with open(path) as f:
            results.append(json.load(f))
    rows = []
    out = []
    for r in results:
        fn = r["function"]
        kib = r["zip_bytes"] / 1024.0
        init = r["init_ms"]
        med = statistics.median(init)
        rss = r["rss_kib"] / 1024.0 if r.get("rss_kib") else None
        what = describe(r) if "response" in r else (r.get("note") or "not invoked")
        rows.append((fn, f"{kib:,.0f}", f"{med:.1f} ({min(init):.1f}\u2013{max(init):.1f})",
                     f"{rss:.1f}" if rss is not None else "-", what))
        out += [(f"fn.{fn}.zip_kib", f"{kib:.0f}"), (f"fn.{fn}.init_ms", f"{med:.2f}"),
                (f"fn.{fn}.init_ms_min", f"{min(init):.2f}"), (f"fn.{fn}.init_ms_max", f"{max(init):.2f}")]
        if rss is not None:
            out.append((f"fn.{fn}.rss_mb", f"{rss:.1f}"))
    for fn, note in args.skipped or []:
        rows.append((fn, "-", "-", "-", note))
    header = ("function", "zip KiB", f"init ms median (min\u2013max), {args.runs} runs", "peak RSS MB", "invocation")
    widths = [max(len(str(x[i])) for x in rows + [header]) for i in range(len(header))]
    line = lambda cells: "  ".join(str(c).ljust(w) if i in (0, 4) else str(c).rjust(w)
                                   for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    print(line(header))
    print(line(["-" * w for w in widths]))
    for row in rows:
        print(line(row))
    if args.results:
        with open(args.results, "a") as f:
            for k, v in out:
                f.write(f"{k}\t{v}\n")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="cold starts and one invocation of one bootstrap.zip")
    m.add_argument("--function", required=True)
    m.add_argument("--zip", required=True)
    m.add_argument("--out", required=True, help="the JSON result")
    m.add_argument("--runs", type=int, default=5)
    m.add_argument("--event", help="JSON event of the last run's invocation (none: init only)")
    m.add_argument("--env-file", help="the function's environment, KEY=VALUE lines")
    m.add_argument("--region", default="us-east-1")
    m.add_argument("--memory", type=int, default=256, help="AWS_LAMBDA_FUNCTION_MEMORY_SIZE")
    m.add_argument("--deadline-secs", type=float, default=30.0, help="Lambda-Runtime-Deadline-Ms: now + this")
    # Lambda's init phase may last 10 s (docs.aws.amazon.com/lambda/latest/dg/lambda-runtime-environment.html):
    # a cold start that takes longer fails here as it would be cut short there.
    m.add_argument("--init-timeout", type=float, default=10.0, help="seconds until /invocation/next (Lambda's 10)")
    m.add_argument("--invoke-grace", type=float, default=15.0, help="waited beyond the deadline for the response")
    m.add_argument("--label", help="what the invocation is, for the table (e.g. POST /bookings)")
    m.add_argument("--log", help="keep the function's output here (default: dropped on success)")
    m.add_argument("--expect-status", type=int, help="the API Gateway response's statusCode")
    m.add_argument("--expect-cfn", help="the Status PUT to the ResponseURL (SUCCESS)")
    m.add_argument("--expect-error", help="the invocation must fail, its error containing this text")
    m.set_defaults(func=measure)
    t = sub.add_parser("table", help="the table of measure results")
    t.add_argument("files", nargs="*")
    t.add_argument("--runs", type=int, default=5)
    t.add_argument("--skip", dest="skipped", nargs=2, action="append", metavar=("FUNCTION", "WHY"))
    t.add_argument("--results", help="append key<TAB>value lines here")
    t.set_defaults(func=table)
    args = p.parse_args()
    args.func(args)


if __name__ == "__main__":
    main()
