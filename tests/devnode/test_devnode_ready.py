"""The readiness wait takes only the node's own answers: a server of another process on the node's port (which
took it between the launcher's check and the node's bind) is not the node being ready. No real node here: a
stand-in server answers as a ready node would, with another pid."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from neardup_devnode.errors import NodeStartError
from neardup_devnode.handles import RunningNode
from neardup_devnode.node import _wait_ready


class ReadyNode(BaseHTTPRequestHandler):
    """Answers health and node info as a ready single node whose server process is ``pid``."""

    pid = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path.startswith("/_cluster/health"):
            body = {"status": "green", "number_of_nodes": 1}
        elif self.path.startswith("/_nodes/_local/process"):
            body = {"nodes": {"n1": {"process": {"id": self.pid}}}}
        else:
            self.send_error(404)
            return
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ReadyNode)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _node(server: ThreadingHTTPServer, tmp_path: Path) -> RunningNode:
    port = server.server_address[1]
    return RunningNode(url=f"http://127.0.0.1:{port}", name="n", node_dir=tmp_path, log_path=tmp_path / "console.log",
                       http_port=int(port))


def test_another_process_on_the_port_is_not_the_node_ready(server: ThreadingHTTPServer, tmp_path: Path) -> None:
    # "Our node": a process that stays up a few seconds and exits, as a node does when its port is taken.
    proc = subprocess.Popen(["sleep", "3"], start_new_session=True)
    ReadyNode.pid = 1  # the stand-in says it is init: not in our process group
    with pytest.raises(NodeStartError, match="exited with code 0 before becoming ready"):
        _wait_ready(_node(server, tmp_path), proc, timeout=60)


def test_the_nodes_own_answer_is_ready(server: ThreadingHTTPServer, tmp_path: Path) -> None:
    proc = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        ReadyNode.pid = proc.pid
        _wait_ready(_node(server, tmp_path), proc, timeout=30)
    finally:
        proc.kill()
        proc.wait()
