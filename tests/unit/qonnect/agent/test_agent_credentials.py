"""A 401 from the cluster API is refused credentials, not a cluster down (issue 22, item 3)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from qonnect.agent.collector import Collector, ForbiddenError
from support.specs import kubeconfig as kubeconfig_doc


class Unauthorized(BaseHTTPRequestHandler):
    def do_GET(self):
        data = json.dumps({"kind": "Status", "status": "Failure", "reason": "Unauthorized", "code": 401})
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass


def test_401_is_credentials_refused_on_a_reachable_cluster(tmp_path):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Unauthorized)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        kubeconfig = tmp_path / "kubeconfig.yaml"
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        kubeconfig.write_text(yaml.safe_dump(kubeconfig_doc(url, "revoked-token")))
        with pytest.raises(ForbiddenError) as err:
            Collector(str(kubeconfig), timeout=5).collect()
        assert err.value.status == 401
        assert "refuses the agent's credentials" in str(err.value)
        assert "revoked-token" not in str(err.value)
    finally:
        httpd.shutdown()
        httpd.server_close()
