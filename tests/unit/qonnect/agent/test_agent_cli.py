"""`qonnect agent` refuses bad arguments with a message naming the option, never a traceback."""

from __future__ import annotations

import pytest
from qonnect.cli import main


@pytest.fixture
def files(tmp_path):
    kubeconfig = tmp_path / "kubeconfig.yaml"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    token = tmp_path / "token"
    token.write_text("s3cret-token-value\n")
    return kubeconfig, token


def run(capsys, files, *extra, token=None):
    kubeconfig, token_file = files
    argv = ["agent", "--cluster", "edge-1", "--kubeconfig", str(kubeconfig), "--kb", "http://127.0.0.1:1"]
    argv += ["--token-file", str(token or token_file), *extra]
    rc = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and "s3cret" not in err
    return rc, err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--interval", "0"], "--interval: expected a number of seconds > 0"),
        (["--outbox-size", "1"], "--outbox-size: expected at least 2"),
        (["--peers", "fog-1"], "--peers entry 'fog-1': expected name=https://host:port"),
        (["--peers", "fog-1=ftp://x"], "URL must be http(s)://host[:port]"),
        (["--peers", "a=http://x:1,a=http://y:2"], "peer 'a' is given twice"),
        (["--peers", "kb=http://x:1"], "'kb' is reserved"),
        (["--source-address", "not-an-ip"], "--source-address: expected an IP address"),
        (["--kb-ca", "/nonexistent/ca.pem"], "--kb-ca /nonexistent/ca.pem: file missing"),
    ],
)
def test_bad_option_is_named(capsys, files, extra, message):
    rc, err = run(capsys, files, *extra)
    assert rc == 2
    assert message in err


def test_missing_kubeconfig_and_empty_token(capsys, files, tmp_path):
    rc, err = run(capsys, (tmp_path / "missing.yaml", files[1]))
    assert rc == 2 and "--kubeconfig" in err and "missing or not readable" in err
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    rc, err = run(capsys, files, token=empty)
    assert rc == 2 and "--token-file" in err and "empty" in err


def test_bad_kb_url(capsys, files):
    kubeconfig, token = files
    rc = main(
        [
            "agent",
            "--cluster",
            "c",
            "--kubeconfig",
            str(kubeconfig),
            "--kb",
            "kb:8080",
            "--token-file",
            str(token),
        ]
    )
    assert rc == 2
    assert "--kb: expected an http:// or https:// URL" in capsys.readouterr().err
