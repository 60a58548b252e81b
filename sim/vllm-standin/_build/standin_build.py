"""A stdlib-only PEP 517/660 build backend for the vLLM stand-in.

pip builds the package in an isolated environment; with ``requires = []`` and
this in-tree backend (``backend-path``), nothing is downloaded: the stand-in
installs on a node without network access and without setuptools (Debian 13's
``python3 -m venv`` has pip only).

It writes a pure-Python wheel (``py3-none-any``) with the package from
``src/``, the metadata and the ``vllm`` console script, an editable wheel (a
``.pth`` pointing at ``src/``) and an sdist.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import tarfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / 'src'


def _project() -> dict:
    with open(ROOT / 'pyproject.toml', 'rb') as f:
        return tomllib.load(f)['project']


def _names() -> tuple[str, str, str]:
    project = _project()
    name = project['name']
    version = project['version']
    dist = name.replace('-', '_')
    return name, version, '%s-%s' % (dist, version)


def _metadata() -> str:
    project = _project()
    lines = ['Metadata-Version: 2.1', 'Name: %s' % project['name'], 'Version: %s' % project['version'],
             'Summary: %s' % project.get('description', ''), 'License: %s' % project.get('license', {}).get('text', ''),
             'Requires-Python: %s' % project.get('requires-python', '>=3.11')]
    return '\n'.join(lines) + '\n'


def _entry_points() -> str:
    scripts = _project().get('scripts', {})
    return '[console_scripts]\n' + ''.join('%s = %s\n' % item for item in sorted(scripts.items()))


def _wheel_file() -> str:
    return 'Wheel-Version: 1.0\nGenerator: standin_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n'


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode('ascii')
    return '%s,sha256=%s,%d' % (arcname, digest, len(data))


def _package_files() -> list[tuple[str, bytes]]:
    files = []
    for path in sorted(SRC.rglob('*.py')):
        if '__pycache__' in path.parts:
            continue
        files.append((path.relative_to(SRC).as_posix(), path.read_bytes()))
    return files


def _write_wheel(wheel_directory: str, files: list[tuple[str, bytes]]) -> str:
    _name, _version, stem = _names()
    dist_info = stem + '.dist-info'
    files = list(files) + [
        (dist_info + '/METADATA', _metadata().encode()),
        (dist_info + '/WHEEL', _wheel_file().encode()),
        (dist_info + '/entry_points.txt', _entry_points().encode()),
    ]
    record = [_record_line(arcname, data) for arcname, data in files] + [dist_info + '/RECORD,,']
    files.append((dist_info + '/RECORD', ('\n'.join(record) + '\n').encode()))
    basename = stem + '-py3-none-any.whl'
    os.makedirs(wheel_directory, exist_ok=True)
    with zipfile.ZipFile(os.path.join(wheel_directory, basename), 'w', compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files:
            info = zipfile.ZipInfo(arcname, date_time=(2026, 7, 31, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return basename


# ---------------------------------------------------------------------------- PEP 517 / 660 hooks

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _name, _version, stem = _names()
    dist_info = Path(metadata_directory) / (stem + '.dist-info')
    dist_info.mkdir(parents=True, exist_ok=True)
    (dist_info / 'METADATA').write_text(_metadata())
    (dist_info / 'WHEEL').write_text(_wheel_file())
    (dist_info / 'entry_points.txt').write_text(_entry_points())
    return dist_info.name


prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, _package_files())


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory, [('__editable__.vllm_standin.pth', (str(SRC) + '\n').encode())])


def build_sdist(sdist_directory, config_settings=None):
    _name, _version, stem = _names()
    basename = stem + '.tar.gz'
    os.makedirs(sdist_directory, exist_ok=True)
    with tarfile.open(os.path.join(sdist_directory, basename), 'w:gz') as tf:
        members = [ROOT / 'pyproject.toml', ROOT / 'README.md', Path(__file__)] + [p for p in sorted(SRC.rglob('*.py'))
                                                                                   if '__pycache__' not in p.parts]
        for path in members:
            tf.add(str(path), arcname='%s/%s' % (stem, path.relative_to(ROOT).as_posix()))
        pkg_info = _metadata().encode()
        info = tarfile.TarInfo('%s/PKG-INFO' % stem)
        info.size = len(pkg_info)
        tf.addfile(info, io.BytesIO(pkg_info))
    return basename
