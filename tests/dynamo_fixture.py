"""A test fixture, not a product part: Dynamo's own OpenAI-compatible frontend and its mocker engine (a simulated
worker, no GPU) on localhost, so that a real client (AIPerf, running a Spica benchmark plan) measures a real
Dynamo frontend. Both come from ``ai-dynamo`` in ``.venv-dynamo`` (``scripts/test.sh`` installs it, and AIPerf into
``.venv-aiperf``); they find each other through a discovery folder and a TCP request plane, so neither etcd nor
NATS is needed.

The model is built here (nothing can be downloaded): a character-level tokenizer, so that a prompt AIPerf builds
from its corpus is as many tokens for the mocker as AIPerf meant, laid out as a Hugging Face cache snapshot and
named by repo id with the hub offline (AIPerf 0.13.0 decodes trace prompts in worker processes that force offline
mode, where a tokenizer given as a local folder fails to load). Its vocabulary is large enough for the token ids
the mocker draws.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
AIPERF_BIN = REPO / ".venv-aiperf" / "bin" / "aiperf"
DYNAMO_PYTHON = REPO / ".venv-dynamo" / "bin" / "python"
MODEL = "spica-tests/char-level"
_SPECIALS = ("<s>", "</s>", "<pad>", "<unk>")


def model_snapshot(cache: Path) -> Path:
    """The model's folder (tokenizer and config) as the snapshot of ``MODEL`` in the Hugging Face cache ``cache``."""
    repo = cache / ("models--" + MODEL.replace("/", "--"))
    revision = "0" * 40
    folder = repo / "snapshots" / revision
    folder.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    chars = ([chr(c) for c in range(32, 127)] + ["\n", "\t"] + [chr(c) for c in range(0xA1, 0x250)]
             + [chr(c) for c in range(0x4E00, 0x4E00 + 32000)])
    vocab = {t: i for i, t in enumerate((*_SPECIALS, *chars))}
    (folder / "tokenizer.json").write_text(json.dumps({
        "version": "1.0", "truncation": None, "padding": None, "normalizer": None, "post_processor": None,
        "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i, t in enumerate(_SPECIALS)],
        "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "[\\s\\S]"}, "behavior": "Isolated", "invert": False},
        "decoder": {"type": "Fuse"}, "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}}))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 32768,
        "chat_template": "{% for m in messages %}{{ m['content'] }}{% endfor %}"}))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": len(vocab), "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "max_position_embeddings": 32768, "bos_token_id": 0, "eos_token_id": 1, "torch_dtype": "bfloat16"}))
    (folder / "generation_config.json").write_text(json.dumps({"bos_token_id": 0, "eos_token_id": 1}))
    return folder


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _stop(processes: list[subprocess.Popen[bytes]]) -> None:
    for p in processes:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in processes:
        try:
            p.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


@contextmanager
def dynamo_serving(work: Path, speedup: float = 1.0) -> Iterator[tuple[str, dict[str, str]]]:
    """Dynamo's frontend and one mocker worker serving ``MODEL`` on a free localhost port, stopped after. Yields
    the frontend's URL and the environment a client needs to find the model's tokenizer."""
    import httpx

    assert DYNAMO_PYTHON.exists(), "scripts/test.sh installs ai-dynamo into .venv-dynamo"
    folder = model_snapshot(work / "hf")
    hub = {"HF_HUB_CACHE": str(work / "hf"), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env = {**os.environ, **hub, "DYN_FILE_KV": str(work / "discovery"), "DYN_LOG": "warn",
           **{k: "127.0.0.1" for k in ("DYN_TCP_RPC_HOST", "DYN_EVENT_PLANE_HOST", "DYN_TCP_RESPONSE_STREAM_HOST",
                                       "DYN_SYSTEM_HOST")}}
    planes = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
    port = _free_port()
    logs = work / "dynamo-logs"
    logs.mkdir()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, args in (("mocker", ["--model-path", str(folder), "--model-name", MODEL, "--speedup-ratio",
                                       str(speedup)]),
                           ("frontend", ["--http-host", "127.0.0.1", "--http-port", str(port)])):
            with open(logs / f"{name}.log", "wb") as log:
                processes.append(subprocess.Popen([str(DYNAMO_PYTHON), "-m", f"dynamo.{name}", *args, *planes],
                                                  env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  start_new_session=True))
        url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + 120
        while True:
            try:
                if MODEL in httpx.get(f"{url}/v1/models", timeout=2).text:
                    break
            except httpx.TransportError:
                pass
            dead = [p for p in processes if p.poll() is not None]
            assert not dead and time.monotonic() < end, "Dynamo's frontend and mocker did not come up: " + " ".join(
                (logs / f"{n}.log").read_text()[-2000:] for n in ("mocker", "frontend"))
            time.sleep(0.25)
        yield url, {"TOKENIZER": MODEL, **hub}
    finally:
        _stop(processes)


def run_plan(plan: Path, work: Path, out: Path, speedup: float = 1.0) -> None:
    """Run a benchmark plan with the real AIPerf against Dynamo's frontend and mocker; AIPerf's export lands in
    ``out/<manifest name>/``. Fails with AIPerf's output."""
    assert AIPERF_BIN.exists(), "scripts/test.sh installs AIPerf into .venv-aiperf"
    with dynamo_serving(work, speedup) as (url, client):
        env = {**os.environ, "PATH": f"{AIPERF_BIN.parent}:{os.environ['PATH']}", "URL": url, "MODEL": MODEL,
               "OUT": str(out), **client}
        done = subprocess.run(["bash", str(plan)], env=env, cwd=work, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
