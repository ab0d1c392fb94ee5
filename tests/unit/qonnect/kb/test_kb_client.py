"""The KB client: stdlib only, clear KBErrors, never the token in messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.qonnect.core.plugins.module_utils import kb_client
from ansible_collections.qonnect.core.plugins.module_utils.kb_client import KBClient, KBError


def test_a_bad_url_is_a_clear_error():
    with pytest.raises(KBError) as err:
        KBClient("127.0.0.1:8080", "t")
    assert "kb_url" in str(err.value)


def test_repr_hides_the_token():
    client = KBClient("http://127.0.0.1:1", "qkb_very-secret")
    assert "very-secret" not in repr(client) and "***" in repr(client)


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b'{"detail": "name: taken"}', "name: taken"),
        (b'{"detail": [{"loc": ["body", "seq"], "msg": "bad"}]}', "body.seq: bad"),
        (b"<html>proxy error</html>", "<html>proxy error</html>"),
        (b"", "no error message"),
    ],
)
def test_error_details_are_extracted(raw, expected):
    assert kb_client._detail(raw) == expected


def test_names_in_paths_are_checked_and_quoted():
    assert kb_client._quote("a/b") == "a%2Fb"
    with pytest.raises(KBError):
        kb_client._quote("")


def test_an_unreadable_ca_bundle_is_named(tmp_path):
    with pytest.raises(KBError) as err:
        KBClient("https://127.0.0.1:1", "t", ca_path=str(tmp_path / "missing.pem"))
    assert "kb_ca_path" in str(err.value)


def test_imports_with_the_standard_library_only():
    # the directory holding ansible_collections/, wherever the collection is (venv link, ansible-test copy)
    collections = Path(kb_client.__file__).parents[5]
    code = (
        f"import sys; sys.path.insert(0, {str(collections)!r}); "
        "import ansible_collections.qonnect.core.plugins.module_utils.kb_client as m; "
        "print(sorted(k for k in sys.modules if k.split('.')[0] in "
        "('yaml', 'requests', 'pydantic', 'fastapi', 'urllib3')))"
    )
    out = subprocess.run(
        [sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]"
