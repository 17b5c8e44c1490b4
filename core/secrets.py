"""Credentials at rest: AES-GCM sealing with a key kept in the OS credential store, or in our own file keyring.

The data key (256 bits) lives in a keyring under ``agenthost`` /
``credentials:<install>``. A real OS credential store (macOS Keychain, Windows
Credential Locker, Secret Service, KWallet) is used when keyring finds one; a
headless Linux box has none (keyring raises ``NoKeyringError``) and
``keyrings.alt`` would store plaintext, so :class:`FileKeyring` stands in: its
entries are AES-GCM sealed in ``keyring.json`` in the data directory, under a key
from ``$AGENTHOST_KEYRING_KEY`` or from the 0600 file ``keyring.key``. It ranks
below any real OS keyring.

Which keyring holds the data key is written to ``credentials.json`` when the key is
made, so a keyring that appears later never strands data sealed before it.
"""
import base64
import binascii
import hashlib
import json
import logging
import os
import secrets
import stat
import threading
from pathlib import Path

import keyring
import keyring.backend
import keyring.errors
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

log = logging.getLogger("agenthost.secrets")

SERVICE = "agenthost"
KEY_ENV = "AGENTHOST_KEYRING_KEY"
KEYRING_FILE = "keyring.json"
KEY_FILE = "keyring.key"
MARKER_FILE = "credentials.json"
TOKEN_PREFIX = "v1"

# keyring ranks backends by priority; real OS stores sit at 1 and above (5 for the usual ones),
# fail/null at 0 and below. keyrings.alt's plaintext files sit at 0.5 and are never "real".
FILE_PRIORITY = 0.9


class SecretsUnavailable(RuntimeError):
    """The data key cannot be read (keyring gone, key file unsafe, wrong key); the message is safe to show."""


class FileKeyring(keyring.backend.KeyringBackend):
    """A keyring backend for machines without an OS credential store: AES-GCM entries in one file.

    The file key comes from ``$AGENTHOST_KEYRING_KEY`` (32 bytes in base64, or any
    passphrase, stretched with HKDF) or from ``keyring.key`` (created 0600; refused
    when group or others may read it).
    """

    priority = FILE_PRIORITY

    def __init__(self, data_dir, environ=None):
        super().__init__()
        self.folder = Path(data_dir)
        self.environ = os.environ if environ is None else environ
        self._lock = threading.Lock()
        self._aead = None

    @property
    def path(self):
        return self.folder / KEYRING_FILE

    # -- keyring API ------------------------------------------------------------------------

    def get_password(self, service, username):
        blob = self._read().get(_entry(service, username))
        if blob is None:
            return None
        try:
            raw = base64.b64decode(blob, validate=True)
            return self._cipher().decrypt(raw[:12], raw[12:], _entry(service, username).encode()).decode()
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretsUnavailable(
                "the file keyring entry cannot be decrypted: its key changed "
                f"(${KEY_ENV} or {KEY_FILE})") from None

    def set_password(self, service, username, password):
        nonce = secrets.token_bytes(12)
        sealed = self._cipher().encrypt(nonce, password.encode(), _entry(service, username).encode())
        with self._lock:
            entries = self._read()
            entries[_entry(service, username)] = base64.b64encode(nonce + sealed).decode()
            self._write(entries)

    def delete_password(self, service, username):
        with self._lock:
            entries = self._read()
            if entries.pop(_entry(service, username), None) is None:
                raise keyring.errors.PasswordDeleteError("no such entry")
            self._write(entries)

    # -- storage ----------------------------------------------------------------------------

    def _read(self):
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            raise SecretsUnavailable(f"{KEYRING_FILE} in the data directory is unreadable") from None
        entries = data.get("entries") if isinstance(data, dict) else None
        return dict(entries) if isinstance(entries, dict) else {}

    def _write(self, entries):
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"version": 1, "entries": entries}, fh, indent=1, sort_keys=True)
        os.replace(tmp, self.path)

    def _cipher(self):
        if self._aead is None:
            self._aead = AESGCM(self._file_key())
        return self._aead

    def _file_key(self):
        given = self.environ.get(KEY_ENV)
        if given:
            return key_from_text(given)
        path = self.folder / KEY_FILE
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return _read_key_file(path)
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(base64.b64encode(secrets.token_bytes(32)).decode() + "\n")
        log.info("created %s for the file keyring", KEY_FILE)
        return _read_key_file(path)


# keyring registers every backend class for its own auto-detection; this one is chosen
# explicitly (it needs a data directory), so it stays out of that registry.
getattr(keyring.backend.KeyringBackend, "_classes", set()).discard(FileKeyring)


def key_from_text(text):
    """32 key bytes from ``text``: its base64 decoding when that is 32 bytes, else HKDF-SHA256 of it."""
    text = text.strip()
    padded = text + "=" * (-len(text) % 4)
    for decode in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decode(padded.encode("ascii"), validate=True) if decode is base64.b64decode else decode(padded)
        except (binascii.Error, ValueError, UnicodeEncodeError):
            continue
        if len(raw) == 32:
            return raw
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"agenthost-keyring-v1", info=b"file-keyring").derive(
        text.encode("utf-8"))


def _read_key_file(path):
    info = os.stat(path)
    if os.name == "posix":
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise SecretsUnavailable(f"{KEY_FILE} in the data directory may be read by other users: "
                                     "make it 0600 (chmod 600)")
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise SecretsUnavailable(f"{KEY_FILE} in the data directory belongs to another user")
    raw = base64.b64decode(Path(path).read_text(encoding="ascii").strip() or "", validate=False)
    if len(raw) != 32:
        raise SecretsUnavailable(f"{KEY_FILE} in the data directory does not hold a 256-bit key")
    return raw


def _entry(service, username):
    return f"{service}/{username}"


# -- choosing a keyring ----------------------------------------------------------------------

def is_real(backend):
    """True for an OS credential store: not fail/null, not a chainer, not a plaintext file."""
    module = type(backend).__module__
    if module.startswith("keyrings.alt") or module in ("keyring.backends.fail", "keyring.backends.null",
                                                       "keyring.backends.chainer"):
        return False
    if isinstance(backend, FileKeyring):
        return False
    try:
        return float(backend.priority) > FILE_PRIORITY
    except Exception:  # a backend whose priority check fails is not usable here
        return False


def os_keyring(candidates=None):
    """The best real OS keyring keyring offers, or None.

    ``candidates`` are backend instances to choose from (default: what keyring
    detects, honouring ``PYTHON_KEYRING_BACKEND`` and keyringrc).
    """
    if candidates is None:
        try:
            chosen = keyring.get_keyring()
        except Exception:
            return None
        candidates = getattr(chosen, "backends", None) or [chosen]
    real = [b for b in candidates if is_real(b)]
    return max(real, key=lambda b: float(b.priority)) if real else None


# -- the sealing box ------------------------------------------------------------------------

class CredentialBox:
    """Seals small secrets for the database: ``v1.<keyId>.<base64(nonce|ciphertext)>``.

    ``context`` (a table, row and field) is bound in as associated data, so a sealed
    value copied to another row or field does not open. The data key is loaded on
    first use; ``keyring_name`` says where it lives.
    """

    def __init__(self, data_dir, *, mode="auto", environ=None, candidates=None):
        if mode not in ("auto", "file"):
            raise ValueError("secrets.keyring must be auto or file")
        self.data_dir = Path(data_dir)
        self.mode = mode
        self.environ = os.environ if environ is None else environ
        self.candidates = candidates
        self._key = None
        self._key_id = None
        self._lock = threading.Lock()
        self.keyring_name = None

    @property
    def account(self):
        install = hashlib.sha256(str(self.data_dir.resolve()).encode()).hexdigest()[:16]
        return f"credentials:{install}"

    def seal(self, value, context):
        """``value`` (any JSON) sealed into a string that is safe to store."""
        key, key_id = self._data_key(replace_missing=True)
        nonce = secrets.token_bytes(12)
        plain = json.dumps(value, separators=(",", ":")).encode()
        sealed = AESGCM(key).encrypt(nonce, plain, context.encode())
        return f"{TOKEN_PREFIX}.{key_id}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open(self, token, context):
        """The value sealed in ``token``; raises SecretsUnavailable when it cannot be opened."""
        try:
            prefix, key_id, body = token.split(".", 2)
        except (AttributeError, ValueError):
            raise SecretsUnavailable("a stored credential is not in a known format") from None
        if prefix != TOKEN_PREFIX:
            raise SecretsUnavailable("a stored credential is not in a known format")
        key, current = self._data_key()
        if key_id != current:
            raise SecretsUnavailable("a stored credential was sealed with another key: enter it again")
        try:
            raw = base64.urlsafe_b64decode(body)
            return json.loads(AESGCM(key).decrypt(raw[:12], raw[12:], context.encode()))
        except (InvalidTag, ValueError, binascii.Error):
            raise SecretsUnavailable("a stored credential cannot be decrypted: enter it again") from None

    # -- the data key -----------------------------------------------------------------------

    def _data_key(self, replace_missing=False):
        if self._key is None:
            with self._lock:
                if self._key is None:
                    self._key = self._load_key(replace_missing)
                    self._key_id = hashlib.sha256(b"agenthost-key-id" + self._key).hexdigest()[:8]
        return self._key, self._key_id

    def _marker(self):
        try:
            data = json.loads((self.data_dir / MARKER_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            raise SecretsUnavailable(f"{MARKER_FILE} in the data directory is unreadable") from None
        return data.get("keyring") if isinstance(data, dict) else None

    def _backend(self, recorded):
        file_backend = FileKeyring(self.data_dir, self.environ)
        if recorded == "file" or (recorded is None and self.mode == "file"):
            return "file", file_backend
        real = os_keyring(self.candidates)
        if recorded == "os":
            if real is None:
                raise SecretsUnavailable("the credentials key is kept in the OS credential store, "
                                         "which is not available now")
            return "os", real
        return ("os", real) if real is not None else ("file", file_backend)

    def _load_key(self, replace_missing=False):
        recorded = self._marker()
        name, backend = self._backend(recorded)
        try:
            stored = backend.get_password(SERVICE, self.account)
        except SecretsUnavailable:
            raise
        except Exception as exc:
            raise SecretsUnavailable(f"the credential store could not be read ({type(exc).__name__})") from None
        if stored is not None:
            key = _decode_key(stored)
        elif recorded is not None and not replace_missing:
            raise SecretsUnavailable("the credentials key is missing from the credential store: "
                                     "stored credentials must be entered again")
        else:
            if recorded is not None:
                # The old key is gone for good (its entry was deleted): what it sealed is lost
                # either way, and new credentials need a key.
                log.warning("the credentials key was missing from the %s keyring: a new one is made", name)
            key = secrets.token_bytes(32)
            try:
                backend.set_password(SERVICE, self.account, base64.b64encode(key).decode())
            except Exception as exc:
                if name == "file":
                    raise
                # A store that lists itself but refuses writes (a locked session keyring).
                log.warning("OS credential store refused the key (%s); using the file keyring",
                            type(exc).__name__)
                name, backend = "file", FileKeyring(self.data_dir, self.environ)
                backend.set_password(SERVICE, self.account, base64.b64encode(key).decode())
            self._write_marker(name)
        self.keyring_name = name
        return key

    def _write_marker(self, name):
        self.data_dir.mkdir(parents=True, exist_ok=True)
        path = self.data_dir / MARKER_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"keyring": name, "service": SERVICE, "account": self.account}, indent=1),
                       encoding="utf-8")
        os.replace(tmp, path)


def _decode_key(text):
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise SecretsUnavailable("the credentials key in the credential store is damaged")
    return raw


def box_for(host):
    """The host's CredentialBox (one per host, made on first use)."""
    box = host.service("credentials")
    if box is None:
        box = CredentialBox(host.data_dir, mode=host.config.get("secrets.keyring", "auto"))
        host.provide("credentials", box)
    return box
