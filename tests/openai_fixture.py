"""A test fixture, not a product part: a small OpenAI-compatible chat server on localhost that streams
``max_tokens`` chunks, the first after ``first_ms`` and the others ``gap_ms`` apart, so that a real client
(AIPerf, running a Spica benchmark plan) has something to measure.

    python tests/openai_fixture.py PORT FIRST_MS GAP_MS
"""
import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request       # (module level: FastAPI reads the handlers' annotations)
from fastapi.responses import StreamingResponse

MODEL = "fixture-model"


def make_app(first_ms: float, gap_ms: float) -> FastAPI:
    app = FastAPI()

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": MODEL, "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> StreamingResponse:
        body = await request.json()
        tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)

        def chunk(delta: dict[str, str], finish: str | None) -> str:
            return "data: " + json.dumps({"id": "fixture", "object": "chat.completion.chunk", "model": MODEL,
                                          "created": int(time.time()),
                                          "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}) + "\n\n"

        async def stream() -> AsyncIterator[str]:
            await asyncio.sleep(first_ms / 1000)
            for i in range(tokens):
                if i:
                    await asyncio.sleep(gap_ms / 1000)
                yield chunk({"content": " word"}, None)
            yield chunk({}, "length")
            yield "data: [DONE]\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream")

    return app


if __name__ == "__main__":
    import uvicorn

    port, first, gap = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
    uvicorn.run(make_app(first, gap), host="127.0.0.1", port=port, log_level="error")
