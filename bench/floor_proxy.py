"""The passthrough floor of ``bench/load.py``: the smallest honest reverse proxy, starlette +
httpx, streaming the request body up and the response bytes back, nothing else. It is what
any proxy costs on this machine; the gap between it and ``serve`` is what ours adds.
Run as ``python3 -m context_engine.bench.floor_proxy --port P --upstream http://127.0.0.1:Q/v1``.
"""

from __future__ import annotations

import argparse

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

HOP = {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade"}


def build_app(upstream: str) -> Starlette:
    client = httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0),
                               limits=httpx.Limits(max_connections=1000, max_keepalive_connections=200))

    async def forward(request: Request) -> Response:
        url = upstream.rstrip("/") + "/" + request.path_params["path"]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP}
        up = client.build_request(request.method, url, headers=headers, content=await request.body(),
                                  params=request.query_params)
        r = await client.send(up, stream=True)
        out = {k: v for k, v in r.headers.items() if k.lower() not in HOP | {"content-encoding"}}
        return StreamingResponse(r.aiter_raw(), status_code=r.status_code, headers=out,
                                 background=BackgroundTask(r.aclose))

    async def healthz(request: Request) -> Response:
        return JSONResponse({"ok": True})

    return Starlette(routes=[Route("/healthz", healthz),
                             Route("/v1/{path:path}", forward, methods=["GET", "POST"])])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream", required=True)
    a = p.parse_args()
    uvicorn.run(build_app(a.upstream), host="127.0.0.1", port=a.port, log_level="critical",
                access_log=False)


if __name__ == "__main__":
    main()
