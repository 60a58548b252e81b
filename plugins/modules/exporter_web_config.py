#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: dgxspark.cluster contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: exporter_web_config
short_description: Write a Prometheus exporter web configuration file with one basic-auth user (bcrypt)
version_added: 0.1.0
description:
  - Writes the file node exporter reads with C(--web.config.file) (the Prometheus exporter-toolkit format)
    holding C(basic_auth_users) with one user and the bcrypt hash of O(password).
  - The hash is made on the node by the system's libcrypt (libxcrypt, C($2b$), cost 10), so the controller needs no
    bcrypt library. The password travels in the module's arguments (never argv, never logged, C(no_log)); it is
    never written, only its hash.
  - Idempotent, when the file already holds the user with a hash that verifies O(password), nothing is written
    (a new salt would change the file at every run). The file is replaced atomically.
author:
  - dgxspark.cluster maintainers (!UNKNOWN)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    platforms: posix
options:
  path:
    description: The web configuration file.
    type: path
    required: true
  user:
    description: The basic-auth user name (no colon, no control characters).
    type: str
    required: true
  password:
    description: Its password (a vaulted variable).
    type: str
    required: true
  owner:
    description: Owner of the file.
    type: str
    default: root
  group:
    description: Group of the file (the exporter's, so that it can read it).
    type: str
    default: root
  mode:
    description: Mode of the file.
    type: raw
    default: "0640"
"""

EXAMPLES = r"""
- name: Require basic auth at node exporter
  dgxspark.cluster.exporter_web_config:
    path: /etc/dgxspark/node-exporter-web.yml
    user: prometheus
    password: "{{ metrics_exporter_basic_auth_password }}"
    group: prometheus
"""

RETURN = r"""
msg:
  description: What was done.
  type: str
  returned: always
  sample: /etc/dgxspark/node-exporter-web.yml requires basic auth as prometheus (bcrypt)
"""

import ctypes
import ctypes.util
import os
import re

from ansible.module_utils.basic import AnsibleModule

HEADER = '# Written by dgxspark.cluster (metrics role): node exporter --web.config.file. Do not edit.\n'
_HASH = re.compile(r'^\$2[aby]\$\d\d\$[./A-Za-z0-9]{53}$')


def _libcrypt():
    name = ctypes.util.find_library('crypt') or 'libcrypt.so.1'
    lib = ctypes.CDLL(name)
    lib.crypt.restype = ctypes.c_char_p
    lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    lib.crypt_gensalt.restype = ctypes.c_char_p
    lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]
    return lib


def bcrypt_hash(lib, password, salt=None):
    """bcrypt of password with salt (a whole hash or a '$2b$10$...' setting); a new salt when None."""
    if salt is None:
        salt = lib.crypt_gensalt(b'$2b$', 10, None, 0)
        if not salt:
            raise OSError('crypt_gensalt($2b$) failed: this libcrypt has no bcrypt')
    elif isinstance(salt, str):
        salt = salt.encode('ascii')
    out = lib.crypt(password.encode('utf-8'), salt)
    text = (out or b'').decode('ascii', 'replace')
    if not _HASH.match(text):
        raise OSError('libcrypt returned no bcrypt hash (%s)' % ('nothing' if not text else 'a %d-character string' % len(text)))
    return text


def read_existing(path):
    """{user: hash} of a file this module wrote ({} when missing or not ours)."""
    users = {}
    try:
        with open(path, encoding='utf-8') as handle:
            text = handle.read()
    except OSError:
        return users
    inside = False
    for line in text.splitlines():
        if line.strip() == 'basic_auth_users:':
            inside = True
            continue
        match = re.match(r'^  ([^:\s]+): "?(\$2[aby]\$[^"\s]+)"?\s*$', line) if inside else None
        if match:
            users[match.group(1)] = match.group(2)
    return users


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            user=dict(type='str', required=True),
            password=dict(type='str', required=True, no_log=True),
            owner=dict(type='str', default='root'),
            group=dict(type='str', default='root'),
            mode=dict(type='raw', default='0640'),
        ),
        supports_check_mode=True,
    )
    path, user, password = module.params['path'], module.params['user'], module.params['password']
    if not user or ':' in user or any(ord(c) < 32 for c in user) or not re.match(r'^[A-Za-z0-9_.@-]+$', user):
        module.fail_json(msg='user %r: expected a name of letters, digits and _.@- (no colon)' % user)
    if not password:
        module.fail_json(msg='the password is empty')
    try:
        lib = _libcrypt()
        current = read_existing(path).get(user)
        same = current is not None and bcrypt_hash(lib, password, current) == current
        changed = not same
        if changed and not module.check_mode:
            digest = bcrypt_hash(lib, password)
            tmp = '%s.%d.tmp' % (path, os.getpid())
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, 'w', encoding='utf-8') as handle:
                handle.write(HEADER + 'basic_auth_users:\n  %s: "%s"\n' % (user, digest))
            module.atomic_move(tmp, path)
    except OSError as exc:
        module.fail_json(msg='%s: %s' % (path, exc))
    file_args = module.load_file_common_arguments(dict(path=path, owner=module.params['owner'], group=module.params['group'],
                                                       mode=module.params['mode']))
    if os.path.exists(path):
        changed = module.set_fs_attributes_if_different(file_args, changed)
    module.exit_json(changed=changed, msg='%s requires basic auth as %s (bcrypt)%s'
                     % (path, user, '' if not changed else ' (written)' if not module.check_mode else ' (would be written)'))


if __name__ == '__main__':
    main()
