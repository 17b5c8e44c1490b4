"""Credentials at rest: AES-GCM sealing, the data key in a real OS keyring when there is one, else our file keyring."""
import base64
import json
import os
import stat

import keyring.backend
import pytest

from core.secrets import (KEY_ENV, CredentialBox, FileKeyring, SecretsUnavailable, is_real, key_from_text,
                          os_keyring)


class MemoryKeyring(keyring.backend.KeyringBackend):
    """A real (if volatile) keyring backend standing in for an OS credential store."""

    priority = 5

    def __init__(self):
        super().__init__()
        self.entries = {}

    def get_password(self, service, username):
        return self.entries.get((service, username))

    def set_password(self, service, username, password):
        self.entries[(service, username)] = password

    def delete_password(self, service, username):
        self.entries.pop((service, username), None)


class PlaintextKeyring(MemoryKeyring):
    """Ranked like keyrings.alt's plaintext file: never counted as an OS store."""

    priority = 0.5


# keyring registers every subclass for its own detection; these must not leak into other tests.
for cls in (MemoryKeyring, PlaintextKeyring):
    keyring.backend.KeyringBackend._classes.discard(cls)


def test_a_sealed_value_opens_again_and_holds_no_plaintext(tmp_path):
    box = CredentialBox(tmp_path, mode="file", environ={})
    token = box.seal({"API_KEY": "sk-very-secret"}, "mcp_servers:a:env")
    assert "sk-very-secret" not in token and token.startswith("v1.")
    assert CredentialBox(tmp_path, mode="file", environ={}).open(token, "mcp_servers:a:env") == {
        "API_KEY": "sk-very-secret"}


def test_a_sealed_value_does_not_open_in_another_row_or_field(tmp_path):
    box = CredentialBox(tmp_path, mode="file", environ={})
    token = box.seal({"A": "1"}, "mcp_servers:a:env")
    for context in ("mcp_servers:b:env", "mcp_servers:a:headers"):
        with pytest.raises(SecretsUnavailable):
            box.open(token, context)


def test_a_tampered_value_is_refused(tmp_path):
    box = CredentialBox(tmp_path, mode="file", environ={})
    prefix, key_id, body = box.seal({"A": "1"}, "ctx").split(".", 2)
    raw = bytearray(base64.urlsafe_b64decode(body))
    raw[-1] ^= 1
    with pytest.raises(SecretsUnavailable):
        box.open(f"{prefix}.{key_id}.{base64.urlsafe_b64encode(bytes(raw)).decode()}", "ctx")
    with pytest.raises(SecretsUnavailable):
        box.open("not a token", "ctx")


def test_without_an_os_keyring_the_key_goes_to_the_file_keyring_with_a_0600_key_file(tmp_path):
    box = CredentialBox(tmp_path, mode="auto", environ={}, candidates=[])
    box.seal("x", "ctx")
    assert box.keyring_name == "file"
    key_file = tmp_path / "keyring.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    stored = (tmp_path / "keyring.json").read_text()
    data_key = json.loads(stored)["entries"]
    assert list(data_key) == [f"agenthost/{box.account}"]
    # The data key itself is sealed in the keyring file, never written in the clear.
    assert base64.b64encode(box._data_key()[0]).decode() not in stored
    assert json.loads((tmp_path / "credentials.json").read_text())["keyring"] == "file"


def test_a_key_file_others_may_read_is_refused(tmp_path):
    CredentialBox(tmp_path, mode="file", environ={}).seal("x", "ctx")
    os.chmod(tmp_path / "keyring.key", 0o644)
    with pytest.raises(SecretsUnavailable, match="chmod 600"):
        CredentialBox(tmp_path, mode="file", environ={}).seal("x", "ctx")


def test_the_file_keyring_key_may_come_from_the_environment(tmp_path):
    env = {KEY_ENV: base64.b64encode(os.urandom(32)).decode()}
    token = CredentialBox(tmp_path, mode="file", environ=env).seal("x", "ctx")
    assert not (tmp_path / "keyring.key").exists()
    assert CredentialBox(tmp_path, mode="file", environ=env).open(token, "ctx") == "x"
    with pytest.raises(SecretsUnavailable):
        CredentialBox(tmp_path, mode="file", environ={KEY_ENV: "another passphrase"}).open(token, "ctx")


def test_a_passphrase_is_stretched_and_a_base64_key_used_as_is():
    raw = os.urandom(32)
    assert key_from_text(base64.b64encode(raw).decode()) == raw
    assert key_from_text(base64.urlsafe_b64encode(raw).decode().rstrip("=")) == raw
    assert key_from_text("correct horse") == key_from_text("correct horse") != key_from_text("battery")
    assert len(key_from_text("correct horse")) == 32


def test_a_real_os_keyring_is_preferred_and_no_key_file_is_written(tmp_path):
    store = MemoryKeyring()
    box = CredentialBox(tmp_path, mode="auto", environ={}, candidates=[FileKeyring(tmp_path), store])
    token = box.seal({"A": "1"}, "ctx")
    assert box.keyring_name == "os"
    assert list(store.entries) == [("agenthost", box.account)]
    assert not (tmp_path / "keyring.key").exists() and not (tmp_path / "keyring.json").exists()
    again = CredentialBox(tmp_path, mode="auto", environ={}, candidates=[store])
    assert again.open(token, "ctx") == {"A": "1"}


def test_data_sealed_under_the_os_keyring_is_not_stranded_by_a_new_key(tmp_path):
    """When the OS store disappears, the host says so instead of making a fresh key."""
    CredentialBox(tmp_path, mode="auto", environ={}, candidates=[MemoryKeyring()]).seal("x", "ctx")
    with pytest.raises(SecretsUnavailable, match="not available"):
        CredentialBox(tmp_path, mode="auto", environ={}, candidates=[]).seal("x", "ctx")


def test_once_in_the_file_keyring_a_later_os_keyring_does_not_take_over(tmp_path):
    token = CredentialBox(tmp_path, mode="auto", environ={}, candidates=[]).seal("x", "ctx")
    store = MemoryKeyring()
    later = CredentialBox(tmp_path, mode="auto", environ={}, candidates=[store])
    assert later.open(token, "ctx") == "x"
    assert later.keyring_name == "file" and store.entries == {}


def test_the_file_keyring_ranks_below_real_stores_and_above_none():
    store = MemoryKeyring()
    assert os_keyring([FileKeyring("/tmp"), PlaintextKeyring(), store]) is store
    assert os_keyring([FileKeyring("/tmp"), PlaintextKeyring()]) is None
    assert not is_real(FileKeyring("/tmp")) and not is_real(PlaintextKeyring()) and is_real(store)


def test_keyring_auto_detection_never_instantiates_the_file_keyring():
    assert FileKeyring not in keyring.backend.KeyringBackend._classes
