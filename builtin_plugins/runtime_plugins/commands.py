"""``core plugins pack DIR``: build a plugin package zip and its sha256 sidecar."""
import hashlib
import os
import zipfile
from pathlib import Path

import click

SKIP_DIRS = {"__pycache__", ".git", ".venv", "node_modules", ".pytest_cache"}


@click.command("pack")
@click.argument("directory", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Zip to write (default: <id>-<version>.zip in the current folder).")
def pack(directory, output):
    """Validate DIR as a runtime plugin and write <id>-<version>.zip plus <zip>.sha256."""
    from . import package as pkg

    files = []
    for root, dirs, names in os.walk(directory):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            path = Path(root) / name
            if path.is_symlink():
                raise click.ClickException(f"links cannot be packaged: {path.relative_to(directory)}")
            if name.endswith(".pyc"):
                continue
            files.append(path)
    buffer_path = (output or Path.cwd() / "plugin.zip").with_suffix(".partial")
    with zipfile.ZipFile(buffer_path, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in files:
            archive.write(path, path.relative_to(directory).as_posix())
    data = buffer_path.read_bytes()
    try:
        package = pkg.read(data)
    except pkg.PackageError as exc:
        buffer_path.unlink()
        details = "; ".join(f"{k}: {', '.join(v)}" for k, v in exc.errors.items())
        raise click.ClickException(f"{exc}{' (' + details + ')' if details else ''}")
    target = output or Path.cwd() / f"{package.manifest['id']}-{package.manifest['version']}.zip"
    os.replace(buffer_path, target)
    digest = hashlib.sha256(data).hexdigest()
    Path(str(target) + ".sha256").write_text(f"{digest}  {target.name}\n", encoding="utf-8")
    click.echo(f"{target} ({len(data)} bytes)")
    click.echo(f"sha256 {digest}")


@click.group("plugins")
def plugins_group():
    """Runtime plugin commands."""


plugins_group.add_command(pack)
