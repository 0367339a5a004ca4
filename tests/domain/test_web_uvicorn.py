"""The web application under a real uvicorn server on a loopback port: a real redirect."""

from __future__ import annotations

import socket
from pathlib import Path

import anyio
import httpx
import uvicorn

from domain.web import WebConfig, create_app


class Server(uvicorn.Server):
    """A uvicorn server that says when it is ready, instead of being polled for it."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = anyio.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self.ready.set()


async def test_a_real_redirect_round_trip_under_uvicorn(tmp_path: Path) -> None:
    app = create_app(WebConfig(db=tmp_path / "web.db", app_options={"refill_watermark": 5}))
    # Bound before the server starts, so the port cannot be taken in between.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, lifespan="on", log_level="warning", ws="none", http="h11")
    server = Server(config)
    with sock:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            with anyio.fail_after(10):
                await server.ready.wait()
            base = f"http://127.0.0.1:{port}"
            try:
                async with httpx.AsyncClient(base_url=base, timeout=5) as client:
                    created = await client.post("/links", json={"url": "https://example.com/x"})
                    assert created.status_code == 201
                    code = created.json()["code"]
                    assert created.json()["short_url"] == f"{base}/{code}"
                    r = await client.get(f"/{code}", follow_redirects=False)
                    assert r.status_code == 302
                    assert r.headers["location"] == "https://example.com/x"
                    assert (await client.get("/no-such")).status_code == 404
            finally:
                server.should_exit = True
    assert not hasattr(app.state, "domain")  # the lifespan ran its shutdown
