"""`qonnect kb` commands: TLS serving, token management, and clear errors for bad options."""

from __future__ import annotations

import datetime
import ipaddress
import json
import subprocess
import sys

import pytest
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

pytestmark = pytest.mark.timeout(120)

# `python -m qonnect.cli` would load cli.py twice (as __main__ too); run main() instead
MAIN = "import sys; from qonnect.cli import main; sys.exit(main())"


def qonnect(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", MAIN, *args], capture_output=True, text=True, timeout=60, check=False
    )


def self_signed(tmp_path) -> tuple[str, str]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "qonnect-kb-test")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "kb.crt", tmp_path / "kb.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return str(cert_path), str(key_path)


def test_tls_with_a_given_certificate(tmp_path, kb_process, make_token):
    db_url = f"sqlite://{tmp_path / 'kb.sqlite'}"
    token = make_token(db_url, "admin")
    cert, key = self_signed(tmp_path)
    kb = kb_process(db_url, "--tls-cert", cert, "--tls-key", key)
    assert kb.url.startswith("https://")
    assert KBClient(kb.url, token, ca_path=cert).list_clusters() == []
    assert KBClient(kb.url, token, validate_certs=False).list_clusters() == []
    with pytest.raises(KBError) as err:
        KBClient(kb.url, token).list_clusters()  # the system CAs do not know this certificate
    assert err.value.status == 0 and "CERTIFICATE_VERIFY_FAILED" in err.value.message


def test_tokens_are_listed_without_secrets_and_revoked_by_name(tmp_path, kb_process, capsys):
    from qonnect.cli import main

    db_url = f"sqlite://{tmp_path / 'kb.sqlite'}"
    assert main(["kb", "token", "create", "--db", db_url, "--role", "reader", "--name", "ops"]) == 0
    token = capsys.readouterr().out.strip()
    assert main(["kb", "token", "list", "--db", db_url]) == 0
    listed = capsys.readouterr().out
    assert json.loads(listed)[0]["name"] == "ops" and token not in listed
    kb = kb_process(db_url)
    assert KBClient(kb.url, token).list_clusters() == []
    assert main(["kb", "token", "revoke", "--db", db_url, "--name", "ops"]) == 0
    kb.stop()
    kb = kb_process(db_url)
    with pytest.raises(KBError) as err:
        KBClient(kb.url, token).list_clusters()
    assert err.value.status == 401


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("kb", "serve", "--db", "sqlite:///nonexistent-dir/kb.sqlite"), "does not exist"),
        (("kb", "serve", "--db", "postgresql://127.0.0.1:1/nothing"), "cannot connect"),
        (("kb", "serve", "--tls-cert", "/etc/hostname"), "--tls-cert and --tls-key"),
        (("kb", "serve", "--max-body", "10"), "--max-body"),
        (("kb", "token", "create", "--role", "agent"), "--cluster is required"),
        (("kb", "token", "create", "--role", "agent", "--cluster", "Bad_Name"), "DNS label"),
    ],
)
def test_bad_options_fail_with_a_clear_message(tmp_path, capsys, args, message):
    from qonnect.cli import main

    db = ("--db", f"sqlite://{tmp_path / 'kb.sqlite'}") if "--db" not in args else ()
    assert main([*args, *db]) == 2
    assert message in capsys.readouterr().err


def test_the_command_exits_2_without_a_traceback():
    done = qonnect("kb", "token", "create", "--db", "sqlite:///nonexistent-dir/kb", "--role", "admin")
    assert done.returncode == 2
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr


def test_migrate_reports_the_schema_version(tmp_path):
    from qonnect.kb.migrations import LATEST

    done = qonnect("kb", "migrate", "--db", f"sqlite://{tmp_path / 'kb.sqlite'}")
    assert done.returncode == 0 and f"schema at version {LATEST}" in done.stdout
